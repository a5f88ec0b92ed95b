"""Model tables as Spark's tasks write them: partition_by, on_schema_change, merges that rewrite
only the files holding the batch's keys, and the batch id in every commit. Each table is read
back with delta-rs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from rivc_testing import last_run, rivc, write_files

pytestmark = pytest.mark.integration

SOURCE = """
sources:
  - name: app
    connector: files
    tables:
      - name: events
        config: {path: data/events, format: jsonl}
        columns: {id: bigint, grp: bigint, v: bigint, plan: string}
"""


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def events(ids: range, v: int) -> str:
    return jsonl([{"id": i, "grp": i % 2, "v": v, "plan": f"p{i}-{v}"} for i in ids])


def results(root: Path) -> dict[str, dict]:
    data = last_run(root)
    return {r["node"]: r for r in data["results"]}


def table(root: Path, name: str) -> DeltaTable:
    return DeltaTable(str(root / "warehouse" / name))


def rows(root: Path, name: str) -> list[dict]:
    return sorted(table(root, name).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


INCREMENTAL = """{{{{ config(materialized='incremental', on_schema_change='{mode}') }}}}
select {columns} from {{{{ source('app', 'events') }}}}
{{% if is_incremental() %}}
where v > (select max(v) from {{{{ this }}}})
{{% endif %}}
"""


@pytest.mark.parametrize(
    ("mode", "second", "columns", "ok"),
    [
        ("ignore", "id, v, plan, 'x' as extra", ["id", "v", "plan"], True),
        ("fail", "id, v, plan, 'x' as extra", ["id", "v", "plan"], False),
        ("append_new_columns", "id, v, plan, 'x' as extra", ["id", "v", "plan", "extra"], True),
        ("sync_all_columns", "id, v, 'x' as extra", ["id", "v", "extra"], True),
    ],
)
def test_on_schema_change_decides_what_a_new_model_shape_does_to_its_table(
    spark, tmp_path, mode, second, columns, ok
):
    root = write_files(
        tmp_path / mode,
        {
            "rivc_project.yml": "name: shapes\n",
            "sources/app.yml": SOURCE,
            "models/m.sql": INCREMENTAL.format(mode=mode, columns="id, v, plan"),
            "data/events/a.json": events(range(1, 3), 1),
        },
    )
    assert rivc(root, "run").exit_code == 0
    write_files(
        root,
        {
            "models/m.sql": INCREMENTAL.format(mode=mode, columns=second),
            "data/events/b.json": events(range(3, 5), 2),
        },
    )
    done = rivc(root, "run")
    assert (done.exit_code == 0) is ok, done.output
    got = rows(root, "m")
    assert [f.name for f in table(root, "m").schema().fields] == columns
    if not ok:
        assert "+extra" in results(root)["model:m"]["error"]
        assert [r["id"] for r in got] == [1, 2]  # the table is as the first run left it
        return
    assert [r["id"] for r in got] == [1, 2, 3, 4]
    if "extra" in columns:
        assert [r["extra"] for r in got] == [None, None, "x", "x"]
    if "plan" in columns:
        assert [r["plan"] for r in got] == ["p1-1", "p2-1", "p3-2", "p4-2"]


MERGED = """{{{{ config(materialized='incremental', unique_key='id', partition_by={parts}) }}}}
select id, grp, v, plan from {{{{ source('app', 'events') }}}}
{{% if is_incremental() %}}
where v > (select max(v) from {{{{ this }}}})
{{% endif %}}
"""


def test_a_merge_rewrites_only_the_files_that_hold_its_keys(spark, tmp_path):
    root = write_files(
        tmp_path / "merge",
        {
            "rivc_project.yml": "name: merges\n",
            "sources/app.yml": SOURCE,
            "models/m.sql": MERGED.format(parts="['grp']"),
            "data/events/a.json": events(range(0, 100), 1),
        },
    )
    assert rivc(root, "run").exit_code == 0
    assert table(root, "m").metadata().partition_columns == ["grp"]
    write_files(root, {"data/events/b.json": events(range(100, 200), 2)})
    assert rivc(root, "run").exit_code == 0
    assert results(root)["model:m"]["message"] == "incremental merge, 0 files rewritten"
    files = {f: n for n, f in enumerate(table(root, "m").file_uris())}
    assert len(files) == 4  # two runs, two partitions each

    write_files(root, {"data/events/c.json": events(range(150, 161), 3)})
    assert rivc(root, "run").exit_code == 0
    result = results(root)["model:m"]
    # ids 150-160 are in the second run's two files only: the first run's stay as they are
    assert result["message"] == "incremental merge, 2 files rewritten"
    assert result["rows"] == 11
    kept = set(table(root, "m").file_uris()) & set(files)
    assert len(kept) == 2
    got = rows(root, "m")
    assert [r["id"] for r in got] == list(range(200))
    assert {r["id"]: r["v"] for r in got if r["v"] == 3} == {i: 3 for i in range(150, 161)}
    assert table(root, "m").transaction_version("rivc:merges:model:m") == 2

    # partition_by changed: refused until the table is rebuilt
    write_files(root, {"models/m.sql": MERGED.format(parts="['v']")})
    done = rivc(root, "run")
    assert done.exit_code != 0
    assert "--full-refresh" in results(root)["model:m"]["error"]
    assert rivc(root, "run", "--full-refresh").exit_code == 0
    assert table(root, "m").metadata().partition_columns == ["v"]
    # a full refresh runs the whole query: the source holds ids 150-160 twice (v 2 and 3)
    assert [r["id"] for r in rows(root, "m")] == sorted([*range(200), *range(150, 161)])


def test_a_table_model_is_replaced_in_one_commit_with_its_partitioning(spark, tmp_path):
    root = write_files(
        tmp_path / "table",
        {
            "rivc_project.yml": "name: tables\n",
            "sources/app.yml": SOURCE,
            "models/t.sql": "{{ config(materialized='table', partition_by=['grp']) }}\n"
            "select id, grp, plan from {{ source('app', 'events') }}\n",
            "data/events/a.json": events(range(0, 10), 1),
        },
    )
    assert rivc(root, "run").exit_code == 0
    first = table(root, "t")
    assert first.metadata().partition_columns == ["grp"]
    write_files(
        root,
        {
            "models/t.sql": "{{ config(materialized='table') }}\n"
            "select id, plan, v from {{ source('app', 'events') }}\n"
        },
    )
    assert rivc(root, "run").exit_code == 0
    second = table(root, "t")
    assert second.version() == first.version() + 1  # one commit: no empty table in between
    assert second.metadata().partition_columns == []
    assert [f.name for f in second.schema().fields] == ["id", "plan", "v"]
    assert [r["id"] for r in rows(root, "t")] == list(range(10))


def test_a_delta_table_is_a_source_and_one_rivc_cannot_read_is_refused_by_name(spark, tmp_path):
    from datetime import date
    from decimal import Decimal

    import pyarrow as pa
    from deltalake import write_deltalake

    root = tmp_path / "lake"
    given = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "day": pa.array([date(2026, 1, 1), date(2026, 1, 1), date(2026, 1, 2), None]),
            "amount": pa.array([Decimal("0.01"), Decimal("-1.50"), None, Decimal("9.99")]),
            "note": pa.array(["a b", None, "ü/=", ""]),
        }
    )
    write_deltalake(str(root / "ext/orders"), given, partition_by=["day"])
    write_deltalake(
        str(root / "ext/dv"), given, configuration={"delta.enableDeletionVectors": "true"}
    )
    write_files(
        root,
        {
            "rivc_project.yml": "name: lake\n",
            "sources/ext.yml": """
