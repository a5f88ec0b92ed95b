"""Every sink from a real Spark run, read back with an independent reader."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from rivc_testing import at_entry, iceberg_catalog, last_run, rivc, run_rivc, write_files

pytestmark = pytest.mark.integration

MODEL = """{{ config(materialized='table') }}
select order_id, customer_id, status, total, created_at, cast(created_at as date) as day
from {{ source('gen', 'orders') }}
"""


def project(root: Path, sinks: str, model: str = MODEL) -> Path:
    files = {
        "rivc_project.yml": "name: sinks\n",
        "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
        "      - {name: orders, config: {pattern: orders, max_events: 300, seed: 11,"
        " events_per_second: 0.001}}\n",
        "models/orders.sql": model,
        "sinks/out.yml": sinks,
    }
    return write_files(root, files)


def results(root: Path) -> dict[str, dict]:
    data = last_run(root)
    return {r["node"]: r for r in data["results"]}


SINKS = """
sinks:
  - {name: pq, from: orders, connector: files,
     config: {path: out/pq, format: parquet, compression: zstd, partitioning: columns,
              partition_by: [status], mode: overwrite}}
  - {name: csv, from: orders, connector: files,
     config: {path: out/csv, format: csv, compression: gzip, partitioning: day,
              time_column: created_at, mode: overwrite}}
  - {name: jsonl, from: orders, connector: files,
     config: {path: out/jsonl, format: jsonl, max_file_size: 10KB, mode: overwrite}}
  - {name: json, from: orders, connector: files, config: {path: out/json, format: json, mode: overwrite}}
  - {name: avro, from: orders, connector: files,
     config: {path: out/avro, format: avro, compression: snappy, mode: overwrite}}
  - {name: lake, from: orders, connector: delta,
     config: {table_uri: out/delta, mode: merge, merge_keys: [order_id], partition_by: [day],
              compression: zstd, schema_evolution: add_columns}}
  - {name: ice, from: orders, connector: iceberg,
     config: {namespace: shop, table: orders, mode: upsert, key_fields: [order_id],
              schema_evolution: add_columns,
              partitioning: [{field: day, transform: identity}]}}
"""


def test_every_sink_from_spark_read_back_independently(spark, tmp_path):
    root = project(tmp_path / "s", SINKS)
    (root / "profiles.yml").write_text("default:\n  openlineage: {file: lineage.jsonl}\n")
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    # each sink's dataset in the lineage events, as its connector names it
    events = [json.loads(line) for line in (root / "lineage.jsonl").read_text().splitlines()]
    outputs = {
        e["job"]["name"]: (e["outputs"][0]["namespace"], e["outputs"][0]["name"])
        for e in events
        if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith("sink:")
    }
    assert outputs["sink:ice"] == ("iceberg", "shop.orders")
    assert outputs["sink:lake"] == ("delta", "out/delta")
    assert outputs["sink:pq"] == ("files", "out/pq")
    out = root / "out"
    # table commits and their latency per node; file sinks make none
    nodes = results(root)
    assert nodes["sink:lake"]["commits"] == 1 and nodes["sink:lake"]["commit_ms"] > 0
    assert nodes["sink:ice"]["commits"] == 1 and nodes["sink:pq"]["commits"] == 0
    assert "1 commit in" in nodes["sink:lake"]["message"]

    # parquet: Hive partitions by status, zstd inside the files
    assert {p.name.split("=")[0] for p in (out / "pq").iterdir() if p.name != "_rivc"} == {"status"}
    any_file = next((out / "pq").rglob("*.parquet"))
    assert pq.ParquetFile(any_file).metadata.row_group(0).column(0).compression == "ZSTD"
    assert duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{out}/pq/*/*.parquet', hive_partitioning=true)"
    ).fetchall() == [(300,)]
    # csv.gz by day; jsonl split by size; json array; avro
    assert all(p.name.startswith("dt=") for p in (out / "csv").iterdir() if p.name != "_rivc")
    assert duckdb.sql(f"SELECT count(*) FROM read_csv('{out}/csv/*/*.csv.gz')").fetchall() == [
        (300,)
    ]
    jsonl = sorted((out / "jsonl").glob("*.jsonl"))
    assert len(jsonl) > 1
    assert duckdb.sql(f"SELECT count(*) FROM read_json('{out}/jsonl/*.jsonl')").fetchall() == [
        (300,)
    ]
    assert duckdb.sql(f"SELECT count(*) FROM read_json('{out}/json/*.json')").fetchall() == [(300,)]
    with open(next((out / "avro").glob("*.avro")), "rb") as fh:
        reader = fastavro.reader(fh)
        assert reader.codec == "snappy"
        assert len(list(reader)) == 300
    # delta: deltalake and DuckDB over its files
    lake = DeltaTable(str(out / "delta"))
    assert lake.metadata().partition_columns == ["day"]
    files = [
        str(out / "delta" / p)
        for p in lake.get_add_actions(flatten=True).column("path").to_pylist()
    ]
    assert duckdb.sql(
        f"SELECT count(DISTINCT order_id) FROM read_parquet({files!r})"
    ).fetchall() == [(300,)]
    # iceberg: pyiceberg scans, and time travel once there is a second snapshot
    from pyiceberg.catalog.sql import SqlCatalog

    home = root / ".rivc/iceberg"
    catalog = SqlCatalog(
        "rivc", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )
    first = catalog.load_table("shop.orders").current_snapshot().snapshot_id

    # A new column upstream: delta and iceberg evolve (add_columns); a rerun replaces the files.
    (root / "models/orders.sql").write_text(MODEL.replace("as day\n", "as day, 'web' as channel\n"))
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    assert results(root)["sink:ice"]["commits"] == 2  # the new column, then the data
    lake = DeltaTable(str(out / "delta")).to_pyarrow_table()
    assert "channel" in lake.column_names and lake.num_rows == 300
    table = catalog.load_table("shop.orders")
    assert "channel" in [f.name for f in table.schema().fields]
    now = table.scan().to_arrow()
    assert now.num_rows == 300 and set(now.column("channel").to_pylist()) == {"web"}
    before = table.scan(snapshot_id=first).to_arrow()
    assert before.num_rows == 300 and "channel" not in before.column_names
    assert duckdb.sql(f"SELECT count(*) FROM read_json('{out}/json/*.json')").fetchall() == [(300,)]
    assert all(r["status"] == "success" for r in results(root).values())


def test_delta_append_and_overwrite_commit_files_spark_wrote(spark, tmp_path):
    root = project(
        tmp_path / "d",
        """
