"""The COPY reader's pieces that need no database: the query it sends and the exact conversion of values carried as PostgreSQL's text."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from rivc.adapters.connectors.postgres.copy import CopyPlan, arrow_type, convert
from rivc.compiler.dbtypes import DbColumn
from rivc.compiler.dialects import dialect
from rivc.compiler.errors import ConnectorError


def plan_of(*columns: DbColumn, declared: dict[str, str] | None = None) -> CopyPlan:
    declared = declared or {}
    return CopyPlan(
        [dialect("postgres").delivery(c, declared.get(c.name)) for c in columns], "source s.t"
    )


def test_select_reads_timestamptz_in_utc_as_text_and_applies_the_predicate():
    plan = plan_of(
        DbColumn("id", "int4"), DbColumn("at", "timestamptz"), DbColumn("n", "numeric", 10, 2)
    )
    sql = plan.select("SELECT * FROM t", "id >= 5")
    assert sql == (
        'SELECT "id" AS "id", ("at" AT TIME ZONE \'UTC\') AS "at", "n" AS "n" '
        "FROM (SELECT * FROM t) AS _rivc WHERE id >= 5"
    )
    assert [d.spark for d in plan.columns] == ["int", "timestamp", "decimal(10,2)"]
    assert CopyPlan.loads(plan.dumps()) == plan
    assert str(arrow_type("decimal(10,2)")) == "decimal128(10, 2)"


def run(plan: CopyPlan, values: list[str | None]) -> list:
    return convert(plan, plan.columns[0], pa.array(values, pa.string())).to_pylist()


def test_unconstrained_numeric_is_exact_or_refused_by_name():
    plan = plan_of(DbColumn("amount", "numeric"))
    assert plan.columns[0].spark == "decimal(38,18)"
    exact = ["1.5", "-0.000000000000000001", "99999999999999999999.999999999999999999", None]
    assert run(plan, exact) == [Decimal(v) if v else None for v in exact]
    # trailing zeros beyond the scale are no change
    assert run(plan, ["12345678901234567890.123456789012345678000"]) == [
        Decimal("12345678901234567890.123456789012345678")
    ]
    for bad in ("12345678901234567890123.45", "0.0000000000000000001", "NaN", "Infinity"):
        with pytest.raises(ConnectorError) as err:
            run(plan, ["1", bad])
        assert err.value.message.startswith(
            f"source s.t: column amount (numeric) value '{bad}' does not fit decimal(38,18)"
        )
        assert "columns:" in err.value.message


def test_declared_decimal_rounds_half_even_and_string_keeps_the_text():
    plan = plan_of(DbColumn("x", "numeric"), declared={"x": "decimal(10, 1)"})
    assert run(plan, ["0.25", "0.35", "-0.25", "0.2500001", "2.5", None]) == [
        Decimal("0.2"),
        Decimal("0.4"),
        Decimal("-0.2"),
        Decimal("0.3"),
        Decimal("2.5"),
        None,
    ]
    with pytest.raises(ConnectorError, match="value 'NaN'"):
        run(plan, ["NaN"])
    with pytest.raises(ConnectorError, match="value '1234567890.5'"):
        run(plan, ["1234567890.5"])
    text = plan_of(DbColumn("x", "numeric"), declared={"x": "string"})
    assert run(text, ["0.14285714285714285714", "NaN"]) == ["0.14285714285714285714", "NaN"]
    double = plan_of(DbColumn("x", "numeric"), declared={"x": "double"})
    assert [str(v) for v in run(double, ["NaN", "Infinity", "-Infinity", "0.5"])] == [
        "nan",
        "inf",
        "-inf",
        "0.5",
    ]


@pytest.mark.parametrize("kind", ["timestamp", "timestamptz", "date"])
@pytest.mark.parametrize("bad", ["infinity", "-infinity", "0044-03-15 BC", "10000-01-01"])
def test_infinite_and_out_of_range_times_are_refused_by_name(kind, bad):
    plan = plan_of(DbColumn("at", kind))
    with pytest.raises(ConnectorError) as err:
        run(plan, [None, bad])
    assert f"column at ({kind}) value '{bad}'" in err.value.message


def test_times_in_range_arrive_exactly():
    ts = plan_of(DbColumn("at", "timestamptz"))
    out = run(ts, ["0001-01-01 00:00:00", "9999-12-31 23:59:59.999999", None])
    assert [v.isoformat() if v else None for v in out] == [
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59.999999+00:00",
        None,
    ]
    d = plan_of(DbColumn("d", "date"))
    assert [str(v) for v in run(d, ["0001-01-01", "9999-12-31"])] == ["0001-01-01", "9999-12-31"]


def test_a_refusal_names_the_first_bad_value_after_good_ones():
    plan = plan_of(DbColumn("at", "timestamptz"))
    with pytest.raises(ConnectorError, match="value 'infinity'"):
        run(plan, ["2026-01-01 00:00:00", None, "infinity", "-infinity"])


def test_a_declared_decimal_holds_38_digits_and_refuses_39():
    """A declared decimal(38,0) holds 38 nines (compared in a context of the value's digits,
    not Python's default 28, which rounded them up to the limit and refused them)."""
    d = dialect("postgres").delivery(DbColumn("big", "numeric"), "decimal(38,0)")
    got = convert(CopyPlan([d], "source s.t"), d, pa.array(["9" * 38, "-" + "9" * 38, None]))
    assert [str(v) if v is not None else None for v in got.to_pylist()] == [
        "9" * 38,
        "-" + "9" * 38,
        None,
    ]
    with pytest.raises(ConnectorError, match="does not fit decimal"):
        convert(CopyPlan([d], "source s.t"), d, pa.array(["1" + "0" * 38]))
