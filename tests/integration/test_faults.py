"""The fault suite: rivc killed (SIGKILL) at each named point, rerun, and every table compared
row by row: no row lost, none delivered twice, every table opens (docs/running.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project

from rivc_testing import iceberg_catalog, rivc, write_files

pytestmark = pytest.mark.integration

RIVC = str(Path(sys.executable).parent / "rivc")

SINKS = """
sinks:
  - {name: a_delta_append, from: source:src.events, connector: delta,
     config: {table_uri: out/delta_append, mode: append}}
  - {name: b_delta_merge, from: source:src.events, connector: delta,
     config: {table_uri: out/delta_merge, mode: merge, merge_keys: [id]}}
  - {name: c_iceberg_append, from: source:src.events, connector: iceberg,
     config: {namespace: f, table: appended}}
  - {name: d_iceberg_upsert, from: source:src.events, connector: iceberg,
     config: {namespace: f, table: upserted, mode: upsert, key_fields: [id]}}
  - {name: e_files, from: source:src.events, connector: files,
     config: {path: out/files, format: parquet}}
"""


def run_rivc(root: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}
    if fault:
        env["RIVC_FAULT"] = fault
    return subprocess.run(
        [RIVC, "run"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def ids_by_sink(root: Path) -> dict[str, Counter[int]]:
    ice = iceberg_catalog(root)
    files = sorted((root / "out/files").rglob("*.parquet"))
    return {
        "a_delta_append": Counter(
            DeltaTable(str(root / "out/delta_append")).to_pyarrow_table().column("id").to_pylist()
        ),
        "b_delta_merge": Counter(
            DeltaTable(str(root / "out/delta_merge")).to_pyarrow_table().column("id").to_pylist()
        ),
        "c_iceberg_append": Counter(
            ice.load_table("f.appended").scan().to_arrow().column("id").to_pylist()
        ),
        "d_iceberg_upsert": Counter(
            ice.load_table("f.upserted").scan().to_arrow().column("id").to_pylist()
        ),
        "e_files": Counter(i for f in files for i in pq.read_table(f).column("id").to_pylist()),
    }


@pytest.mark.parametrize(
    "fault",
    [
        "mid-extraction",
        "after-staging",
        "after-commit:a_delta_append",
        "after-commit:c_iceberg_append",
        "after-commit:e_files",
        "between-sinks:b_delta_merge",
        "between-sinks:d_iceberg_upsert",
    ],
)
def test_kill_and_rerun_delivers_every_row_once(tmp_path, fault):
    with database("postgres") as db:
        db.execute("CREATE TABLE events (id int primary key, v text, at timestamp)")
        insert = "INSERT INTO events VALUES (%s, %s, %s)"
        db.executemany(insert, [(i, f"v{i}", f"2026-01-01 00:00:{i:02d}") for i in range(1, 31)])
        root = project(
            tmp_path,
            db,
            "- {name: events, table: events, mode: incremental, cursor_column: at, unique_key: id}",
            {},
            SINKS,
        )
        killed = run_rivc(root, fault)
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        # rows arrive while nothing runs: the resumed run must not read them under an id a
        # sink already committed; the run after it delivers them
        db.executemany(insert, [(i, f"v{i}", f"2026-01-01 00:01:{i:02d}") for i in range(31, 41)])
        for _ in range(2):
            rerun = run_rivc(root)
            assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        state = json.loads(rivc(root, "state", "show", "--json").output)
        assert state["cursors"], state
    for sink, ids in ids_by_sink(root).items():
        assert ids == Counter(range(1, 41)), f"{fault}: {sink} {sorted(ids.elements())}"


MODEL_PROJECT = {
    "rivc_project.yml": "name: faults\n",
    "sources/gen.yml": """
sources:
  - name: gen
    connector: datagen
    tables:
      - {name: orders, config: {pattern: orders, max_events: 500, seed: 7}}
""",
    "models/orders_t.sql": "{{ config(materialized='table') }}\n"
    "select order_id, total from {{ source('gen', 'orders') }}\n",
    "sinks/out.yml": """
sinks:
  - {name: a_first, from: orders_t, connector: delta, config: {table_uri: out/first}}
  - {name: b_second, from: orders_t, connector: iceberg, config: {namespace: m, table: second}}
""",
}


def test_a_model_feeding_two_sinks_killed_after_the_first_commit(tmp_path):
    """The issue's case: the rerun used to append the first sink's rows again."""
    root = write_files(tmp_path, MODEL_PROJECT)
    killed = run_rivc(root, "after-commit:a_first")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    rerun = run_rivc(root)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "resuming run" in rerun.stdout + rerun.stderr
    first = DeltaTable(str(root / "out/first")).to_pyarrow_table()
    assert first.num_rows == 500 and len(set(first.column("order_id").to_pylist())) == 500
    ice = iceberg_catalog(root)
    assert ice.load_table("m.second").scan().to_arrow().num_rows == 500


SIMPLE = {
    "rivc_project.yml": "name: ids\n",
    "sources/gen.yml": MODEL_PROJECT["sources/gen.yml"],
    "sinks/out.yml": """
