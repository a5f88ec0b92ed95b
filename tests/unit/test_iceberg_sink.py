"""The Iceberg sink on a SQLite catalog (no JVM): partitions, modes, replays, schema evolution.
Data files are read back with DuckDB, not only through pyiceberg."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from rivc.adapters.connectors.iceberg.sink import IcebergSink
from rivc.adapters.connectors.iceberg.spec import IcebergSinkConfig
from rivc.adapters.plane.base import SinkContext
from rivc.compiler.errors import ConnectorError


def batch(ids: list[int], extra: bool = False) -> pads.Dataset:
    rows = [
        {"order_id": i, "at": datetime(2026, 1, 1 + i % 3, tzinfo=UTC), "v": f"v{i}"}
        | ({"note": "n"} if extra else {})
        for i in ids
    ]
    return pads.dataset(pa.Table.from_pylist(rows))


def sink(tmp_path: Path, **config: object) -> IcebergSink:
    cfg = IcebergSinkConfig.model_validate({"namespace": "shop", "table": "orders", **config})
    return IcebergSink(cfg, SinkContext(tmp_path, "p", "orders_ice"))


def data_files(s: IcebergSink) -> list[str]:
    table = s.catalog().load_table("shop.orders")
    return [
        p.removeprefix("file://") for p in table.inspect.files().column("file_path").to_pylist()
    ]


def duck_ids(s: IcebergSink) -> list[int]:
    files = data_files(s)
    rows = duckdb.sql(f"SELECT order_id FROM read_parquet({files!r}) ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def test_append_partitioned_and_replay_skipped(tmp_path):
    s = sink(
        tmp_path,
        partitioning=[
            {"field": "at", "transform": "day"},
            {"field": "order_id", "transform": "bucket", "buckets": 4},
        ],
    )
    assert not s.committed(0)
    s.write(batch([1, 2, 3, 4, 5]), 0)
    assert s.committed(0) and not s.committed(1)
    table = s.catalog().load_table("shop.orders")
    assert [f.name for f in table.spec().fields] == ["at_day", "order_id_bucket"]
    assert table.current_snapshot().summary["rivc.batch.rivc:p:orders_ice"] == "0"
    assert len(data_files(s)) > 1  # one file per partition
    s.write(batch([6]), 1)
    assert duck_ids(s) == [1, 2, 3, 4, 5, 6]


def test_upsert_and_overwrite(tmp_path):
    s = sink(tmp_path, mode="upsert", key_fields=["order_id"])
    s.write(batch([1, 2, 3]), 0)
    s.write(
        pads.dataset(
            pa.Table.from_pylist(
                [
                    {"order_id": 3, "at": datetime(2026, 2, 1, tzinfo=UTC), "v": "new"},
                    {"order_id": 4, "at": datetime(2026, 2, 1, tzinfo=UTC), "v": "v4"},
                ]
            )
        ),
        1,
    )
    rows = s.catalog().load_table("shop.orders").scan().to_arrow().sort_by("order_id").to_pylist()
    assert [(r["order_id"], r["v"]) for r in rows] == [(1, "v1"), (2, "v2"), (3, "new"), (4, "v4")]
    over = sink(tmp_path, mode="overwrite")
    over.write(batch([9]), 2)
    assert over.catalog().load_table("shop.orders").scan().to_arrow().num_rows == 1


def test_schema_evolution(tmp_path):
    strict = sink(tmp_path)
    strict.write(batch([1]), 0)
    with pytest.raises(ConnectorError, match="strict"):
        strict.write(batch([2], extra=True), 1)
    assert not strict.committed(1)
    adding = sink(tmp_path, schema_evolution="add_columns")
    adding.write(batch([2], extra=True), 1)
    table = adding.catalog().load_table("shop.orders")
    assert "note" in [f.name for f in table.schema().fields]
    assert sorted(table.scan().to_arrow().column("order_id").to_pylist()) == [1, 2]


def test_a_hive_catalog_needs_the_metastores_uri():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="a hive catalog needs uri: thrift://"):
        IcebergSinkConfig.model_validate(
            {"namespace": "n", "table": "t", "catalog": {"type": "hive"}}
        )
    given = {"namespace": "n", "table": "t", "catalog": {"type": "hive", "uri": "thrift://h:9083"}}
    assert IcebergSinkConfig.model_validate(given).catalog.type == "hive"
