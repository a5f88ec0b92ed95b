"""dbt's date macros as rivc writes them for Spark, value by value beside DuckDB's answers to
the SQL dbt-duckdb renders for the same call (the peer the dbt-project tests compare with), on
the inputs where counting goes wrong: year, quarter and month ends, leap days, the days around
a week's first day, a minute before the hour, both orders."""

from __future__ import annotations

import itertools

import duckdb
import pytest

from rivc.compiler.dbt.crossdb import dateadd, datediff, last_day

pytestmark = pytest.mark.integration

INSTANTS = [
    "2020-02-28 00:00:00",
    "2020-02-29 12:00:00",
    "2020-12-31 23:59:00",
    "2021-01-01 00:00:00",
    "2021-01-02 10:00:00",  # a Saturday
    "2021-01-03 09:00:00",  # a Sunday: the week dbt counts begins
    "2021-01-04 00:00:00",  # a Monday
    "2021-01-31 00:59:59",
    "2021-02-28 01:00:00",
    "2021-03-31 00:00:00",
    "2021-04-01 00:00:00",
]
PARTS = ["year", "quarter", "month", "week", "day", "hour", "minute", "second"]


def _literal(instant: str) -> str:
    return f"'{instant}'"


def _duckdb_datediff(con: duckdb.DuckDBPyConnection, a: str, b: str, part: str) -> int:
    """What dbt-duckdb's datediff gives: DuckDB's date_diff, except for weeks, which begin on
    Sunday there (its macro adds to the days // 7 whether the weekday wrapped around)."""
    first, second = f"timestamp '{a}'", f"timestamp '{b}'"
    if part != "week":
        return int(con.execute(f"select date_diff('{part}', {first}, {second})").fetchone()[0])
    forward = f"{first} <= {second}"
    sql = (
        f"select date_diff('day', {first}, {second}) // 7 + case "
        f"when date_part('dow', {first}) <= date_part('dow', {second}) "
        f"then case when {forward} then 0 else -1 end "
        f"else case when {forward} then 1 else 0 end end"
    )
    return int(con.execute(sql).fetchone()[0])


def test_datediff_counts_the_boundaries_dbt_duckdb_counts(spark):
    con = duckdb.connect()
    cases = [(a, b, p) for a, b in itertools.permutations(INSTANTS, 2) for p in PARTS]
    cases += [(a, a, p) for a in INSTANTS[:3] for p in PARTS]
    sql = ", ".join(
        f"{datediff(_literal(a), _literal(b), p)} as c{i}" for i, (a, b, p) in enumerate(cases)
    )
    got = spark.sql(f"select {sql}").collect()[0]  # type: ignore[attr-defined]
    # backward, a week count is the forward one negated, as dbt-spark counts it: dbt-duckdb's
    # week macro is one off backward when both days fall on the same weekday
    want = [
        _duckdb_datediff(con, a, b, p) if a <= b or p != "week" else -_duckdb_datediff(con, b, a, p)
        for a, b, p in cases
    ]
    wrong = [(*case, got[i], want[i]) for i, case in enumerate(cases) if got[i] != want[i]]
    assert not wrong, wrong[:10]
    one_year = datediff("'2020-12-31'", "'2021-01-01'", "year")
    assert spark.sql(f"select {one_year}").collect()[0][0] == 1  # type: ignore[attr-defined]


def test_dateadd_and_last_day_give_dbt_duckdbs_dates(spark):
    con = duckdb.connect()
    cases = [
        ("month", 1, "2021-01-31"),
        ("month", -1, "2021-03-31"),
        ("year", 1, "2020-02-29"),
        ("quarter", 1, "2020-11-30"),
        ("day", 1, "2020-02-28"),
        ("week", 2, "2021-01-02"),
    ]
    sql = ", ".join(
        f"cast({dateadd(p, n, f'date {_literal(d)}')} as date) as a{i}"
        for i, (p, n, d) in enumerate(cases)
    )
    got = spark.sql(f"select {sql}").collect()[0]  # type: ignore[attr-defined]
    for i, (p, n, d) in enumerate(cases):
        want = con.execute(f"select cast(date '{d}' + interval ({n}) {p} as date)").fetchone()[0]
        assert got[i] == want, (p, n, d)

    ends = [(p, d) for p in ("month", "quarter", "year") for d in ("2020-02-10", "2021-11-30")]
    sql = ", ".join(
        f"cast({last_day(f'date {_literal(d)}', p)} as date) as l{i}"
        for i, (p, d) in enumerate(ends)
    )
    got = spark.sql(f"select {sql}").collect()[0]  # type: ignore[attr-defined]
    for i, (p, d) in enumerate(ends):  # dbt's default__last_day, as dbt-duckdb renders it
        want = con.execute(
            f"select cast(date_trunc('{p}', date '{d}') + interval 1 {p} - interval 1 day as date)"
        ).fetchone()[0]
        assert got[i] == want, (p, d)
