"""The fault suite: rivc killed (SIGKILL) at each named point, rerun, and every table compared
row by row: no row lost, none delivered twice, every table opens (docs/running.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project

from rivc_testing import RIVC, iceberg_catalog, rivc, run_rivc, write_files

pytestmark = pytest.mark.integration

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
        (landed,) = state["sources"]
        assert landed["cursor"] is not None and landed["batches"] >= 1, state
        assert {c["input"] for c in state["sinks"]} == {"source:src.events"}, state
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


@pytest.mark.parametrize("lose", ["state reset", "lost .rivc"])
def test_batch_ids_start_above_what_the_table_holds(spark, tmp_path, lose):
    root = write_files(tmp_path / "p", SIMPLE)
    assert rivc(root, "run").exit_code == 0
    if lose == "state reset":
        assert rivc(root, "state", "reset", "--yes").exit_code == 0
    else:
        shutil.rmtree(root / ".rivc")
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
    # killed before its commit, the batch is written again under a new id (its places, the
    # model's batch it consumed, are what makes the replay exactly once); killed after it, the
    # table's places say it holds the model's batch, and the resumed run skips it
    batch = 1 if point.startswith("before") else 0
    assert table.properties["rivc.batch.rivc:faults:ice_sink"] == str(batch)
    places = [k for k in table.properties if k.startswith("rivc.place.rivc:faults:ice_sink@")]
    assert [table.properties[k] for k in places] == ["0"] and places[0].endswith(":model:orders_t")
    referenced = {t.file.file_path for t in table.scan().plan_files()}
    assert all(f"/data/rivc-batch-{batch:06d}-" in p for p in referenced), referenced
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
    assert table.properties["rivc.batch.rivc:faults:ice_up"] == "2"  # 1 was the killed one
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


# Change envelopes by wave: (op, id, email, amount, second of ts). Within a wave they are listed
# out of order on purpose: sequence_by, not the order of rows, decides which change of a key wins.
CHANGES = {
    1: [
        ("u", 1, "a2", "2.00", 3),
        ("c", 1, "a1", "1.50", 1),
        ("c", 2, "b1", "0.01", 2),
        ("d", 2, "b1", "0.01", 5),
        ("c", 3, "c1", "-3.25", 1),
        ("u", 4, "d1", "9999999999.99", 4),  # an update of a key the table never had
        ("r", 5, "e1", "0.00", 1),  # a snapshot read
        ("u", 6, "f2", "6.60", 7),
        ("c", 6, "f1", "6.00", 6),
    ],
    2: [
        ("d", 1, "a2", "2.00", 10),
        ("u", 3, "c3", "-3.00", 12),
        ("u", 3, "c2", "-3.10", 11),
        ("c", 4, "d2", "-9999999999.99", 14),  # deleted, then inserted again
        ("d", 4, "d1", "9999999999.99", 13),
        ("c", 7, "g1", "7.00", 15),  # inserted and deleted in one batch: never lands
        ("d", 7, "g1", "7.00", 16),
        ("d", 9, "z", "0.00", 17),  # a delete of a key no table holds
        ("c", 8, None, None, 18),
    ],
}


def _changes_model() -> str:
    rows = []
    for wave, changes in CHANGES.items():
        for op, key, email, amount, sec in changes:
            email_sql = f"'{email}'" if email is not None else "cast(null as string)"
            amount_sql = f"cast({amount or 'null'} as decimal(12,2))"
            image = f"named_struct('id', {key}L, 'email', {email_sql}, 'amount', {amount_sql})"
            before, after = (image, "null") if op == "d" else ("null", image)
            rows.append(
                f"  ('{op}', {before}, {after}, timestamp'2026-01-01 00:00:{sec:02d}', {wave})"
            )
    return (
        "{{ config(materialized='view') }}\nselect op, before, after, ts from values\n"
        + ",\n".join(rows)
        + "\nas t(op, before, after, ts, wave) where wave = {{ var('wave') }}\n"
    )


def _expected(waves: int) -> dict[int, tuple[str | None, str | None]]:
    from decimal import Decimal

    table: dict[int, tuple[str | None, str | None]] = {}
    for wave in range(1, waves + 1):
        for op, key, email, amount, _ in sorted(CHANGES[wave], key=lambda c: c[4]):
            if op == "d":
                table.pop(key, None)
            else:
                table[key] = (email, None if amount is None else str(Decimal(amount)))
    return table


CDC_SINKS = """
sinks:
  - name: a_delta
    from: changes
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: ts}]
    connector: delta
    config: {table_uri: out/cdc, mode: merge, merge_keys: [id]}
  - name: b_ice_streamed
    from: changes
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: ts}]
    connector: iceberg
    config: {namespace: s, table: cdc, mode: upsert, key_fields: [id]}
  - name: c_ice_tasks
    from: changes
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: ts}]
    connector: iceberg
    config: {namespace: t, table: cdc, mode: upsert, key_fields: [id], spark_write_threshold: 0,
             partitioning: [{field: id, transform: bucket, buckets: 4}]}
"""


def test_cdc_deletes_applied_by_merge_and_upsert_across_a_kill(tmp_path):
    """unwrap_cdc with deletes: apply and sequence_by: each key's last change wins whatever the
    row order, a delete takes the key out of a Delta merge and of both Iceberg upsert paths, a
    key inserted and deleted in one batch never lands, and a run killed before its first commit
    leaves every table as it was; the rerun applies the wave once."""
    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: faults\n",
            "profiles.yml": 'default:\n  spark: {master: "local[2]"}\n',
            "models/changes.sql": _changes_model(),
            "sinks/cdc.yml": CDC_SINKS,
        },
    )
    env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}

    def run(wave: int, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RIVC, "run", "--vars", f"{{wave: {wave}}}"],
            cwd=root,
            env={**env, **({"RIVC_FAULT": fault} if fault else {})},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def tables() -> dict[str, dict[int, tuple[str | None, str | None]]]:
        ice = iceberg_catalog(root)
        read = {
            "a_delta": DeltaTable(str(root / "out/cdc")).to_pyarrow_table(),
            "b_ice_streamed": ice.load_table("s.cdc").scan().to_arrow(),
            "c_ice_tasks": ice.load_table("t.cdc").scan().to_arrow(),
        }
        out = {}
        for sink, arrow in read.items():
            assert arrow.column_names == ["id", "email", "amount"], (sink, arrow.schema)
            ids = arrow.column("id").to_pylist()
            assert len(ids) == len(set(ids)), (sink, sorted(ids))  # one row per key
            out[sink] = {
                r["id"]: (r["email"], None if r["amount"] is None else str(r["amount"]))
                for r in arrow.to_pylist()
            }
        return out

    first = run(1)
    assert first.returncode == 0, first.stdout + first.stderr
    for sink, rows in tables().items():
        assert rows == _expected(1), sink
    delta_version = DeltaTable(str(root / "out/cdc")).version()

    killed = run(2, "before-commit:cdc")  # the first sink to reach its commit
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert DeltaTable(str(root / "out/cdc")).version() == delta_version
    for sink, rows in tables().items():
        assert rows == _expected(1), sink

    rerun = run(2)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "resuming run" in rerun.stdout + rerun.stderr
    for sink, rows in tables().items():
        assert rows == _expected(2), sink
    assert _expected(2) == {
        3: ("c3", "-3.00"),
        4: ("d2", "-9999999999.99"),
        5: ("e1", "0.00"),
        6: ("f2", "6.60"),
        8: (None, None),
    }