sinks:
  - {name: app, from: orders, connector: delta,
     config: {table_uri: out/app, mode: append, compression: zstd, spark_write_threshold: 0}}
  - {name: over, from: orders, connector: delta,
     config: {table_uri: out/over, mode: overwrite, spark_write_threshold: 0}}
  - {name: parts, from: orders, connector: delta,
     config: {table_uri: out/parts, partition_by: [status], spark_write_threshold: 0}}
  - {name: small, from: orders, connector: delta, config: {table_uri: out/small}}
""",
    )
    for again in ([], ["--full-refresh"]):  # the unchanged model built again: a second batch
        assert rivc(root, "run", *again).exit_code == 0
    app = DeltaTable(str(root / "out/app"))
    paths = app.get_add_actions(flatten=True).column("path").to_pylist()
    assert all(p.startswith("rivc-batch-") for p in paths)  # written by Spark's executors
    files = [str(root / "out/app" / p) for p in paths]
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet({files!r})").fetchall() == [(600,)]
    assert app.transaction_version("rivc:sinks:app") == 1
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "ZSTD"
    assert DeltaTable(str(root / "out/over")).to_pyarrow_table().num_rows == 300
    leftovers = [p for p in (root / "out/app").rglob("*") if p.is_file() and p.suffix == ".crc"]
    assert leftovers == []
    # footer statistics in the add actions: exact min and max of order_id, null counts
    actions = pa.table(app.get_add_actions(flatten=True)).to_pylist()
    assert min(a["min.order_id"] for a in actions) == 1
    assert max(a["max.order_id"] for a in actions) == 300
    assert all(a["null_count.status"] == 0 for a in actions)

    # partitioned: Hive-style directories, partition columns only in the log, read back by both
    parts = DeltaTable(str(root / "out/parts"))
    assert parts.metadata().partition_columns == ["status"]
    adds = pa.table(parts.get_add_actions(flatten=True)).to_pylist()
    assert all(a["path"].startswith("rivc-batch-") and "/status=" in a["path"] for a in adds)
    assert {a["partition.status"] for a in adds} == {
        "pending",
        "paid",
        "shipped",
        "delivered",
        "cancelled",
    }
    expected = duckdb.sql(
        f"SELECT status, count(*) FROM read_parquet({files!r}) GROUP BY 1 ORDER BY 1"
    ).fetchall()
    got = parts.to_pyarrow_table().group_by("status").aggregate([("order_id", "count")])
    counts = sorted(zip(*got.to_pydict().values(), strict=True))
    assert counts == [(s, n) for s, n in expected]  # both runs' rows, as in the app table
    assert parts.to_pyarrow_table().schema.names == app.to_pyarrow_table().schema.names

    # a small batch (Spark's estimate under 64MB) goes through the driver as one file
    small = pa.table(DeltaTable(str(root / "out/small")).get_add_actions(flatten=True)).to_pylist()
    assert len(small) == 2 and not any(a["path"].startswith("rivc-batch-") for a in small)

    # another partition_by on the partitioned table: refused by name, the table untouched;
    # without one, the table's own partitioning takes the batch
    version = parts.version()
    sinks = (root / "sinks/out.yml").read_text()
    (root / "sinks/out.yml").write_text(
        sinks.replace("partition_by: [status]", "partition_by: [order_id]")
    )
    changed = rivc(root, "run", "--full-refresh", "--select", "+parts")
    assert changed.exit_code == 1
    assert "partition_by is order_id but" in changed.output
    assert "is partitioned by status; Delta cannot change" in changed.output
    assert DeltaTable(str(root / "out/parts")).version() == version
    (root / "sinks/out.yml").write_text(sinks.replace("partition_by: [status], ", ""))
    assert rivc(root, "run", "--full-refresh", "--select", "+parts").exit_code == 0
    again = DeltaTable(str(root / "out/parts"))
    assert again.to_pyarrow_table().num_rows == 900 and again.metadata().partition_columns == [
        "status"
    ]
    assert all(
        "/status=" in a for a in again.get_add_actions(flatten=True).column("path").to_pylist()
    )

    # a sink that may not create its table: refused by name, nothing made; once the table
    # exists, the batch lands in it
    (root / "sinks/out.yml").write_text(
        sinks + "  - {name: absent, from: orders, connector: delta,\n"
        "     config: {table_uri: out/absent, auto_create_table: false}}\n"
    )
    refused = rivc(root, "run", "--select", "+absent")
    assert refused.exit_code == 1 and "holds no Delta table and auto_create_table" in refused.output
    assert not (root / "out/absent").exists()
    write_deltalake(str(root / "out/absent"), app.to_pyarrow_table().slice(0, 0))
    assert rivc(root, "run", "--select", "+absent").exit_code == 0
    assert DeltaTable(str(root / "out/absent")).to_pyarrow_table().num_rows == 300


def model_days(root: Path) -> tuple[list, list]:
    model = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
    return model.column("created_at").to_pylist(), model.column("status").to_pylist()


def test_iceberg_append_adds_files_spark_wrote(spark, tmp_path):
    root = project(
        tmp_path / "i",
        """
