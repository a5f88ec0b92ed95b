"""The SQLite state store and the run lock, without Spark."""

from __future__ import annotations

import json
import os
import re
import sqlite3

import pytest

from rivc.adapters.state import MIGRATIONS, NodeResult, StateStore, migrate, run_lock
from rivc.compiler.errors import StateError
from rivc_testing import rivc


def test_migrations_are_versioned_and_idempotent(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.close()
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    migrate(db)  # nothing left to apply
    assert db.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)


def test_batches_files_and_totals(tmp_path):
    store = StateStore(tmp_path / "state.db")
    assert store.last_batch_id("sink:a") is None
    store.start_run("r1", "run", "*")
    store.commit_batch(
        "sink:a", 0, "r1", 10, 100, [("/x/0.parquet", 10, 100)], commits=1, commit_ms=12.34
    )
    store.commit_batch("sink:a", 1, "r1", 0, 0, [], replayed=True)
    store.hand_out("r1", "sink:a", 2)  # handed out, never committed: still above
    assert store.last_batch_id("sink:a") == 2
    totals = store.batch_totals("sink:a", "r1")
    assert totals == {
        "batches": 2,
        "replayed": 1,
        "rows": 10,
        "bytes": 100,
        "retries": 0,
        "commits": 1,
        "commit_ms": 12.3,
        "files": 1,
    }
    assert [f["path"] for f in store.files(["sink:a"])] == ["/x/0.parquet"]
    assert store.files(["sink:b"]) == []
    assert store.reset(["sink:a"]) == 5  # two batches, a replay, one file, one id handed out
    assert store.last_batch_id("sink:a") is None


def test_a_replay_leaves_the_batch_as_its_run_recorded_it(tmp_path):
    """A later run that finds a batch already in the sink counts a replay; the batch keeps the
    rows, bytes and files of the run that delivered it (they used to be overwritten with 0)."""
    store = StateStore(tmp_path / "state.db")
    store.commit_batch("sink:a", 0, "r1", 10, 100, [("/x/0.parquet", 10, 100)], commits=1)
    store.commit_batch("sink:a", 0, "r2", 0, 0, [], replayed=True)
    first, second = store.batch_totals("sink:a", "r1"), store.batch_totals("sink:a", "r2")
    assert (first["batches"], first["rows"], first["bytes"], first["files"]) == (1, 10, 100, 1)
    assert (second["batches"], second["replayed"], second["rows"]) == (1, 1, 0)
    store.commit_batch("sink:a", 0, "r2", 0, 0, [], replayed=True)  # recorded twice: once
    assert store.batch_totals("sink:a", "r2")["replayed"] == 1


def test_a_killed_run_is_resumed_by_the_same_run_and_aborted_by_another(tmp_path):
    store = StateStore(tmp_path / "state.db")
    assert store.start_run("r1", "run", "*", "same") is None
    store.hand_out("r1", "sink:a", 7)
    # r1 was killed: a run with the same fingerprint resumes it
    assert store.start_run("r2", "run", "*", "same") == "r1"
    assert store.handed_out("r1", "sink:a") == 7
    # r2 was killed too: another invocation closes it as aborted and resumes nothing
    assert store.start_run("r3", "run", "other", "different") is None
    status = {r["run_id"]: r["status"] for r in store._rows("SELECT run_id, status FROM runs")}
    assert status == {"r1": "resumed", "r2": "aborted", "r3": "running"}


def test_schema_snapshots_report_changes(tmp_path):
    store = StateStore(tmp_path / "state.db")
    assert store.schema_change("r1", "model:m", {"a": "int"}) == "NEW"
    assert store.schema_change("r2", "model:m", {"a": "int"}) == "SAME"
    assert store.schema_change("r3", "model:m", {"a": "bigint"}) == "CHANGED"
    assert store.schema_change("r4", "model:m", {"a": "bigint"}) == "SAME"


def test_history_keeps_the_last_runs(tmp_path):
    store = StateStore(tmp_path / "state.db")
    for i in range(3):
        store.start_run(f"r{i}", "run", "*")
        store.record(f"r{i}", NodeResult("model:m", "model", "success", rows=i))
        store.finish_run(f"r{i}", "success")
    rows = store.history(["model:m"], last=2)
    assert sorted(r["rows"] for r in rows) == [1, 2]


def test_second_run_is_refused_while_one_holds_the_lock(tmp_path):
    with run_lock(tmp_path, "20260101T000000Z-aaaaaa"):
        with pytest.raises(StateError) as err:
            with run_lock(tmp_path, "other"):
                pass
    assert "20260101T000000Z-aaaaaa" in str(err.value)
    with run_lock(tmp_path, "after"):  # released when the first run ended
        pass