sources:
  - name: ext
    connector: delta
    tables:
      - {name: orders, config: {table_uri: ext/orders}}
      - {name: dv, config: {table_uri: ext/dv}}
""",
            "models/copied.sql": "{{ config(materialized='table') }}\n"
            "select * from {{ source('ext', 'orders') }}\n",
            "models/dv_copy.sql": "select * from {{ source('ext', 'dv') }}\n",
        },
    )
    assert rivc(root, "run", "--select", "copied").exit_code == 0
    got = table(root, "copied").to_pyarrow_table()
    want = given.select(got.column_names)
    assert got.sort_by("id").to_pylist() == want.sort_by("id").to_pylist()

    done = rivc(root, "run", "--select", "dv_copy")
    assert done.exit_code != 0
    assert "rivc cannot read Delta tables that use deletionVectors" in done.output


def test_an_iceberg_table_is_a_source_and_one_rivc_cannot_read_is_refused_by_name(spark, tmp_path):
    """A table another writer (pyiceberg) made: partitioned, with a column added after its
    first files, edge values. rivc reads its current snapshot by Spark's tasks; a table whose
    column was renamed since files were written is refused by name."""
    from datetime import UTC, date, datetime
    from decimal import Decimal

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import (
        DecimalType,
        DoubleType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    root = tmp_path / "ice"
    (root / "ext").mkdir(parents=True)
    catalog = SqlCatalog(
        "ext", uri=f"sqlite:///{root / 'ext/cat.db'}", warehouse=(root / "ext/wh").as_uri()
    )
    catalog.create_namespace("raw")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "at", TimestamptzType()),
        NestedField(3, "amount", DecimalType(12, 2)),
        NestedField(4, "x", DoubleType()),
    )
    spec = PartitionSpec(PartitionField(2, 1000, DayTransform(), "at_day"))
    events = catalog.create_table("raw.events", schema=schema, partition_spec=spec)
    first = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "at": pa.array(
                [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, 23, 59, tzinfo=UTC), None],
                pa.timestamp("us", "UTC"),
            ),
            "amount": pa.array([Decimal("0.01"), Decimal("-1.50"), None], pa.decimal128(12, 2)),
            "x": pa.array([float("nan"), float("-inf"), -0.0]),
        },
        schema=events.schema().as_arrow(),
    )
    events.append(first)
    with events.update_schema() as update:
        update.add_column("note", StringType())
    later = pa.table(
        {
            "id": pa.array([4], pa.int64()),
            "at": pa.array([datetime(2026, 1, 3, tzinfo=UTC)], pa.timestamp("us", "UTC")),
            "amount": pa.array([Decimal("9.99")], pa.decimal128(12, 2)),
            "x": pa.array([1.5]),
            "note": pa.array(["ü/="]),
        },
        schema=catalog.load_table("raw.events").schema().as_arrow(),
    )
    catalog.load_table("raw.events").append(later)
    renamed = catalog.create_table("raw.renamed", schema=schema)
    renamed.append(first)
    with renamed.update_schema() as update:
        update.rename_column("x", "ratio")

    write_files(
        root,
        {
            "rivc_project.yml": "name: ice\n",
            "sources/ext.yml": f"""