sinks:
  - {name: ice, from: orders, connector: iceberg,
     config: {namespace: shop, table: big, spark_write_threshold: 0,
              partitioning: [{field: created_at, transform: day}, {field: status}]}}
""",
    )
    for again in ([], ["--full-refresh"]):  # the unchanged model built again: a second batch
        result = rivc(root, "run", *again)
        assert result.exit_code == 0, result.output
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import EqualTo

    home = root / ".rivc/iceberg"
    catalog = SqlCatalog(
        "rivc", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )
    table = catalog.load_table("shop.big")
    files = table.inspect.files().to_pylist()
    assert files and all("/data/rivc-batch-" in f["file_path"] for f in files)
    days = {(r.date(), s) for r, s in zip(*model_days(root), strict=True)}
    assert {
        (f["partition"]["created_at_day"], f["partition"]["status_identity"]) for f in files
    } == days
    rows = table.scan().to_arrow()
    assert rows.num_rows == 600 and len(set(rows.column("order_id").to_pylist())) == 300
    paid = table.scan(row_filter=EqualTo("status", "paid")).to_arrow()
    model = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
    expected = model.column("status").to_pylist().count("paid")
    assert paid.num_rows == 2 * expected
    assert table.properties["rivc.batch.rivc:sinks:ice"] == "1"
    assert [s.summary["rivc.batch.rivc:sinks:ice"] for s in table.snapshots()][-1] == "1"


def test_target_file_size_rolls_files_on_both_paths_of_both_lakehouse_sinks(spark, tmp_path):
    """25,000 rows of 32 random hex characters (about 1 MB): with target_file_size 200 kB each
    sink writes several files, read back whole with deltalake and pyiceberg; without it,
    a task's rows are one file."""
    model = """{{ config(materialized='table') }}
select id, md5(cast(id as string)) as digest from (select explode(sequence(1, 25000)) as id)
"""
    sized = "target_file_size: 200000"
    root = project(
        tmp_path / "t",
        f"""
sinks:
  - {{name: dspark, from: orders, connector: delta,
     config: {{table_uri: out/dspark, {sized}, spark_write_threshold: 0}}}}
  - {{name: dplain, from: orders, connector: delta, config: {{table_uri: out/dplain}}}}
  - {{name: ispark, from: orders, connector: iceberg,
     config: {{namespace: t, table: spark, {sized}, spark_write_threshold: 0}}}}
  - {{name: istream, from: orders, connector: iceberg, config: {{namespace: t, table: streamed, {sized}}}}}
""",
        model,
    )
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    want = {(i, hashlib.md5(str(i).encode()).hexdigest()) for i in range(1, 25001)}

    def delta(name: str) -> tuple[int, set]:
        dt = DeltaTable(str(root / "out" / name))
        rows = dt.to_pyarrow_table().to_pylist()
        return len(dt.file_uris()), {(r["id"], r["digest"]) for r in rows}

    def iceberg(name: str) -> tuple[int, set]:
        table = iceberg_catalog(root).load_table(f"t.{name}")
        rows = table.scan().to_arrow().to_pylist()
        return len(table.inspect.files()), {(r["id"], r["digest"]) for r in rows}

    plain_files, plain_rows = delta("dplain")
    assert plain_rows == want and plain_files == 1
    for name, (files, rows) in zip(
        ("dspark", "ispark", "istream"),
        (delta("dspark"), iceberg("spark"), iceberg("streamed")),
        strict=True,
    ):
        assert rows == want and files >= 3, (name, files)


def test_a_type_compile_could_not_see_is_refused_before_the_table_is_touched(spark, tmp_path):
    model = """{{ config(materialized='view') }}
select order_id, created_at - timestamp'2026-01-01 00:00:00' as since_new_year
from {{ source('gen', 'orders') }}
"""
    sinks = """
sinks:
  - {name: lake, from: orders, connector: delta, config: {table_uri: out/delta}}
"""
    root = project(tmp_path / "p", sinks, model)
    result = rivc(root, "run")
    assert result.exit_code == 1, result.output
    failed = results(root)["sink:lake"]
    assert failed["status"] == "error"
    assert at_entry(failed["error"], "sinks/out.yml") == (
        "sink:lake cannot hold column 'since_new_year', of type interval day to second: no "
        "table or file format rivc writes has an interval type; cast it in the model, e.g. to "
        "bigint seconds or to string"
    )
    assert not (root / "out" / "delta").exists()


