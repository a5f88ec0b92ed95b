"""Files and Delta sinks on S3, against a local moto server (no JVM, no network)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from rivc.adapters.connectors.base import SinkContext
from rivc.adapters.connectors.delta import DeltaSink
from rivc.adapters.connectors.files import FilesSink
from rivc.compiler.connector_specs import DeltaSinkConfig, FilesSinkConfig
from rivc_testing import S3_KEYS, moto_s3

KEYS = S3_KEYS


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_s3() as url:
        yield url


def options(endpoint: str) -> dict[str, str]:
    return {
        **KEYS,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }


def rows(n: int, start: int = 0) -> pads.Dataset:
    return pads.dataset(
        pa.Table.from_pylist(
            [
                {"id": i, "amount": Decimal(f"{i}.25"), "kind": "ab"[i % 2]}
                for i in range(start, start + n)
            ]
        )
    )


def test_files_sink_writes_whole_objects_to_s3(tmp_path, endpoint):
    cfg = FilesSinkConfig(
        path="s3://lake/raw/orders",
        format="parquet",
        partitioning="columns",
        partition_by=["kind"],
        storage_options=options(endpoint),
    )
    sink = FilesSink(cfg, SinkContext(tmp_path, "p", "orders_files"))
    result = sink.write(rows(10), 4)
    assert sorted(p for p, _, _ in result.files) == [
        "s3://lake/raw/orders/kind=a/batch-000004-part-0000.parquet",
        "s3://lake/raw/orders/kind=b/batch-000004-part-0000.parquet",
    ]
    sink.write(rows(10), 4)  # a replay rewrites the same objects
    fs = pafs.S3FileSystem(
        access_key="test",
        secret_key="test",
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
    )
    found = [
        i.path
        for i in fs.get_file_info(pafs.FileSelector("lake/raw/orders", recursive=True))
        if i.type == pafs.FileType.File
    ]
    assert len(found) == 2
    table = pq.read_table("lake/raw/orders", filesystem=fs, partitioning="hive")
    assert sorted(table.column("id").to_pylist()) == list(range(10))


def test_delta_sink_on_s3_merges_and_skips_a_replay(tmp_path, endpoint):
    cfg = DeltaSinkConfig(
        table_uri="s3://lake/delta/orders",
        mode="merge",
        merge_keys=["id"],
        storage_options=options(endpoint),
    )
    sink = DeltaSink(cfg, SinkContext(tmp_path, "p", "orders_delta"))
    assert not sink.committed(0)
    sink.write(rows(5), 0)
    assert sink.committed(0)
    sink.write(rows(5, start=3), 1)  # 3 and 4 updated, 5..7 new
    table = DeltaTable("s3://lake/delta/orders", storage_options=options(endpoint))
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(8))
    assert table.transaction_version("rivc:p:orders_delta") == 1