sources:
  - name: ext
    connector: iceberg
    tables:
      - {{name: events, config: {{catalog: {{name: ext, uri: "sqlite:///{root / "ext/cat.db"}",
         warehouse: ext/wh}}, namespace: raw, table: events}}}}
      - {{name: renamed, config: {{catalog: {{name: ext, uri: "sqlite:///{root / "ext/cat.db"}",
         warehouse: ext/wh}}, namespace: raw, table: renamed}}}}
""",
            "models/copied.sql": "{{ config(materialized='table') }}\n"
            "select * from {{ source('ext', 'events') }}\n",
            "models/renamed_copy.sql": "select * from {{ source('ext', 'renamed') }}\n",
        },
    )
    done = rivc(root, "run", "--select", "copied")
    assert done.exit_code == 0, done.output
    got = sorted(table(root, "copied").to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    want = sorted(
        catalog.load_table("raw.events").scan().to_arrow().to_pylist(), key=lambda r: r["id"]
    )
    assert [r["id"] for r in got] == [1, 2, 3, 4]
    assert [r["note"] for r in got] == [None, None, None, "ü/="]
    for g, w in zip(got, want, strict=True):
        for column, value in w.items():
            have = g[column]
            if isinstance(value, float):
                assert str(have) == str(value), (column, have, value)  # nan, -inf, -0.0
            else:
                assert have == value, (column, have, value)
    assert got[0]["at"].date() == date(2026, 1, 1)

    refused = rivc(root, "run", "--select", "renamed_copy")
    assert refused.exit_code != 0
    assert "iceberg table raw.renamed renamed column ratio/x" in refused.output, refused.output


def test_maintain_compacts_and_removes_what_killed_jobs_left(spark, tmp_path):
    import os
    import time

    root = write_files(
        tmp_path / "maintain",
        {
            "rivc_project.yml": "name: tidy\n",
            "sources/app.yml": SOURCE,
            "models/m.sql": INCREMENTAL.format(mode="ignore", columns="id, v, plan"),
            "data/events/a.json": events(range(0, 10), 1),
        },
    )
    for v in (2, 3):
        assert rivc(root, "run").exit_code == 0
        write_files(root, {f"data/events/{v}.json": events(range(v * 10, v * 10 + 10), v)})
    assert rivc(root, "run").exit_code == 0
    before = rows(root, "m")
    assert len(table(root, "m").file_uris()) == 3
    orphan = root / "warehouse/m/rivc-batch-000099-killed/part-0.parquet"  # a killed job's file
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"PAR1")
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(orphan, (week_ago, week_ago))

    dry = rivc(root, "maintain", "--dry-run")
    assert dry.exit_code == 0 and "model:m: VACUUM would delete 1 files" in dry.output
    assert orphan.exists()
    refused = rivc(root, "maintain", "--retain-hours", "1")
    assert refused.exit_code != 0 and "vacuum of" in refused.output
    done = rivc(root, "maintain")
    assert done.exit_code == 0, done.output
    assert "model:m: 3 files compacted into 1, 1 unreferenced files deleted" in done.output
    assert not orphan.exists()
    assert len(table(root, "m").file_uris()) == 1
    assert rows(root, "m") == before


def test_maintain_compacts_an_iceberg_tables_small_files_per_partition(spark, tmp_path):
    """Three appends leave several small files in each partition; maintain rewrites each
    partition's files as one, in one snapshot, and every row reads back the same."""
    from collections import Counter

    from rivc_testing import iceberg_catalog

    root = write_files(
        tmp_path / "compact_ice",
        {
            "rivc_project.yml": "name: compact_ice\n",
            "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
            "      - {name: users, config: {pattern: users, max_events: 60, seed: 3}}\n",
            "models/users_t.sql": "{{ config(materialized='table') }}\n"
            "select user_id, name, user_id % 3 as grp from {{ source('gen', 'users') }}\n",
            "sinks/ice.yml": "sinks:\n  - {name: users_ice, from: users_t, connector: iceberg,\n"
            "     config: {namespace: m, table: users, spark_write_threshold: 0,\n"
            "              partitioning: [{field: grp, transform: bucket, buckets: 2}]}}\n",
        },
    )
    for _ in range(3):  # --full-refresh: the unchanged table model is built, its sink appends
        assert rivc(root, "run", "--full-refresh").exit_code == 0
    ice = iceberg_catalog(root).load_table("m.users")
    rows = Counter(tuple(r.values()) for r in ice.scan().to_arrow().to_pylist())
    files = [t.file for t in ice.scan().plan_files()]
    partitions = {tuple(f.partition) for f in files}
    assert len(files) > len(partitions) and sum(rows.values()) == 180

    done = rivc(root, "maintain", "sink:users_ice")
    assert done.exit_code == 0, done.output
    assert f"sink:users_ice: {len(files)} files compacted" in done.output, done.output
    ice = iceberg_catalog(root).load_table("m.users")
    after = [t.file for t in ice.scan().plan_files()]
    assert sorted(tuple(f.partition) for f in after) == sorted(partitions)  # one per partition
    assert all("/data/rivc-compact-" in f.file_path for f in after)
    assert Counter(tuple(r.values()) for r in ice.scan().to_arrow().to_pylist()) == rows
    assert ice.current_snapshot().summary.operation.value == "overwrite"
    assert ice.properties["rivc.batch.rivc:compact_ice:users_ice"] == "2"  # kept
    # the next batch appends beside the compacted files
    assert rivc(root, "run", "--full-refresh").exit_code == 0
    ice = iceberg_catalog(root).load_table("m.users")
    assert ice.scan().to_arrow().num_rows == 240