sinks:
  - {name: lake, from: source:gen.orders, connector: delta, config: {table_uri: out/lake}}
""",
}


@pytest.mark.parametrize("lose", ["state reset", "lost .rivc", "fresh clone"])
def test_batch_ids_start_above_what_the_table_holds(spark, tmp_path, lose):
    root = write_files(tmp_path / "p", SIMPLE)
    assert rivc(root, "run").exit_code == 0
    if lose == "state reset":
        assert rivc(root, "state", "reset", "--yes").exit_code == 0
    elif lose == "lost .rivc":
        shutil.rmtree(root / ".rivc")
    else:  # another checkout of the project that writes to the same table
        clone = write_files(tmp_path / "clone", SIMPLE)
        (clone / "out").symlink_to(root / "out")
        root = clone
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    lake = DeltaTable(str(root / "out/lake"))
    assert lake.to_pyarrow_table().num_rows == 1000  # the second batch was written, not skipped
    assert lake.transaction_version("rivc:ids:lake") == 1


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_a_model_killed_around_its_commit_is_written_once_by_the_resumed_run(tmp_path, point):
    """The model's query returns every row on each run, so only the batch id in the table's
    commit keeps the resumed run from appending them a second time; killed between the tasks'
    files and the commit, the files are in no version and the resumed run writes the batch."""
    root = write_files(
        tmp_path,
        {
            **{k: v for k, v in MODEL_PROJECT.items() if k != "sinks/out.yml"},
            "models/orders_t.sql": "{{ config(materialized='incremental') }}\n"
            "select order_id, total from {{ source('gen', 'orders') }}\n",
        },
    )
    killed = run_rivc(root, f"{point}:orders_t")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    rerun = run_rivc(root)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert ("already committed by the killed run" in rerun.stdout) is (point == "after-commit")
    table = DeltaTable(str(root / "warehouse/orders_t"))
    ids = table.to_pyarrow_table().column("order_id").to_pylist()
    assert len(ids) == 500 and len(set(ids)) == 500
    assert table.transaction_version("rivc:faults:model:orders_t") == 0


@pytest.mark.parametrize("point", ["before-commit:ice", "after-commit:ice_sink"])
def test_an_iceberg_batch_written_by_tasks_killed_around_its_commit_lands_once(tmp_path, point):
    """Spark's tasks wrote the batch's files (spark_write_threshold 0); killed before the
    add_files commit, no snapshot holds them and the resumed run writes the batch; killed after
    it, the batch id in the table makes the resumed run skip it."""
    root = write_files(
        tmp_path,
        {
            **{k: v for k, v in MODEL_PROJECT.items() if k != "sinks/out.yml"},
            "sinks/out.yml": """
sinks:
  - {name: ice_sink, from: orders_t, connector: iceberg,
     config: {namespace: m, table: ice, spark_write_threshold: 0}}
""",
        },
    )
    killed = run_rivc(root, point)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    rerun = run_rivc(root)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    table = iceberg_catalog(root).load_table("m.ice")
    ids = table.scan().to_arrow().column("order_id").to_pylist()
    assert len(ids) == 500 and len(set(ids)) == 500
    assert table.properties["rivc.batch.rivc:faults:ice_sink"] == "0"
    referenced = {t.file.file_path for t in table.scan().plan_files()}
    assert all("/data/rivc-batch-000000-" in p for p in referenced), referenced
    on_disk = {str(p) for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")}
    refs = {p.removeprefix("file://") for p in referenced}
    assert refs <= on_disk
    # killed before its commit, the first run's files stay on disk in no snapshot
    assert bool(on_disk - refs) is point.startswith("before"), sorted(on_disk - refs)


def test_an_iceberg_upsert_on_executors_killed_before_its_commit_lands_once(tmp_path):
    """The second batch's tasks rewrote the files its keys can be in; killed before the
    snapshot that replaces them, the table is the first batch as it was, and the resumed run
    upserts the batch exactly once."""
    root = write_files(
        tmp_path,
        {
            **{k: v for k, v in MODEL_PROJECT.items() if k != "sinks/out.yml"},
            "models/orders_t.sql": "{{ config(materialized='table') }}\n"
            "select order_id, total + {{ var('bump', 0) }} as total\n"
            "from {{ source('gen', 'orders') }} where order_id % {{ var('every', 1) }} = 0\n",
            "sinks/out.yml": """
sinks:
  - {name: ice_up, from: orders_t, connector: iceberg,
     config: {namespace: m, table: up, mode: upsert, key_fields: [order_id],
              spark_write_threshold: 0,
              partitioning: [{field: order_id, transform: bucket, buckets: 4}]}}