def test_a_widened_column_is_refused_by_iceberg_naming_both_types_and_full_evolution_takes_it(
    spark, tmp_path
):
    """A decimal(10,2) column becomes decimal(12,2) in the model: the Iceberg sink (strict)
    refuses the batch naming the column and both types, as the Delta sink does, with the table
    untouched; `schema_evolution: full` widens the column, and pyiceberg reads every value."""
    from decimal import Decimal

    model = """{{ config(materialized='table') }}
select order_id, cast(total as decimal(PRECISION, 2)) as total from {{ source('gen', 'orders') }}
"""
    sinks = """
sinks:
  - {name: ice, from: orders, connector: iceberg, config: {namespace: w, table: t, mode: append}}
  - {name: lake, from: orders, connector: delta, config: {table_uri: out/delta, mode: append}}
"""
    root = project(tmp_path / "p", sinks, model.replace("PRECISION", "10"))
    assert rivc(root, "run").exit_code == 0
    write_files(root, {"models/orders.sql": model.replace("PRECISION", "12")})
    refused = rivc(root, "run")
    assert refused.exit_code == 1
    for node in ("sink:ice", "sink:lake"):
        error = results(root)[node]["error"]
        assert "amount" not in error and "total" in error, error
        assert (
            "decimal(12,2)" in error or "Decimal128(12, 2)" in error
        ) and "unexpected" not in error
    assert "holds decimal(10,2)" in results(root)["sink:ice"]["error"]
    table = iceberg_catalog(root).load_table("w.t")
    assert len(table.scan().to_arrow()) == 300  # untouched
    write_files(
        root, {"sinks/out.yml": sinks.replace("append}", "append, schema_evolution: full}", 1)}
    )
    assert rivc(root, "run", "--select", "ice").exit_code == 0
    rows = iceberg_catalog(root).load_table("w.t").scan().to_arrow()
    assert str(rows.schema.field("total").type) == "decimal128(12, 2)" and len(rows) == 600
    assert all(isinstance(v, Decimal) for v in rows.column("total").to_pylist())


UPSERTED = """{{ config(materialized='table') }}
select order_id, customer_id, status, total + {{ var('bump', 0) }} as total, created_at,
       cast(created_at as date) as day
from {{ source('gen', 'orders') }}
where {{ var('where', 'true') }}
"""


def test_brotli_iceberg_files_on_both_paths(spark, tmp_path):
    """Brotli, as the seed's Iceberg sink writes it: by Spark's tasks (through rivc's task, since
    Spark's own writer has no brotli codec) and by pyiceberg on rivc's side."""
    root = project(
        tmp_path / "b",
        """
sinks:
  - {name: tasks, from: orders, connector: iceberg,
     config: {namespace: shop, table: tasks, compression: brotli, spark_write_threshold: 0}}
  - {name: streamed, from: orders, connector: iceberg,
     config: {namespace: shop, table: streamed, compression: brotli}}
""",
    )
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    from pyiceberg.catalog.sql import SqlCatalog

    home = root / ".rivc/iceberg"
    catalog = SqlCatalog(
        "rivc", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )
    model = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
    for name, written_by in (("tasks", "/data/rivc-batch-"), ("streamed", "/data/")):
        table = catalog.load_table(f"shop.{name}")
        files = [f["file_path"] for f in table.inspect.files().to_pylist()]
        assert files and all(written_by in f for f in files), files
        for f in files:
            meta = pq.ParquetFile(f.removeprefix("file://")).metadata
            assert meta.row_group(0).column(0).compression == "BROTLI", name
        rows = table.scan().to_arrow().sort_by("order_id")
        assert rows.select(model.column_names).equals(
            model.sort_by("order_id").cast(rows.select(model.column_names).schema)
        )


