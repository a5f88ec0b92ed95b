"""The COPY reader's pieces that need no database: the chunk stream and the query it sends."""

from __future__ import annotations

from rivc.adapters.connectors.pgcopy import CopyPlan, _arrow_type, _Stream


def test_stream_reads_exact_sizes_across_chunks():
    stream = _Stream(iter([b"ab", memoryview(b"cde"), b"", b"fgh"]))
    assert stream.read_ahead()
    assert stream.read(4) == b"abcd"
    assert stream.read(3) == b"efg"
    assert stream.read(10) == b"h"
    assert stream.read(10) == b""
    assert not _Stream(iter([])).read_ahead()


def test_select_reads_timestamptz_in_utc_and_applies_the_predicate():
    plan = CopyPlan([("id", "int", 23), ("at", "timestamp", 1184), ("n", "decimal(10, 2)", 1700)])
    sql = plan.select("SELECT * FROM t", "id >= 5")
    assert sql == (
        'SELECT "id", "at" AT TIME ZONE \'UTC\' AS "at", "n" FROM (SELECT * FROM t) AS _rivc '
        "WHERE id >= 5"
    )
    assert plan.ddl == "`id` int, `at` timestamp, `n` decimal(10, 2)"
    assert str(_arrow_type("decimal(10, 2)")) == "decimal128(10, 2)"