""",
        },
    )
    assert run_rivc(root).returncode == 0
    table = iceberg_catalog(root).load_table("m.up")
    first = {r["order_id"]: r["total"] for r in table.scan().to_arrow().to_pylist()}
    snapshot = table.current_snapshot().snapshot_id

    env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}
    second = [RIVC, "run", "--vars", "{bump: 1000, every: 7}"]
    killed = subprocess.run(
        second,
        cwd=root,
        env={**env, "RIVC_FAULT": "before-commit:up"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    table = iceberg_catalog(root).load_table("m.up")
    assert table.current_snapshot().snapshot_id == snapshot  # nothing committed
    rerun = subprocess.run(second, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    table = iceberg_catalog(root).load_table("m.up")
    rows = table.scan().to_arrow().to_pylist()
    assert len(rows) == len(first) == 500
    assert {r["order_id"] for r in rows} == set(first)
    for r in rows:
        bumped = 1000 if r["order_id"] % 7 == 0 else 0
        assert r["total"] == first[r["order_id"]] + bumped, r
    assert table.properties["rivc.batch.rivc:faults:ice_up"] == "1"
    assert {t.file.partition[0] for t in table.scan().plan_files()} == {0, 1, 2, 3}


EDGES = """{{ config(materialized='table') }}
select id, x, d, at, concat(s, '{{ var('tag', '') }}') as s from values
  (1, cast('NaN' as double), cast('12345678901234567890.123456789012345678' as decimal(38,18)),
   timestamp'0001-01-01 00:00:00', 'NULL'),
  (2, cast('Infinity' as double),
   cast('-99999999999999999999.999999999999999999' as decimal(38,18)),
   timestamp'9999-12-31 23:59:59.999999', ''),
  (3, cast('-Infinity' as double), cast(0 as decimal(38,18)), cast(null as timestamp),
   cast(null as string)),
  (4, cast('-0.0' as double), cast(null as decimal(38,18)), timestamp'2026-03-29 01:30:00',
   'ü/=😀'),
  (5, cast(null as double), cast('0.000000000000000001' as decimal(38,18)),
   timestamp'1970-01-01 00:00:00', 'NaN')
as t(id, x, d, at, s)
"""


def test_iceberg_edge_values_upserted_by_tasks_and_compacted_read_back_exactly(tmp_path):
    """NaN, infinities, -0.0, decimal(38,18) at both ends, years 1 and 9999, NULL-looking and
    empty text and a NULL in the bucketed column, upserted twice by Spark's tasks into a
    bucket-partitioned Iceberg table; then `rivc maintain` compacts it, killed before its
    commit once. After each step pyiceberg reads exactly what deltalake reads from the model."""
    from deltalake import DeltaTable

    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: edges\n",
            "profiles.yml": 'default:\n  spark: {master: "local[2]"}\n',
            "models/edges.sql": EDGES,
            "sinks/out.yml": """
sinks:
  - {name: ice_edges, from: edges, connector: iceberg,
     config: {namespace: e, table: edges, mode: upsert, key_fields: [id],
              spark_write_threshold: 0,
              partitioning: [{field: s, transform: bucket, buckets: 3}]}}
""",
        },
    )
    env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}

    def same_as_the_model() -> None:
        want = sorted(
            DeltaTable(str(root / "warehouse/edges")).to_pyarrow_table().to_pylist(),
            key=lambda r: r["id"],
        )
        got = sorted(
            iceberg_catalog(root).load_table("e.edges").scan().to_arrow().to_pylist(),
            key=lambda r: r["id"],
        )
        assert len(got) == len(want) == 5
        for g, w in zip(got, want, strict=True):
            for column, value in w.items():
                if isinstance(value, float):  # NaN, inf, -0.0 by their text
                    assert str(g[column]) == str(value), (column, g, w)
                else:
                    assert g[column] == value, (column, g, w)

    for tag in ("", "-again"):
        done = subprocess.run(
            [RIVC, "run", "--vars", f"{{tag: '{tag}'}}"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        same_as_the_model()
    table = iceberg_catalog(root).load_table("e.edges")
    assert all("/data/rivc-batch-000001-" in t.file.file_path for t in table.scan().plan_files())
    assert None in {t.file.partition[0] for t in table.scan().plan_files()}  # the NULL's bucket
    snapshot = table.current_snapshot().snapshot_id
    per_bucket = Counter(tuple(t.file.partition) for t in table.scan().plan_files())
    assert max(per_bucket.values()) > 1  # two tasks wrote into one bucket: a file to compact

    killed = subprocess.run(
        [RIVC, "maintain"],
        cwd=root,
        env={**env, "RIVC_FAULT": "before-commit:edges"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert iceberg_catalog(root).load_table("e.edges").current_snapshot().snapshot_id == snapshot
    same_as_the_model()
    again = subprocess.run(
        [RIVC, "maintain"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stdout + again.stderr
    same_as_the_model()
    table = iceberg_catalog(root).load_table("e.edges")
    partitions = [tuple(t.file.partition) for t in table.scan().plan_files()]
    assert len(partitions) == len(set(partitions)) == len(per_bucket)  # one file per bucket
    assert re.search(r"sink:ice_edges: [1-9]\d* files compacted", again.stdout), again.stdout
