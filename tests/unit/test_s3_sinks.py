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

from rivc.adapters.connectors.delta.runtime import DeltaSink
from rivc.adapters.connectors.delta.spec import DeltaSinkConfig
from rivc.adapters.connectors.files.sink import FilesSink
from rivc.adapters.connectors.files.spec import FilesSinkConfig
from rivc.adapters.plane.base import SinkContext
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
        if i.type == pafs.FileType.File and "/_rivc/" not in i.path
    ]
    assert len(found) == 2
    table = pq.read_table("lake/raw/orders", filesystem=fs, partitioning="hive")
    assert sorted(table.column("id").to_pylist()) == list(range(10))


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_text_on_s3_is_compressed_once(tmp_path, endpoint, codec):
    """pyarrow's S3 streams pick a codec from an object's name by default: a `.csv.gz` object
    written through one used to be compressed twice (a reader got gzip inside gzip)."""
    import gzip
    import io

    import zstandard

    cfg = FilesSinkConfig(
        path="s3://lake/raw/text",
        format="csv",
        compression=codec,
        storage_options=options(endpoint),
    )
    result = FilesSink(cfg, SinkContext(tmp_path, "p", "text")).write(rows(3), 0)
    (uri,) = [p for p, _, _ in result.files]
    fs = pafs.S3FileSystem(
        access_key="test", secret_key="test", endpoint_override=endpoint, scheme="http"
    )
    with fs.open_input_stream(uri.removeprefix("s3://"), compression=None) as raw:
        stored = raw.read()
    if codec == "gzip":
        text = gzip.decompress(stored).decode()
    else:
        text = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(stored)).read().decode()
    assert text.splitlines()[0] == "id,amount,kind" and len(text.splitlines()) == 4


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


def test_a_rivven_iceberg_config_writes_to_s3(tmp_path, endpoint):
    """Rivven's iceberg sink config (an `s3:` block, commit_mode) as it is: pyiceberg writes the
    data and metadata to S3 with those settings; a replayed batch is skipped, an upsert
    replaces rows by key."""
    from rivc.adapters.connectors.iceberg.sink import IcebergSink
    from rivc.adapters.connectors.iceberg.spec import IcebergSinkConfig
    from rivc.compiler.importers.aliases import iceberg_sink, translate

    rivven = {
        "catalog": {"type": "memory", "warehouse": "s3://lake/ice"},
        "namespace": "analytics",
        "table": "orders",
        "commit_mode": "upsert",
        "key_fields": ["id"],
        "s3": {
            "region": "us-east-1",
            "endpoint": endpoint,
            "access_key_id": KEYS["AWS_ACCESS_KEY_ID"],
            "secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"],
            "path_style_access": True,
        },
    }
    config, refusals = translate(iceberg_sink, rivven)
    assert refusals == []
    sink = IcebergSink(IcebergSinkConfig.model_validate(config), SinkContext(tmp_path, "p", "ice"))
    schema = pa.schema(
        [("id", pa.int64()), ("amount", pa.decimal128(10, 2)), ("kind", pa.string())]
    )

    def batch(n: int, start: int = 0) -> pads.Dataset:
        return pads.dataset(rows(n, start).to_table().cast(schema))

    sink.write(batch(10), 0)
    sink.write(batch(10), 0)  # a replay: skipped by the batch id in the table
    sink.write(batch(4, start=8), 1)  # ids 8 and 9 again, 10 and 11 new
    table = sink.catalog().load_table("analytics.orders")
    got = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in got] == list(range(12))
    assert got[9] == {"id": 9, "amount": Decimal("9.25"), "kind": "b"}
    assert table.location().startswith("s3://lake/ice/")
    fs = pafs.S3FileSystem(
        access_key="test", secret_key="test", endpoint_override=endpoint[7:], scheme="http"
    )
    files = fs.get_file_info(pafs.FileSelector("lake/ice", recursive=True))
    assert any(f.path.endswith(".parquet") for f in files)
    assert any(f.path.endswith(".metadata.json") for f in files)
    assert not (tmp_path / ".rivc/iceberg/warehouse").exists()  # nothing landed locally


def test_doctor_writes_a_probe_object_on_s3_and_lists_iceberg_catalogs(tmp_path, endpoint):
    from click.testing import CliRunner

    from rivc.adapters.cli import main
    from rivc_testing import free_port, write_files

    store = "{" + ", ".join(f"{k}: '{v}'" for k, v in options(endpoint).items()) + "}"
    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: doc\n",
            "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
            "      - {name: orders, config: {pattern: orders, max_events: 5}}\n",
            "sinks/out.yml": f"""
sinks:
  - {{name: reachable, from: source:gen.orders, connector: files,
     config: {{path: s3://lake/out, format: parquet, storage_options: {store}}}}}
  - {{name: no_bucket, from: source:gen.orders, connector: delta,
     config: {{table_uri: s3://rivc-no-such-bucket/out, storage_options: {store}}}}}
  - {{name: ice, from: source:gen.orders, connector: iceberg,
     config: {{namespace: n, table: t}}}}
  - {{name: ice_down, from: source:gen.orders, connector: iceberg,
     config: {{namespace: n, table: t,
              catalog: {{type: rest, uri: "http://127.0.0.1:{free_port()}"}}}}}}
""",
        },
    )
    done = CliRunner().invoke(main, ["doctor", "--project-dir", str(root)])
    lines = {line.split(":")[0]: line for line in done.output.splitlines()}
    assert done.exit_code == 1, done.output
    assert "[OK] sink reachable (files s3" in lines, (done.output, repr(done.exception))
    assert lines["[OK] sink reachable (files s3"].endswith("(a probe object written and removed)")
    assert lines["[FAIL] sink no_bucket (delta s3"].split(": ", 1)[1].startswith("cannot write")
    assert "lists 0 namespace(s)" in lines["[OK] sink ice (iceberg)"]
    assert "[FAIL] sink ice_down (iceberg)" in lines
    fs = pafs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", access_key="test", secret_key="test"
    )
    leftovers = fs.get_file_info(pafs.FileSelector("lake", recursive=True))
    assert not [f.path for f in leftovers if ".rivc-probe-" in f.path]
