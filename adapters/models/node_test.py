"""Test nodes: a query whose rows are failures."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rivc.compiler.emit.manifest import ManifestNode
from rivc.compiler.loading.property_specs import failed

from ..run.runtime import Runtime
from ..state import NodeResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SAMPLE_ROWS = 5  # failing rows a test prints


def run_unit_test(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    """A dbt unit test: the model's query over the given rows (compiled into its SQL) against
    the expected rows, cast to the types of the result's columns; rows on either side only fail."""
    from rivc.compiler.sql import literal, quote

    actual = rt.spark.sql(rt.plan.sql(nid))
    if node.config.get("expect_sql"):
        expected = rt.spark.sql(str(node.config["expect_sql"]))
        names = expected.columns
    else:
        rows: list[dict[str, object]] = list(node.config.get("expect_rows") or [])
        names = list(dict.fromkeys(k for r in rows for k in r))
        types = {f.name: f.dataType.simpleString() for f in actual.schema.fields}
        unknown = [n for n in names if n not in types]
        if unknown:
            return NodeResult(
                nid, "test", "fail", error=f"expected column {unknown[0]!r} is not in the result"
            )

        def cell(row: dict[str, object], name: str) -> str:
            return f"CAST({literal(row.get(name))} AS {types[name]}) AS {quote(name)}"

        selects = ["SELECT " + ", ".join(cell(r, n) for n in names) for r in rows]
        if not selects:
            names = actual.columns
            expected = actual.limit(0)
        else:
            expected = rt.spark.sql(" UNION ALL ".join(selects))
    got = actual.select(*[quote(n) for n in names])
    missing = expected.exceptAll(got)
    extra = got.exceptAll(expected)
    lost, added = missing.count(), extra.count()
    if not lost and not added:
        return NodeResult(nid, "test", "pass", rows=0)
    shown = [
        f"expected, not in the result: {json.dumps(r.asDict(), default=str)}"
        for r in missing.limit(SAMPLE_ROWS).collect()
    ]
    shown += [
        f"in the result, not expected: {json.dumps(r.asDict(), default=str)}"
        for r in extra.limit(SAMPLE_ROWS).collect()
    ]
    return NodeResult(
        nid,
        "test",
        "fail",
        rows=lost + added,
        error=f"{lost} expected row{'s' if lost != 1 else ''} missing, {added} unexpected: "
        + "; ".join(shown),
    )


AUDIT = "dbt_test__audit"  # the warehouse folder of stored failures, as dbt names the schema


def store_failures(rt: Runtime, node: ManifestNode, df: DataFrame) -> int:
    """dbt's `store_failures`: the failing rows replace the table
    <warehouse>/dbt_test__audit/<test>, which holds this run's failures (none when it passes).
    Returns how many there are."""
    from ..lake import deltatable
    from ..util.storage import join

    uri = join(rt.plan.warehouse, AUDIT, node.name)
    written = deltatable.write_batch(
        df, uri, rt.plan.store(uri), "replace", deltatable.arrow_schema(df)
    )
    return written.rows


def run_test(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    """Pass, warn or fail by the failing rows' count, as dbt decides: an `error` test fails when
    the count meets `error_if`, else warns when it meets `warn_if`; a `warn` test only warns."""
    if node.config.get("test") == "unit":
        return run_unit_test(rt, nid, node)
    df = rt.spark.sql(rt.plan.sql(nid))
    failures = store_failures(rt, node, df) if node.config.get("store_failures") else None
    fail_calc = node.config.get("fail_calc")
    if fail_calc:  # dbt's fail_calc: the failure count computed over the failing rows
        calc = f"SELECT {fail_calc} FROM (\n{rt.plan.sql(nid)}\n) AS dbt_internal_test"
        row = rt.spark.sql(calc).first()
        failures = int(row[0] or 0) if row is not None else 0
    elif failures is None:
        failures = df.count()
    error_if = str(node.config.get("error_if", "!= 0"))
    warn_if = str(node.config.get("warn_if", "!= 0"))
    if node.severity == "error" and failed(failures, error_if):
        status = "fail"
    elif failed(failures, warn_if):
        status = "warn"
    else:
        return NodeResult(nid, "test", "pass", rows=failures)
    sample = [r.asDict() for r in df.limit(SAMPLE_ROWS).collect()]
    shown = "; ".join(json.dumps(r, default=str) for r in sample)
    return NodeResult(
        nid,
        "test",
        status,
        rows=failures,
        error=f"{failures} failing row{'s' if failures != 1 else ''}: {shown}",
    )