def test_cli_run_exits_2_when_locked(make_project):
    root = make_project({})
    with run_lock(root, "20260101T000000Z-bbbbbb"):
        result = rivc(root, "run")
    assert result.exit_code == 2
    assert "20260101T000000Z-bbbbbb" in result.output
    assert not (root / "warehouse").exists()


def test_state_and_metrics_commands_without_spark(make_project):
    root = make_project({})
    from rivc.adapters.state import StateStore

    store = StateStore.for_project(root)
    store.start_run("r1", "run", "*")
    store.record("r1", NodeResult("model:stg", "model", "success", rows=3))
    store.commit_batch("sink:s", 0, "r1", 3, 30, [("/tmp/x.parquet", 3, 30)])
    store.close()
    metrics = rivc(root, "metrics", "--select", "stg", "--json")
    assert metrics.exit_code == 0, metrics.output
    assert [r["node"] for r in json.loads(metrics.output)["node runs"]] == ["model:stg"]
    shown = json.loads(rivc(root, "state", "show", "--json").output)
    assert [(b["sink"], b["last_batch_id"]) for b in shown["batches"]] == [("sink:s", 0)]
    assert [r["run_id"] for r in shown["runs"]] == ["r1"]
    # piped: a run id is never cut, a run shows the fields that say what it was, to the second
    long_id = "20261127T095934Z-ac8078"
    store = StateStore.for_project(root)
    store.start_run(long_id, "run", "stg+ sink:a_rather_long_sink_name", "f" * 64)
    store.close()
    text = rivc(root, "state", "show").output
    assert long_id in text and "f" * 16 not in text, text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", text) and "+00:00" not in text
    reset = rivc(root, "state", "reset", "--yes")
    assert reset.exit_code == 0 and "Removed 2" in reset.output
    assert json.loads(rivc(root, "state", "files", "--json").output) == {"files": []}


def test_quality_counts_show_in_history(tmp_path):
    from rivc.adapters.state import NodeResult, StateStore

    store = StateStore(tmp_path / "s.db")
    store.start_run("r1", "run", "*")
    store.record_quality(
        "sink:s", 0, "r1", [("not_null(id)", "drop", 3), ("cast", "dead_letter", 1)]
    )
    store.record_quality("sink:s", 1, "r1", [("not_null(id)", "drop", 2)])
    store.record("r1", NodeResult("sink:s", "sink", "success", rows=10))
    (row,) = store.history()
    assert row["quality"] == "cast: 1 dead_letter; not_null(id): 5 drop"
    assert store.quality_totals("sink:s", "r1")[1] == {
        "check_name": "not_null(id)",
        "action": "drop",
        "rows": 5,
    }
    store.close()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_store_is_moved_aside_and_a_new_one_started(tmp_path, damage):
    path = tmp_path / ".rivc/state.db"
    store = StateStore(path)
    store.start_run("r1", "run", "*")
    for i in range(200):  # a store of a few pages
        store.commit_batch("sink:a", i, "r1", i, i, [(f"/x/{i}.parquet", i, i)])
    store.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3] if damage == "truncated" else os.urandom(8192))
    fresh = StateStore(path)
    assert fresh.damaged is not None and "moved aside" in fresh.damaged
    assert fresh.last_batch_id("sink:a") is None  # a new store: the record only is lost
    fresh.start_run("r2", "run", "*")  # and it works
    fresh.close()
    (aside,) = path.parent.glob("state.db.damaged-*")
    assert aside.read_bytes()[:16] == (
        data[:16] if damage == "truncated" else aside.read_bytes()[:16]
    )
    assert StateStore(path).damaged is None  # the new one opens cleanly next time


def test_an_emptied_store_is_a_new_store(tmp_path):
    path = tmp_path / "state.db"
    StateStore(path).close()
    path.write_bytes(b"")
    store = StateStore(path)
    assert store.damaged is None and store.last_batch_id("sink:a") is None


def test_an_earlier_store_keeps_its_cursors_for_the_first_extraction(tmp_path):
    """A state store of the version that kept cursors: they survive the migration, to seed the
    first extraction into a landing table, once."""
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    for number, ddl in enumerate(MIGRATIONS[:7], start=1):
        db.executescript(f"BEGIN;\n{ddl}\nPRAGMA user_version = {number};\nCOMMIT;")
    db.execute(
        "INSERT INTO cursors VALUES ('source:s.t', ?, 'r0', '2026-01-01')",
        (json.dumps({"value": {"timestamp": "2026-01-02 00:00:00"}, "keys": [[7]]}),),
    )
    db.commit()
    db.close()
    store = StateStore(path)
    assert store.legacy_cursor("source:s.t") == {
        "value": {"timestamp": "2026-01-02 00:00:00"},
        "keys": [[7]],
    }
    store.forget_legacy_cursor("source:s.t")
    assert store.legacy_cursor("source:s.t") is None