def test_iceberg_overwrite_of_partitions_replaces_only_those_the_batch_writes(spark, tmp_path):
    """overwrite_scope partitions (the seed's overwrite): a batch of the paid orders replaces
    the paid partition and keeps the others, on a day-and-status partitioned table too; the
    table-scope overwrite beside it holds only the batch. Read back with pyiceberg against the
    model's table read with deltalake."""
    scoped = "mode: overwrite, overwrite_scope: partitions"
    root = project(
        tmp_path / "o",
        f"""
sinks:
  - {{name: parts, from: orders, connector: iceberg,
     config: {{namespace: shop, table: parts, {scoped},
              partitioning: [{{field: status}}]}}}}
  - {{name: days, from: orders, connector: iceberg,
     config: {{namespace: shop, table: days, {scoped}, spark_write_threshold: 0,
              partitioning: [{{field: created_at, transform: day}}, {{field: status}}]}}}}
  - {{name: whole, from: orders, connector: iceberg,
     config: {{namespace: shop, table: whole, mode: overwrite}}}}
""",
        UPSERTED,
    )
    first_run = rivc(root, "run")
    assert first_run.exit_code == 0, first_run.output
    model = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table().to_pylist()
    first = {r["order_id"]: (r["status"], r["total"]) for r in model}
    paid = {k for k, (status, _) in first.items() if status == "paid"}
    assert paid and len(paid) < len(first)
    again = rivc(root, "run", "--vars", "{bump: 1000, where: \"status = 'paid'\"}")
    assert again.exit_code == 0, again.output
    want = {k: (s, t + 1000 if k in paid else t) for k, (s, t) in first.items()}
    catalog = iceberg_catalog(root)
    for name in ("parts", "days"):
        rows = catalog.load_table(f"shop.{name}").scan().to_arrow().to_pylist()
        assert len(rows) == len(first)
        assert {r["order_id"]: (r["status"], r["total"]) for r in rows} == want, name
    whole = catalog.load_table("shop.whole").scan().to_arrow().to_pylist()
    assert {r["order_id"] for r in whole} == paid

    # killed after Spark wrote the paid partition's files, before the snapshot: the table is
    # as it was; the rerun replaces the partition once
    bumped = "{bump: 2000, where: \"status = 'paid'\"}"
    killed = run_rivc(root, "before-commit:parts", "run", "--vars", bumped)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    rows = iceberg_catalog(root).load_table("shop.parts").scan().to_arrow().to_pylist()
    assert {r["order_id"]: (r["status"], r["total"]) for r in rows} == want
    rerun = run_rivc(root, None, "run", "--vars", bumped)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    rows = iceberg_catalog(root).load_table("shop.parts").scan().to_arrow().to_pylist()
    twice = {k: (s, t + 2000 if k in paid else t) for k, (s, t) in first.items()}
    assert len(rows) == len(first)
    assert {r["order_id"]: (r["status"], r["total"]) for r in rows} == twice


def test_iceberg_upsert_on_executors_rewrites_only_the_files_its_keys_can_be_in(spark, tmp_path):
    """An upsert written by Spark's tasks (spark_write_threshold 0): the files whose order_id
    bounds can hold a key of the batch are read, joined with the batch and rewritten by Spark,
    and one snapshot replaces them; every other file stays as it was."""
    root = project(
        tmp_path / "u",
        """
sinks:
  - {name: ice, from: orders, connector: iceberg,
     config: {namespace: shop, table: up, mode: upsert, key_fields: [order_id],
              spark_write_threshold: 0, partitioning: [{field: day, transform: identity}]}}
""",
        UPSERTED,
    )
    assert rivc(root, "run").exit_code == 0
    catalog = iceberg_catalog(root)
    before = catalog.load_table("shop.up")
    first = {r["order_id"]: r for r in before.scan().to_arrow().to_pylist()}
    assert len(first) == 300
    files_before = {t.file.file_path: t.file for t in before.scan().plan_files()}
    assert len(files_before) > 2

    bump = rivc(root, "run", "--vars", "{bump: 1000, where: 'order_id <= 10'}")
    assert bump.exit_code == 0, bump.output
    after = catalog.load_table("shop.up")
    rows = after.scan().to_arrow().to_pylist()
    assert len(rows) == 300 and len({r["order_id"] for r in rows}) == 300
    for r in rows:
        was = first[r["order_id"]]
        want = was["total"] + 1000 if r["order_id"] <= 10 else was["total"]
        assert r["total"] == want and r["status"] == was["status"], r
    files_after = {t.file.file_path for t in after.scan().plan_files()}
    gone = set(files_before) - files_after
    # exactly the files whose bounds could hold order ids 1..10 were replaced, by new files
    # Spark wrote under data/rivc-batch-000001-*; the others are the same files
    id_field = after.schema().find_field("order_id").field_id
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    def low(f):
        return from_bytes(LongType(), f.lower_bounds[id_field])

    assert gone == {p for p, f in files_before.items() if low(f) <= 10}
    assert gone and len(gone) < len(files_before)
    added = files_after - set(files_before)
    assert added and all("/data/rivc-batch-000001-" in p for p in added)
    summary = after.current_snapshot().summary
    assert summary.operation.value == "overwrite"
    assert int(summary["deleted-data-files"]) == len(gone)
    assert after.properties["rivc.batch.rivc:sinks:ice"] == "1"


