"""dbt's microbatch, the offline half (compiler/microbatch.py): which batches a run builds, and
each batch's query reading its parents through its period."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rivc.compiler.microbatch import as_time, filtered, windows
from rivc_testing import analyze_dir

NOW = datetime(2024, 3, 15, 10, 30, tzinfo=UTC)


def day(d: str) -> datetime:
    return as_time(d, "test")


def test_a_new_table_builds_from_begin_and_a_later_run_the_lookback_and_now():
    whole = windows("day", day("2024-03-12"), 1, True, NOW)
    assert [w[0].day for w in whole] == [12, 13, 14, 15]  # the day holding now included
    assert all(b - a == (whole[1][0] - whole[0][0]) for a, b in whole)
    later = windows("day", day("2024-03-01"), 1, False, NOW)
    assert later == [(day("2024-03-14"), day("2024-03-15")), (day("2024-03-15"), day("2024-03-16"))]
    assert windows("day", day("2024-03-15"), 3, False, NOW) == [
        (day("2024-03-15"), day("2024-03-16"))
    ]
    months = windows("month", day("2023-11-20"), 1, True, NOW)  # begin's period, across a year
    assert [w[0].strftime("%Y-%m") for w in months] == [
        "2023-11",
        "2023-12",
        "2024-01",
        "2024-02",
        "2024-03",
    ]
    hours = windows("hour", day("2024-03-15"), 2, False, NOW)
    assert [w[0].hour for w in hours] == [8, 9, 10]


def test_a_given_span_chooses_the_batches():
    got = windows("day", day("2024-01-01"), 1, False, NOW, day("2024-01-02"), day("2024-01-04"))
    assert [w[0].day for w in got] == [2, 3]  # the end is not a batch of its own
    ragged = windows(
        "day", day("2024-01-01"), 1, False, NOW, day("2024-01-02T12:00"), day("2024-01-03T06:00")
    )
    assert ragged == [
        (day("2024-01-02"), day("2024-01-03")),
        (day("2024-01-03"), day("2024-01-04")),
    ]
    with pytest.raises(ValueError, match="begin 'soon' is not a date or a timestamp"):
        as_time("soon", "begin")


def test_each_parent_with_an_event_time_is_read_through_the_window_under_its_alias():
    sql = (
        "WITH recent AS (SELECT * FROM orders) "
        "SELECT o.id, c.name FROM orders AS o JOIN customers c ON o.cid = c.id "
        "JOIN recent ON TRUE WHERE o.id IN (SELECT id FROM orders)"
    )
    out = filtered(
        sql, {"orders": "ordered_at", "recent": "x"}, (day("2024-01-02"), day("2024-01-03"))
    )
    window = (
        "ordered_at >= CAST('2024-01-02 00:00:00.000000' AS TIMESTAMP) "
        "AND ordered_at < CAST('2024-01-03 00:00:00.000000' AS TIMESTAMP)"
    )
    assert f"(SELECT * FROM orders WHERE {window}) AS o" in out
    assert f"IN (SELECT id FROM (SELECT * FROM orders WHERE {window}) AS orders)" in out
    assert "JOIN customers AS c" in out  # no event_time: read whole
    assert "JOIN recent ON" in out  # a CTE of the name is the CTE
    assert f"WITH recent AS (SELECT * FROM (SELECT * FROM orders WHERE {window}) AS orders)" in out


def test_a_microbatch_model_without_its_settings_is_an_error_at_its_file(make_project):
    root = make_project(
        {
            "models/m.sql": "{{ config(materialized='incremental', incremental_strategy="
            "'microbatch', event_time='total') }}\nselect * from {{ ref('stg') }}\n",
            "models/n.sql": "{{ config(materialized='incremental', incremental_strategy="
            "'microbatch', event_time='nope', batch_size='day', begin='someday') }}\n"
            "select * from {{ ref('stg') }}\n",
        }
    )
    errors = [str(f) for f in analyze_dir(root).errors]
    assert any(e.startswith("models/m.sql:1") and "needs batch_size, begin" in e for e in errors), (
        errors
    )
    assert any("begin 'someday' is not a date" in e for e in errors), errors
    assert any("event_time 'nope' is not an output column" in e for e in errors), errors


def test_a_time_with_an_offset_is_the_utc_period_that_holds_it():
    """An --event-time-start with an offset is the instant it names: 01:00 at +02:00 is 23:00
    UTC the day before, so that day is the first batch; the windows' literals are UTC."""
    from rivc.compiler.microbatch import literal

    start = as_time("2024-03-02T01:00:00+02:00", "--event-time-start")
    end = as_time("2024-03-03", "--event-time-end")
    got = windows("day", day("2024-01-01"), 1, False, NOW, start, end)
    assert got == [
        (day("2024-03-01"), day("2024-03-02")),
        (day("2024-03-02"), day("2024-03-03")),
    ]
    assert literal(got[0][0]) == "TIMESTAMP '2024-03-01 00:00:00.000000'"
    # hours across a leap day and a year's end; months across February
    hours = windows(
        "hour", day("2024-01-01"), 1, False, NOW, day("2024-02-29T23:00"), day("2024-03-01T01:00")
    )
    assert [w[0].strftime("%m-%d %H") for w in hours] == ["02-29 23", "03-01 00"]
    new_year = windows(
        "hour", day("2020-01-01"), 1, False, NOW, day("2023-12-31T23:00"), day("2024-01-01T01:00")
    )
    assert [w[0].strftime("%Y-%m-%d %H") for w in new_year] == ["2023-12-31 23", "2024-01-01 00"]
    months = windows(
        "month", day("2024-01-01"), 1, False, NOW, day("2024-01-31"), day("2024-03-31")
    )
    assert [(a.strftime("%m-%d"), b.strftime("%m-%d")) for a, b in months] == [
        ("01-01", "02-01"),
        ("02-01", "03-01"),
        ("03-01", "04-01"),
    ]
