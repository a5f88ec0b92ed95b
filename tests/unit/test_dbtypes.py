"""The one type mapping of relational sources (docs/types.md), without a database."""

from __future__ import annotations

import pytest

from rivc.compiler import dbtypes
from rivc.compiler.dbtypes import DbColumn
from rivc.compiler.dialects import dialect
from rivc.compiler.sql import quote


@pytest.mark.parametrize(
    ("column", "spark", "kind"),
    [
        (DbColumn("c", "int2"), "smallint", "native"),
        (DbColumn("c", "int8"), "bigint", "native"),
        (DbColumn("c", "float8"), "double", "native"),
        (DbColumn("c", "numeric"), "decimal(38,18)", "decimal"),
        (DbColumn("c", "numeric", 12, 2), "decimal(12,2)", "decimal"),
        (DbColumn("c", "numeric", 50, 10), "decimal(38,10)", "decimal"),
        (DbColumn("c", "money"), "decimal(19,2)", "decimal"),
        (DbColumn("c", "timestamptz"), "timestamp", "timestamp"),
        (DbColumn("c", "date"), "date", "date"),
        (DbColumn("c", "interval"), "string", "text"),
        (DbColumn("c", "uuid"), "string", "text"),
        (DbColumn("c", "jsonb"), "string", "text"),
        (DbColumn("c", "bit", 1), "boolean", "native"),
        (DbColumn("c", "bit", 8), "string", "text"),
        (DbColumn("c", "bytea"), "binary", "native"),
        (DbColumn("c", "int4", array=True), "array<int>", "native"),
        (DbColumn("c", "numeric", array=True), "string", "text"),
        (DbColumn("c", "my_enum"), "string", "text"),
    ],
)
def test_postgres_mapping(column, spark, kind):
    d = dialect("postgres").delivery(column)
    assert (d.spark, d.kind) == (spark, kind)


@pytest.mark.parametrize(
    ("column", "spark", "kind"),
    [
        (DbColumn("c", "tiny"), "tinyint", "native"),
        (DbColumn("c", "tiny", unsigned=True), "smallint", "native"),
        (DbColumn("c", "long", unsigned=True), "bigint", "native"),
        (DbColumn("c", "longlong", unsigned=True), "decimal(20,0)", "native"),
        (DbColumn("c", "newdecimal", 65, 30), "decimal(38,30)", "decimal"),
        (DbColumn("c", "datetime"), "timestamp", "timestamp"),
        (DbColumn("c", "date"), "date", "date"),
        (DbColumn("c", "time"), "string", "text"),
        (DbColumn("c", "bit", 8), "string", "text"),
        (DbColumn("c", "bit", 1), "boolean", "native"),
        (DbColumn("c", "set"), "string", "text"),
        (DbColumn("c", "blob", binary=True), "binary", "native"),
        (DbColumn("c", "blob"), "string", "native"),
        (DbColumn("c", "year"), "int", "native"),
    ],
)
def test_mysql_mapping(column, spark, kind):
    d = dialect("mysql").delivery(column)
    assert (d.spark, d.kind) == (spark, kind)
    assert not d.copy


def test_unknown_mysql_type_is_refused_by_name():
    with pytest.raises(ValueError, match="column g has type geometry"):
        dialect("mysql").delivery(DbColumn("g", "geometry"))


def test_declared_types_are_read_from_the_databases_text():
    d = dialect("postgres").delivery(DbColumn("x", "numeric"), "Decimal(38, 4)")
    assert (d.spark, d.kind, d.expr) == ("decimal(38,4)", "round", '"x"::text')
    assert (
        dialect("mysql").delivery(DbColumn("x", "newdecimal", 65, 30), "string").expr
        == "CAST(`x` AS CHAR)"
    )
    with pytest.raises(ValueError, match="cannot be declared"):
        dbtypes.declared_type("array<int>")
    with pytest.raises(ValueError, match="precision is 1..38"):
        dbtypes.declared_type("decimal(40,2)")