def test_iceberg_truncate_and_bucket_partitions_are_written_by_spark_as_iceberg_computes_them(
    spark, tmp_path
):
    """Spark computes truncate(10) of a bigint (negative values too) and truncate(2) of a string
    for each row; every file it writes holds one partition value, and the partition of each
    file is what pyiceberg's own transform gives for its rows. Buckets of a bigint and of a
    string are computed in Spark's tasks by pyiceberg's transform, and committed with the
    partition each file was written under."""
    from pyiceberg.transforms import BucketTransform, TruncateTransform
    from pyiceberg.types import LongType, StringType

    model = """{{ config(materialized='table') }}
select order_id, customer_id - 150 as customer_id, status, total
from {{ source('gen', 'orders') }}
"""
    root = project(
        tmp_path / "t",
        """
sinks:
  - {name: cut, from: orders, connector: iceberg,
     config: {namespace: shop, table: cut, spark_write_threshold: 0,
              partitioning: [{field: customer_id, transform: truncate, width: 10},
                             {field: status, transform: truncate, width: 2}]}}
  - {name: hashed, from: orders, connector: iceberg,
     config: {namespace: shop, table: hashed, spark_write_threshold: 0,
              partitioning: [{field: order_id, transform: bucket, buckets: 4},
                             {field: status, transform: bucket, buckets: 3}]}}
""",
        model,
    )
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    catalog = iceberg_catalog(root)
    cut = catalog.load_table("shop.cut")
    by_int = TruncateTransform(10).transform(LongType())
    by_str = TruncateTransform(2).transform(StringType())
    rows = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table().to_pylist()
    assert any(r["customer_id"] < 0 for r in rows)
    files = cut.inspect.files().to_pylist()
    assert files and all("/data/rivc-batch-" in f["file_path"] for f in files)
    want = {(by_int(r["customer_id"]), by_str(r["status"])) for r in rows}
    got = {
        (f["partition"]["customer_id_truncate"], f["partition"]["status_truncate"]) for f in files
    }
    assert got == want
    for f in files:  # every row of a file is in that file's partition
        part = f["partition"]
        table = pq.read_table(f["file_path"].removeprefix("file://"))
        assert {by_int(v) for v in table.column("customer_id").to_pylist()} == {
            part["customer_id_truncate"]
        }
        assert {by_str(v) for v in table.column("status").to_pylist()} == {part["status_truncate"]}
    assert cut.scan().to_arrow().num_rows == 300
    shown = rivc(root, "show", "cut", "--limit", "4")  # the sink's table, read with pyiceberg
    assert shown.exit_code == 0, shown.output
    assert len([line for line in shown.output.splitlines() if "│" in line]) == 4
    assert "customer_id" in shown.output.splitlines()[0]

    hashed = catalog.load_table("shop.hashed")
    by_id = BucketTransform(4).transform(LongType())
    by_status = BucketTransform(3).transform(StringType())
    files = hashed.inspect.files().to_pylist()
    assert files and all("/data/rivc-batch-" in f["file_path"] for f in files)
    assert {
        (f["partition"]["order_id_bucket"], f["partition"]["status_bucket"]) for f in files
    } == {(by_id(r["order_id"]), by_status(r["status"])) for r in rows}
    for f in files:
        part = f["partition"]
        table = pq.read_table(f["file_path"].removeprefix("file://"))
        assert {by_id(v) for v in table.column("order_id").to_pylist()} == {part["order_id_bucket"]}
        assert {by_status(v) for v in table.column("status").to_pylist()} == {part["status_bucket"]}
    # pyiceberg prunes by those partitions: a key finds its row
    from pyiceberg.expressions import EqualTo

    one = hashed.scan(row_filter=EqualTo("order_id", rows[7]["order_id"])).to_arrow()
    assert one.column("order_id").to_pylist() == [rows[7]["order_id"]]
    assert sorted(hashed.scan().to_arrow().column("order_id").to_pylist()) == sorted(
        r["order_id"] for r in rows
    )


def test_a_merge_or_upsert_batch_holding_a_key_twice_is_refused_on_every_path(spark, tmp_path):
    """Which of two rows with one key would win is undefined (delta-rs inserted both when the
    key was new): each merge and upsert path refuses the batch by its key, before writing."""
    model = """{{ config(materialized='table') }}
select order_id, status from {{ source('gen', 'orders') }}
union all
select order_id, 'again' as status from {{ source('gen', 'orders') }} where order_id = 7
"""
    root = project(
        tmp_path / "dupes",
        """
sinks:
  - {name: lake_streamed, from: orders, connector: delta,
     config: {table_uri: out/streamed, mode: merge, merge_keys: [order_id]}}
  - {name: lake_tasks, from: orders, connector: delta,
     config: {table_uri: out/tasks, mode: merge, merge_keys: [order_id],
              spark_write_threshold: 0}}
  - {name: ice_streamed, from: orders, connector: iceberg,
     config: {namespace: d, table: streamed, mode: upsert, key_fields: [order_id]}}
  - {name: ice_tasks, from: orders, connector: iceberg,
     config: {namespace: d, table: tasks, mode: upsert, key_fields: [order_id],
              spark_write_threshold: 0}}
""",
        model,
    )
    result = rivc(root, "run")
    assert result.exit_code == 1
    nodes = results(root)
    for sink, target in [
        ("lake_streamed", "merge into "),
        ("lake_tasks", "merge into "),
        ("ice_streamed", "upsert into d.streamed"),
        ("ice_tasks", "upsert into d.tasks"),
    ]:
        error = nodes[f"sink:{sink}"]["error"]
        assert nodes[f"sink:{sink}"]["status"] == "error", sink
        assert target in error and "the batch holds key (order_id=7) more than once" in error, error
    assert not (root / "out/streamed").exists() and not (root / "out/tasks").exists()
    catalog = iceberg_catalog(root)
    for name in ("d.streamed", "d.tasks"):
        table = catalog.load_table(name) if catalog.table_exists(name) else None
        assert table is None or table.current_snapshot() is None, name