def test_maintain_expires_iceberg_snapshots_and_deletes_unreferenced_files(spark, tmp_path):
    import os
    import time

    from rivc_testing import iceberg_catalog

    root = write_files(
        tmp_path / "tidy_ice",
        {
            "rivc_project.yml": "name: tidy_ice\n",
            "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
            "      - {name: users, config: {pattern: users, max_events: 50, seed: 3}}\n",
            "models/users_t.sql": "{{ config(materialized='table') }}\n"
            "select user_id, name from {{ source('gen', 'users') }}\n",
            "sinks/ice.yml": "sinks:\n  - {name: users_ice, from: users_t, connector: iceberg,\n"
            "     config: {namespace: m, table: users, mode: overwrite, spark_write_threshold: 0}}\n",
        },
    )
    for _ in range(3):  # each overwrite leaves the last one's files to the older snapshots
        assert rivc(root, "run", "--full-refresh").exit_code == 0
    ice = iceberg_catalog(root).load_table("m.users")
    before = sorted(ice.scan().to_arrow().column("user_id").to_pylist())
    assert len(before) == 50 and len(ice.snapshots()) > 1
    data = Path(ice.location().removeprefix("file://")) / "data"
    orphan = data / "rivc-batch-000099-killed/part-0.parquet"  # a killed job's file
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"PAR1")
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(orphan, (week_ago, week_ago))
    on_disk = len(list(data.rglob("*.parquet")))
    avro_before = len(list((data.parent / "metadata").glob("*.avro")))

    dry = rivc(root, "maintain", "--dry-run")
    assert "sink:users_ice: would expire 0 snapshots and delete 1 unreferenced files" in dry.output
    assert orphan.exists() and len(list(data.rglob("*.parquet"))) == on_disk
    done = rivc(root, "maintain", "sink:users_ice", "--retain-hours", "0")
    assert done.exit_code == 0, done.output
    assert "sink:users_ice:" in done.output and "snapshots expired" in done.output
    assert not orphan.exists()

    ice = iceberg_catalog(root).load_table("m.users")
    assert len(ice.snapshots()) == 1
    assert sorted(ice.scan().to_arrow().column("user_id").to_pylist()) == before
    live = {t.file.file_path.removeprefix("file:").lstrip("/") for t in ice.scan().plan_files()}
    left = {str(p).lstrip("/") for p in data.rglob("*.parquet")}
    assert left == live  # the older runs' files and the killed job's are gone
    # metadata: the expired snapshots' manifest lists and manifests went; what is left is
    # what the current snapshot and the metadata log name, and the table reads the same
    meta = data.parent / "metadata"
    snapshot = ice.current_snapshot()
    named = {snapshot.manifest_list} | {m.manifest_path for m in snapshot.manifests(ice.io)}
    avro = {str(p) for p in meta.glob("*.avro")}
    assert avro == {n.removeprefix("file://") for n in named}, (avro, named)
    assert len(avro) < avro_before
    kept = {ice.metadata_location} | {e.metadata_file for e in ice.metadata.metadata_log}
    assert {str(p) for p in meta.glob("*.metadata.json")} <= {
        k.removeprefix("file://") for k in kept
    }
    assert ice.properties["write.metadata.delete-after-commit.enabled"] == "true"
    again = iceberg_catalog(root).load_table("m.users")
    assert sorted(again.scan().to_arrow().column("user_id").to_pylist()) == before
