"""Incremental boundaries with ties, the read-only JDBC session, and runs that overlap or die."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project

from rivc_testing import last_run, rivc, write_files

pytestmark = pytest.mark.integration

# cursor type per database -> value of tie group k (k = 0, 1, 2)
CURSORS = {
    ("postgres", "timestamp"): lambda k: f"2026-01-01 10:00:0{k}.5",
    ("postgres", "timestamptz"): lambda k: f"2026-01-01 10:00:0{k}.5+02",
    ("postgres", "date"): lambda k: f"2026-01-0{k + 1}",
    ("postgres", "int"): lambda k: k,
    ("mysql", "datetime(6)"): lambda k: f"2026-01-01 10:00:0{k}.5",
    ("mysql", "timestamp(6)"): lambda k: f"2026-01-01 10:00:0{k}.5",
    ("mysql", "date"): lambda k: f"2026-01-0{k + 1}",
    ("mysql", "int"): lambda k: k,
}


def source_rows(root: Path) -> int:
    data = last_run(root)
    return next(r["rows"] for r in data["results"] if r["node"] == "source:src.events")


@pytest.mark.parametrize(("kind", "cursor"), list(CURSORS), ids=lambda v: str(v))
def test_ties_at_the_cursor_are_delivered_once_across_runs(spark, tmp_path, kind, cursor):
    value = CURSORS[(kind, cursor)]
    with database(kind) as db:
        null = " NULL" if cursor.startswith("timestamp") and kind == "mysql" else ""
        db.execute(f"CREATE TABLE events (id int primary key, at {cursor}{null})")
        insert = "INSERT INTO events VALUES (%s, %s)"
        # three rows tie on the high-water mark, and two below it
        db.executemany(
            insert, [(1, value(0)), (2, value(1)), (3, value(2)), (4, value(2)), (5, value(2))]
        )
        root = project(
            tmp_path,
            db,
            "- {name: events, table: events, mode: incremental, cursor_column: at, unique_key: id}",
            {},
            """
            sinks:
              - {name: lake, from: source:src.events, connector: delta,
                 config: {table_uri: out/events, mode: append}}
            """,
        )
        reads = []
        for step in range(5):
            if step == 3:  # a new row at the boundary value, after it was read
                db.executemany(insert, [(6, value(2))])
            result = rivc(root, "run")
            assert result.exit_code == 0, result.output
            reads.append(source_rows(root))
        assert reads == [5, 0, 0, 1, 0]
        ids = DeltaTable(str(root / "out/events")).to_pyarrow_table().column("id").to_pylist()
        assert sorted(ids) == [1, 2, 3, 4, 5, 6]  # each row once, appended


def test_postgres_jdbc_session_is_read_only(spark, tmp_path):
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE audit (n int)",
            "CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql AS "
            "'INSERT INTO audit VALUES (1) RETURNING n'",
        )
        # the bytea column sends the query through Spark's JDBC reader
        root = project(
            tmp_path,
            db,
            "- {name: events, query: \"SELECT sneaky() AS n, decode('00', 'hex') AS b\"}",
            {},
            """
            sinks:
              - {name: lake, from: source:src.events, connector: delta,
                 config: {table_uri: out/events}}
            """,
        )
        result = rivc(root, "run")
        assert result.exit_code == 1
        error = last_run(root)["results"][0]["error"]
        assert "read-only transaction" in error, error
        conn = db.connect()
        try:
            assert conn.execute("SELECT count(*) FROM audit").fetchone() == (0,)
        finally:
            conn.close()


CHAIN = {
    "rivc_project.yml": "name: chains\n",
    **{
        f"models/m{i:02d}.sql": (
            "{{ config(materialized='"
            + ("table" if i % 3 == 0 else "view")
            + "') }}\n"
            + (
                f"select {i} as id"
                if i % 10 == 0
                else f"select id + 1 as id from {{{{ ref('m{i - 1:02d}') }}}}"
            )
            + "\n"
        )
        for i in range(60)
    },
}


def test_threads_rerun_on_a_warm_cache(spark, tmp_path):
    root = write_files(tmp_path, CHAIN)
    first = rivc(root, "run", "--threads", "2")  # warms the compile cache
    assert first.exit_code == 0, first.output
    # a new process: its worker threads would be the first to import pyspark
    rerun = subprocess.run(
        [str(Path(sys.executable).parent / "rivc"), "run", "--threads", "2"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Traceback" not in rerun.stderr


def test_a_refused_run_changes_nothing_and_a_killed_run_is_closed_as_aborted(spark, tmp_path):
    from rivc.adapters.state import StateStore, run_lock

    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: lock\nparams: {tag: A}\n",
            "models/tagged.sql": "{{ config(materialized='table') }}\nselect ${tag} as tag\n",
        },
    )
    assert rivc(root, "run").exit_code == 0
    compiled = (root / "target/compiled/model/tagged.sql").read_text()
    # a run that was killed: its row says running, and another process holds the lock
    state = StateStore.for_project(root)
    state.start_run("dead-run", "run", "*")
    state.close()
    with run_lock(root, "other"):
        refused = rivc(root, "run", "--param", "tag=B")
    assert refused.exit_code == 2
    assert "is using this project's state store" in refused.output
    assert (root / "target/compiled/model/tagged.sql").read_text() == compiled
    assert rivc(root, "run").exit_code == 0
    db = sqlite3.connect(root / ".rivc/state.db")
    status = dict(db.execute("SELECT run_id, status FROM runs"))
    db.close()
    assert status["dead-run"] == "aborted"
    assert list(status.values()).count("running") == 0


def test_runs_without_new_rows_add_no_empty_delta_commits(spark, tmp_path):
    with database("postgres") as db:
        db.execute("CREATE TABLE events (id int primary key, at timestamptz)")
        db.execute("INSERT INTO events VALUES (1, '2026-01-01 00:00:00+00')")
        root = project(
            tmp_path,
            db,
            "- {name: events, table: events, mode: incremental, cursor_column: at, unique_key: id}",
            {},
            """
            sinks:
              - {name: lake, from: source:src.events, connector: delta,
                 config: {table_uri: out/events, mode: append}}
            """,
        )
        assert rivc(root, "run").exit_code == 0
        first = DeltaTable(str(root / "out/events")).version()
        for _ in range(2):
            assert rivc(root, "run").exit_code == 0
        assert DeltaTable(str(root / "out/events")).version() == first  # no empty commits
        db.execute("INSERT INTO events VALUES (2, '2026-01-02 00:00:00+00')")
        assert rivc(root, "run").exit_code == 0
        lake = DeltaTable(str(root / "out/events"))
        assert sorted(lake.to_pyarrow_table().column("id").to_pylist()) == [1, 2]
        assert lake.version() == first + 1


def test_sinks_on_threads_of_a_fresh_project_take_one_writer_id(spark, tmp_path, monkeypatch):
    """The first run of a new project, its sinks on four threads: each thread asks for the
    project's writer id while none is recorded. Made slow here so that they meet, which the CDC
    bench's two sinks did by themselves: two ids were made and a sink refused the table the
    other id had claimed ("written by another checkout") on the next run. One id, every sink
    delivers, and again."""
    import time

    from rivc.adapters.run import runtime

    made: list[str] = []

    def slow(*args, original=runtime.writer_id):
        time.sleep(0.5)
        made.append(original(*args))
        return made[-1]

    monkeypatch.setattr(runtime, "writer_id", slow)
    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: fresh\n",
            "models/rows.sql": "select 1 as id, 'a' as v union all select 2, 'b'\n",
            "sinks/lake.yml": "sinks:\n"
            + "".join(
                f"  - name: s{i}\n    from: rows\n    connector: delta\n"
                f"    config: {{table_uri: out/s{i}, mode: merge, merge_keys: [id]}}\n"
                for i in range(4)
            ),
        },
    )
    result = rivc(root, "run", "--threads", "4")
    assert result.exit_code == 0, result.output
    assert len(made) == 1
    again = rivc(root, "run", "--threads", "4", "--full-refresh")  # each sink's table: ours
    assert again.exit_code == 0, again.output
    for i in range(4):
        table = DeltaTable(str(root / f"out/s{i}"))
        assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2]
        assert made[0] in json.dumps(table.metadata().configuration)