def test_identifiers_are_quoted_with_their_quote_doubled():
    assert dialect("postgres").quote('a"b') == '"a""b"'
    assert dialect("mysql").quote("a`b") == quote("a`b") == "`a``b`"


def test_exact_decimal_pattern():
    import re

    pattern = re.compile(dbtypes.exact_decimal_pattern(5, 2))
    for ok in ("123.45", "-123.4500", "0.1", "00123", "7"):
        assert pattern.match(ok), ok
    for bad in ("1234.5", "1.234", "NaN", "1e5", "-Infinity"):
        assert not pattern.match(bad), bad


def test_spark_refusal_is_a_rivc_error_inside_sparks_text():
    d = dialect("postgres").delivery(DbColumn("amount", "numeric"))
    sql = dbtypes.spark_convert("source s.t", d)
    assert (
        "raise_error(concat('rivc.compiler.errors.ConnectorError: source s.t: column amount" in sql
    )
    assert sql.startswith("CASE WHEN `amount` IS NULL THEN NULL WHEN `amount` RLIKE")


def test_a_declared_type_rivc_cannot_apply_is_a_compile_error(make_project):
    from rivc.compiler.errors import CompileFailed
    from rivc.compiler.loading.project import load_project

    root = make_project(
        {
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: h}\n",
            "sources/db.yml": """
                sources:
                  - name: db
                    connector: postgres
                    connection: db
                    tables:
                      - name: t
                        table: t
                        columns: {id: int, amount: 'array<int>'}
            """,
        }
    )
    with pytest.raises(CompileFailed) as err:
        load_project(root, env={})
    assert str(err.value).startswith("sources/db.yml:8:28: error: ")
    assert "columns.amount: type 'array<int>' cannot be declared" in str(err.value)


@pytest.mark.parametrize(
    ("precision", "scale", "spark"),
    [
        (5, -2, "decimal(7,0)"),  # rounds to hundreds: up to 9999900
        (2, 5, "decimal(5,5)"),  # up to 0.00099
        (38, -3, "decimal(38,0)"),  # 41 digits: the rare value past 38 is refused
        (10, 2, "decimal(10,2)"),
    ],
)
def test_numeric_with_a_negative_or_large_scale_is_a_decimal_that_holds_it(precision, scale, spark):
    assert dialect("postgres").delivery(DbColumn("n", "numeric", precision, scale)).spark == spark


@pytest.mark.parametrize(
    ("column", "value", "advice"),
    [
        (DbColumn("x", "numeric"), "0.14285714285714285714", "x: decimal(38,20)"),
        (DbColumn("x", "numeric"), "123456789012345678901234567", "x: decimal(38,11)"),
        (DbColumn("x", "numeric"), "NaN", "x: string"),
        (DbColumn("x", "numeric"), "1" * 39, "x: string"),
        (DbColumn("x", "timestamptz"), "infinity", "x: string"),
        (DbColumn("x", "int4", array=True), "{{1,2},{3,4}}", "x: string"),
    ],
)
def test_a_refusal_suggests_the_narrowest_type_that_holds_the_value(column, value, advice):
    d = dialect("postgres").delivery(column)
    assert f"(e.g. {advice})" in dbtypes.refusal("source s.t", d, value)


def test_a_declared_timestamp_reads_a_timestamptz_in_utc():
    d = dialect("postgres").delivery(DbColumn("at", "timestamptz"), "timestamp")
    assert (d.kind, d.copy_expr) == ("timestamp", "(\"at\" AT TIME ZONE 'UTC')")


def test_an_array_is_checked_for_one_dimension_starting_at_1():
    d = dialect("postgres").delivery(DbColumn("xs", "int4", array=True))
    assert d.spark == "array<int>" and "array_lower" in d.check and "array_ndims" in d.expr
    sql = dbtypes.spark_convert("source s.t", d)
    assert sql.startswith("CASE WHEN `_rivc_check:xs` IS NOT NULL THEN raise_error(")
