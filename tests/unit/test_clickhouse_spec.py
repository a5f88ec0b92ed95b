"""The clickhouse sink without a server: its spec's refusals, Rivven's keys, the types it cannot
hold, and RowBinary bytes checked against ClickHouse's layout by hand (the DateTime64 and
Decimal32/64 paths, which the integration test's 18.16 server does not reach)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from pydantic import ValidationError

from rivc.adapters.connectors.clickhouse.rowbinary import clickhouse_type, encode
from rivc.adapters.connectors.clickhouse.spec import ClickHouseSinkConfig, cannot_hold
from rivc.compiler.errors import ConnectorError
from rivc.compiler.importers import aliases


def test_spec_refusals() -> None:
    with pytest.raises(ValidationError, match="mode upsert needs key_columns"):
        ClickHouseSinkConfig(url="http://h:8123", table="t", mode="upsert")
    with pytest.raises(
        ValidationError, match="give one of password, password_env and access_token"
    ):
        ClickHouseSinkConfig(url="http://h:8123", table="t", password="a", access_token="b")
    with pytest.raises(ValidationError):
        ClickHouseSinkConfig(url="http://h:8123", table="t; DROP TABLE x")


def test_rivvens_keys() -> None:
    given = {
        "url": "http://h:8123",
        "table": "events",
        "compression": "lz4",
        "validation": True,
        "skip_invalid_rows": True,
        "flush_interval_secs": 5,
    }
    out, refusals = aliases.translate(aliases.clickhouse_sink, given)
    refused = {path[0]: text for path, text in refusals}
    assert set(refused) == {"compression", "skip_invalid_rows", "flush_interval_secs"}
    assert "compression: gzip" in refused["compression"]
    assert out == {"url": "http://h:8123", "table": "events"}


def test_types_it_cannot_hold() -> None:
    assert "to_json" in (cannot_hold("struct<a:int>") or "")
    assert "to_json" in (cannot_hold("array<map<string,int>>") or "")
    assert cannot_hold("interval day to second") is not None
    assert cannot_hold("array<decimal(10,2)>") is None and cannot_hold("timestamp") is None
    assert clickhouse_type(pa.timestamp("us", tz="UTC"), micros=False) == "DateTime('UTC')"
    assert clickhouse_type(pa.timestamp("us", tz="UTC"), micros=True) == "DateTime64(6, 'UTC')"
    assert clickhouse_type(pa.list_(pa.list_(pa.int32())), micros=False) == (
        "Array(Array(Nullable(Int32)))"
    )
    assert clickhouse_type(pa.list_(pa.date32()), micros=False) is None


def test_rowbinary_bytes_by_hand() -> None:
    text = "ż" * 100  # 200 bytes: a two-byte varint length
    batch = pa.record_batch(
        {
            "ts": pa.array(
                [dt.datetime(2105, 12, 31, 23, 59, 59, 999_999), None], pa.timestamp("us")
            ),
            "d9": pa.array([Decimal("-1.25"), Decimal("0.01")], pa.decimal128(9, 2)),
            "d18": pa.array([Decimal("123456789012.345678"), None], pa.decimal128(18, 6)),
            "s": pa.array([text, ""]),
            "a": pa.array([[Decimal("1.5"), None], []], pa.list_(pa.decimal128(20, 1))),
        }
    )
    kinds = {
        "ts": "Nullable(DateTime64(6, 'UTC'))",
        "d9": "Decimal(9, 2)",
        "d18": "Nullable(Decimal(18, 6))",
        "s": "String",
        "a": "Array(Nullable(Decimal(20, 1)))",
    }
    body = encode(batch, kinds, [pa.array([7, 7], pa.int64())])
    micros = 4_291_747_199 * 10**6 + 999_999
    first = (
        b"\x00" + struct.pack("<q", micros)
        + struct.pack("<i", -125)
        + b"\x00" + struct.pack("<q", 123456789012345678)
        + bytes([200 & 0x7F | 0x80, 200 >> 7]) + text.encode()
        + b"\x02" + b"\x00" + (15).to_bytes(16, "little", signed=True) + b"\x01"
        + struct.pack("<q", 7)
    )  # fmt: skip
    second = b"\x01" + struct.pack("<i", 1) + b"\x01" + b"\x00" + b"\x00" + struct.pack("<q", 7)
    assert body == first + second


def test_whole_seconds_and_the_range_refused_by_value() -> None:
    kinds = {"ts": "Nullable(DateTime('UTC'))"}
    half = pa.record_batch({"ts": pa.array([dt.datetime(2026, 1, 1, 0, 0, 0, 500_000)])})
    with pytest.raises(ConnectorError, match="column 'ts' holds 2026-01-01 00:00:00.500000"):
        encode(half, kinds, [])
    early = pa.record_batch({"ts": pa.array([None, dt.datetime(1969, 12, 31, 23, 59, 59)])})
    with pytest.raises(ConnectorError, match="1969-12-31 23:59:59: a ClickHouse DateTime holds"):
        encode(early, kinds, [])
    whole = pa.record_batch({"ts": pa.array([dt.datetime(1970, 1, 1, 0, 0, 1)])})
    assert encode(whole, kinds, []) == b"\x00" + struct.pack("<I", 1)