@pytest.mark.parametrize("threshold", [0, None], ids=["spark-writes", "streamed"])
def test_a_changed_iceberg_partitioning_evolves_the_tables_spec(spark, tmp_path, threshold):
    """Never ignored: the table takes the configured spec (Iceberg's partition evolution), its
    earlier files keep theirs, and a scan reads both."""
    model = MODEL.replace(
        "from {{ source('gen', 'orders') }}",
        "from {{ source('gen', 'orders') }}\nwhere order_id > ${min_id}",
    )
    extra = "" if threshold is None else f", spark_write_threshold: {threshold}"
    sink = (
        "sinks:\n  - {name: ice, from: orders, connector: iceberg,\n"
        f"     config: {{namespace: shop, table: evolving{extra},\n"
        "              partitioning: [PARTS]}}\n"
    )
    root = project(
        tmp_path / "e", sink.replace("PARTS", "{field: created_at, transform: day}"), model
    )
    (root / "rivc_project.yml").write_text("name: sinks\nparams:\n  min_id: 0\n")
    assert rivc(root, "run").exit_code == 0
    (root / "sinks/out.yml").write_text(sink.replace("PARTS", "{field: status}, {field: day}"))
    second = rivc(root, "run", "--param", "min_id=200")
    assert second.exit_code == 0, second.output

    table = iceberg_catalog(root).load_table("shop.evolving")
    fields = [(f.name, str(f.transform)) for f in table.spec().fields]
    assert fields == [("status_identity", "identity"), ("day_identity", "identity")]
    files = table.inspect.files().to_pylist()
    by_spec: dict[int, set] = {}
    for f in files:
        by_spec.setdefault(f["spec_id"], set()).update(
            k for k, v in f["partition"].items() if v is not None
        )
    new = {"status_identity", "day_identity"}
    assert [by_spec[k] for k in sorted(by_spec)] == [{"created_at_day"}, new]
    assert max(by_spec) == table.spec().spec_id
    rows = table.scan().to_arrow()
    ids = sorted(rows.column("order_id").to_pylist())
    assert ids == sorted(list(range(1, 301)) + list(range(201, 301)))
    from pyiceberg.expressions import EqualTo

    paid = table.scan(row_filter=EqualTo("status", "paid")).to_arrow()
    assert paid.num_rows == sum(1 for s in rows.column("status").to_pylist() if s == "paid")


def test_an_iceberg_table_in_a_glue_catalog_on_s3(spark, tmp_path, monkeypatch):
    """The seed's production setup, on moto's Glue and S3: both paths of the iceberg sink make
    and fill a table the Glue catalog lists (read back with boto3 and pyiceberg), each batch once
    (a second run with nothing new adds nothing, a rebuilt model's batch lands once more)."""
    import boto3
    from pyiceberg.catalog.glue import GlueCatalog

    from rivc_testing import S3_KEYS, moto_s3

    with moto_s3() as url:
        env = {**S3_KEYS, "AWS_ENDPOINT_URL": url, "AWS_ALLOW_HTTP": "true"}
        for key, value in {**env, "AWS_DEFAULT_REGION": "us-east-1"}.items():
            monkeypatch.setenv(key, value)
        glue = boto3.client("glue", endpoint_url=url, region_name="us-east-1")
        glue.create_database(DatabaseInput={"Name": "shop"})
        catalog = (
            "{type: glue, warehouse: 's3://lake/wh', "
            f"properties: {{glue.endpoint: '{url}', glue.region: us-east-1}}}}"
        )
        root = project(
            tmp_path / "g",
            f"""
sinks:
  - {{name: spark_path, from: orders, connector: iceberg,
     config: {{catalog: {catalog}, namespace: shop, table: big, spark_write_threshold: 0}}}}
  - {{name: streamed, from: orders, connector: iceberg,
     config: {{catalog: {catalog}, namespace: shop, table: small}}}}
""",
        )
        for args in ([], [], ["--full-refresh"]):
            result = rivc(root, "run", *args)
            assert result.exit_code == 0, result.output
        listed = glue.get_tables(DatabaseName="shop")["TableList"]
        assert {t["Name"] for t in listed} == {"big", "small"}
        assert all(t["Parameters"]["table_type"].upper() == "ICEBERG" for t in listed)
        reader = GlueCatalog(
            "check", **{"glue.endpoint": url, "glue.region": "us-east-1", "s3.endpoint": url}
        )
        model = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
        want = sorted(model.column("order_id").to_pylist() * 2)  # two batches, each once
        for name in ("big", "small"):
            table = reader.load_table(f"shop.{name}")
            assert table.location().startswith("s3://lake/wh/")
            rows = table.scan().to_arrow()
            assert sorted(rows.column("order_id").to_pylist()) == want


