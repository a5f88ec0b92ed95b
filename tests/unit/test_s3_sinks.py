"""Files and Delta sinks on S3, against a local moto server (no JVM, no network)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal

import boto3
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import EndpointConnectionError
from deltalake import DeltaTable

from rivc.adapters.connectors.base import SinkContext
from rivc.adapters.connectors.delta import DeltaSink
from rivc.adapters.connectors.files import FilesSink
from rivc.compiler.connector_specs import DeltaSinkConfig, FilesSinkConfig

KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto in its own process: delta-rs blocks while holding the GIL, so an in-process
    (threaded) moto server could never answer it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket="lake")
            break
        except EndpointConnectionError:
            if time.monotonic() > deadline:
                server.kill()
                raise
            time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(10)


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
