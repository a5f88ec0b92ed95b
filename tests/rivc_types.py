"""The PostgreSQL type matrix: edge values of every common type, and how to compare what a
sink delivered with what PostgreSQL itself returns. Shared by the local (test_types) and remote
(test_remote) extraction tests."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from rivc_dbs import Db

PG_TABLE = """
CREATE TYPE mood AS ENUM ('ok', 'NA');
CREATE TABLE types (
    id int PRIMARY KEY, i2 int2, i8 int8, n numeric, n122 numeric(12,2), n5010 numeric(50,10),
    f4 float4, f8 float8, m money, t text, vc varchar(10), ch char(3), bo bool, bt bit(8),
    b1 bit(1), u uuid, j jsonb, ip inet, d date, tm time, ts timestamp, tstz timestamptz,
    iv interval, en mood
)
"""
PG_ROWS = [
    "(1, 32767, 9223372036854775807, 12345678901234567890.12, 1234567890.12, 1.5, 'NaN', 'NaN',"
    " 92233720368547758.07, 'NA', 'N/A', 'n/a', true, B'10101010', B'1',"
    " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1, 2.50]}', '10.1.2.3/8', '0001-01-01',"
    " '24:00:00', '0001-01-01 00:00:00', '2026-03-29 01:30:00.123456+02',"
    " '1 year 2 mons -3 days 04:05:06.5', 'NA')",
    "(2, -32768, -9223372036854775808, 0.000000000000000001, -0.01, 0.0000000001, 'Infinity',"
    " 'Infinity', -92233720368547758.08, 'null', 'NULL', 'nan', false, B'00000000', B'0', NULL,"
    " 'null', '::1', '9999-12-31', '00:00:00.000001', '9999-12-31 23:59:59.999999',"
    " '9999-12-31 23:59:59.999999+00', '-1 day -02:00:00', 'ok')",
    "(3, 0, 0, 1.50000000000000000000000, 0, -12345678901234567890123456.1234567890, '-Infinity',"
    " '-Infinity', 0, '-nan', '#N/A', '', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL)",
    "(4, NULL, NULL, -99999999999999999999.999999999999999999, NULL, NULL, '-0', '-0', NULL, '',"
    " '', 'x', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(5, NULL, NULL, NULL, NULL, NULL, 1e-30, 1.7976931348623157e308, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]
# What PostgreSQL says each delivered value is: its own text where rivc delivers text
PG_EXPECTED = """
SELECT id, i2, i8, n, n122, n5010, f4, f8, m::numeric AS m, t, vc, ch, bo, bt::text AS bt,
       b1 = B'1' AS b1, u::text AS u, j::text AS j, ip::text AS ip, d, tm::text AS tm, ts, tstz,
       iv::text AS iv, en::text AS en
FROM types ORDER BY id
"""

# With `parallel: 2` the COPY reader runs in two Spark tasks; the bytea column sends the same
# table through Spark's JDBC reader.
READERS = {
    "copy": ("SELECT * FROM types", 1),
    "copy_spark": ("SELECT * FROM types", 2),
    "jdbc": ("SELECT t.*, decode('00', 'hex') AS force_jdbc FROM types t", 1),
}


def same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    if isinstance(want, datetime) and isinstance(got, datetime):
        want = want if want.tzinfo else want.replace(tzinfo=UTC)
        got = got if got.tzinfo else got.replace(tzinfo=UTC)
    return (
        bool(got == want)
        and type(got) is type(want)
        or (isinstance(want, Decimal) and isinstance(got, Decimal) and got == want)
    )


def expected_rows(db: Db, sql: str) -> list[dict[str, Any]]:
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            if db.kind == "postgres":
                cur.execute("SET intervalstyle = iso_8601; SET TimeZone = 'UTC'")
            cur.execute(sql)
            names = [c[0] for c in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()


def compare(label: str, got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    got = sorted(got, key=lambda r: r["id"])
    assert len(got) == len(want), label
    for g, w in zip(got, want, strict=True):
        for column, value in w.items():
            have = g[column]
            if column == "j" and have is not None:  # jsonb: the same document
                have, value = json.loads(have), json.loads(value)
            if isinstance(value, float) and isinstance(have, float) and column == "f4":
                value, have = f32(value), f32(have)  # text holds float32's shortest form
            assert same(have, value), f"{label} row {w['id']} {column}: {have!r} != {value!r}"


def f32(value: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", value))[0]