def test_an_iceberg_table_in_a_hive_metastore(spark, tmp_path):
    """`catalog: {type: hive, uri: thrift://...}`: a Hive metastore started from the Hive jars
    PySpark ships (Derby behind it). Both paths of the iceberg sink make and fill a table the
    metastore lists under its database, each batch once across runs (a rebuilt model's batch
    lands once more), read back by name with another client of the metastore."""
    from pyiceberg.catalog.hive import HiveCatalog

    from rivc_testing import hive_metastore

    with hive_metastore(tmp_path / "hms") as uri:
        reader = HiveCatalog("check", uri=uri, warehouse=(tmp_path / "lake").as_uri())
        reader.create_namespace("shop", {"location": (tmp_path / "lake" / "shop").as_uri()})
        catalog = f"{{type: hive, uri: '{uri}', warehouse: {tmp_path / 'lake'}}}"
        root = project(
            tmp_path / "h",
            f"""
sinks:
  - {{name: spark_path, from: orders, connector: iceberg,
     config: {{catalog: {catalog}, namespace: shop, table: big, spark_write_threshold: 0}}}}
  - {{name: streamed, from: orders, connector: iceberg,
     config: {{catalog: {catalog}, namespace: shop, table: small, mode: upsert,
               key_fields: [order_id]}}}}
""",
        )
        for args in ([], ["--full-refresh"]):
            result = rivc(root, "run", *args)
            assert result.exit_code == 0, result.output
        assert sorted(t[1] for t in reader.list_tables("shop")) == ["big", "small"]
        ids = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table().column("order_id")
        big = reader.load_table("shop.big")
        assert big.location().removeprefix("file:").lstrip("/") == str(
            tmp_path / "lake/shop/big"
        ).lstrip("/")  # in the database's location, as the metastore says
        rows = big.scan().to_arrow().column("order_id").to_pylist()
        assert sorted(rows) == sorted(ids.to_pylist() * 2)  # two batches, each once
        small = reader.load_table("shop.small").scan().to_arrow().column("order_id")
        assert sorted(small.to_pylist()) == sorted(ids.to_pylist())  # upserted by key


def test_each_run_leaves_its_metrics_for_prometheus_and_its_lineage_for_openlineage(
    spark, tmp_path
):
    """profiles.yml `metrics:` writes every run's node results in Prometheus's text format to a
    file (node_exporter's textfile collector) and PUTs them to a Pushgateway (a local HTTP
    receiver here), read back with prometheus_client's parser; `openlineage:` sends each node's
    START and COMPLETE events, with the column lineage, to an HTTP endpoint and a file. An
    unreachable receiver is a warning, never a failed run."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from prometheus_client.parser import text_string_to_metric_families

    pushed: list[tuple[str, str, bytes]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            pushed.append((self.command, self.path, body))
            self.send_response(200)
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            pushed.append((self.command, self.path, body))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    gateway = f"http://127.0.0.1:{server.server_port}"
    root = project(
        tmp_path / "m",
        "sinks:\n  - {name: lake, from: orders, connector: delta, config: {table_uri: out/lake}}\n",
    )
    (root / "profiles.yml").write_text(
        f"default:\n  metrics: {{textfile: metrics/rivc.prom, pushgateway: '{gateway}'}}\n"
        f"  openlineage: {{url: '{gateway}', file: lineage/events.jsonl}}\n"
    )
    try:
        result = rivc(root, "run")
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 0, result.output

    def samples(text: str) -> dict[tuple[str, str], float]:
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, s.labels.get("node", ""))] = s.value
                assert s.labels["project"] == "sinks"
        return out

    written = samples((root / "metrics/rivc.prom").read_text())
    assert written[("rivc_run_success", "")] == 1
    assert written[("rivc_node_success", "sink:lake")] == 1
    assert written[("rivc_node_rows", "sink:lake")] == 300
    assert written[("rivc_node_rows", "model:orders")] == 300
    assert written[("rivc_node_commits", "sink:lake")] == 1
    assert written[("rivc_node_duration_seconds", "sink:lake")] > 0
    ((method, path, body),) = [p for p in pushed if p[0] == "PUT"]
    assert (method, path) == ("PUT", "/metrics/job/rivc/project/sinks")
    assert samples(body.decode()) == written

    # OpenLineage: START and COMPLETE per node, each a child of the run, posted and written
    posted = [json.loads(b) for m, p, b in pushed if m == "POST" and p == "/api/v1/lineage"]
    events = [json.loads(line) for line in (root / "lineage/events.jsonl").read_text().splitlines()]
    assert posted == events
    assert [(e["eventType"], e["job"]["name"]) for e in events] == [
        (kind, node)
        for node in ("source:gen.orders", "model:orders", "sink:lake")
        for kind in ("START", "COMPLETE")
    ]
    assert len({e["run"]["facets"]["parent"]["run"]["runId"] for e in events}) == 1
    model = next(
        e for e in events if e["job"]["name"] == "model:orders" and e["eventType"] == "COMPLETE"
    )
    assert model["inputs"][0]["name"] == "source:gen.orders"
    (table,) = model["outputs"]
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == 300
    lineage = table["facets"]["columnLineage"]["fields"]
    assert lineage["total"]["inputFields"] == [
        {
            "namespace": "rivc://sinks",
            "name": "source:gen.orders",
            "field": "total",
            "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
        }
    ]
    assert lineage["day"]["inputFields"][0]["field"] == "created_at"
    assert lineage["day"]["inputFields"][0]["transformations"][0]["subtype"] == "TRANSFORMATION"
    schema = {f["name"]: f["type"] for f in table["facets"]["schema"]["fields"]}
    assert schema["order_id"] == "bigint" and schema["day"] == "date"
    sink = events[-1]
    assert sink["outputs"][0]["namespace"] == "delta" and sink["outputs"][0]["name"] == "out/lake"
    assert sink["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 300

    again = rivc(root, "run", "--full-refresh")  # the gateway is gone now
    assert again.exit_code == 0 and "metrics: the push to" in again.output
    assert "openlineage: sending to" in again.output
    assert samples((root / "metrics/rivc.prom").read_text())[("rivc_node_rows", "sink:lake")] == 300
