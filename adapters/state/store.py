"""The SQLite state store `.rivc/state.db`: the record of runs, node results, schemas, committed
batches and files, split by concern (runs.py, batches.py, schemas.py) behind one class. It is
not the truth: extraction positions live in the landing tables, and each consumer's place in
its own table's commits (docs/running.md), so a store that is lost or damaged costs the record
only. A damaged one is moved aside, with one line, and a new one started.

Migrations are append-only and numbered by `PRAGMA user_version`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from rivc.compiler.loading.locate import STATE_DIR

from .base import now
from .batches import BatchRecords
from .runs import RunRecords
from .schemas import SchemaRecords

MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, command TEXT NOT NULL, selection TEXT NOT NULL,
        started_at TEXT NOT NULL, finished_at TEXT, status TEXT NOT NULL, pid INTEGER
    );
    CREATE TABLE node_runs (
        run_id TEXT NOT NULL REFERENCES runs(run_id), node TEXT NOT NULL, kind TEXT NOT NULL,
        status TEXT NOT NULL, rows INTEGER, bytes INTEGER, files INTEGER, duration_s REAL,
        peak_rss_mb REAL, retries INTEGER NOT NULL DEFAULT 0, schema TEXT, error TEXT,
        finished_at TEXT NOT NULL, PRIMARY KEY (run_id, node)
    );
    CREATE INDEX node_runs_node ON node_runs(node, finished_at);
    CREATE TABLE cursors (
        node TEXT PRIMARY KEY, value TEXT, run_id TEXT, updated_at TEXT NOT NULL
    );
    CREATE TABLE schemas (
        node TEXT NOT NULL, columns TEXT NOT NULL, run_id TEXT NOT NULL, taken_at TEXT NOT NULL,
        PRIMARY KEY (node, taken_at)
    );
    CREATE TABLE files (
        run_id TEXT NOT NULL, node TEXT NOT NULL, batch_id INTEGER NOT NULL, path TEXT NOT NULL,
        rows INTEGER, bytes INTEGER NOT NULL, written_at TEXT NOT NULL,
        PRIMARY KEY (node, path)
    );
    CREATE TABLE batches (
        sink TEXT NOT NULL, batch_id INTEGER NOT NULL, run_id TEXT NOT NULL, rows INTEGER,
        bytes INTEGER, retries INTEGER NOT NULL DEFAULT 0, replayed INTEGER NOT NULL DEFAULT 0,
        committed_at TEXT NOT NULL, PRIMARY KEY (sink, batch_id)
    );
    """,
    """
    CREATE TABLE chunks (
        node TEXT NOT NULL, plan TEXT NOT NULL, chunk INTEGER NOT NULL, path TEXT NOT NULL,
        done_at TEXT NOT NULL, PRIMARY KEY (node, plan, chunk)
    );
    """,
    """
    CREATE TABLE quality (
        sink TEXT NOT NULL, batch_id INTEGER NOT NULL, run_id TEXT NOT NULL, check_name TEXT NOT NULL,
        action TEXT NOT NULL, rows INTEGER NOT NULL, recorded_at TEXT NOT NULL,
        PRIMARY KEY (sink, batch_id, check_name)
    );
    """,
    """
    ALTER TABLE batches ADD COLUMN commits INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE batches ADD COLUMN commit_ms REAL NOT NULL DEFAULT 0;
    ALTER TABLE node_runs ADD COLUMN commits INTEGER;
    ALTER TABLE node_runs ADD COLUMN commit_ms REAL;
    """,
    """
    ALTER TABLE runs ADD COLUMN fingerprint TEXT;
    ALTER TABLE runs ADD COLUMN resumed_from TEXT;
    CREATE TABLE handed_out (
        run_id TEXT NOT NULL, sink TEXT NOT NULL, batch_id INTEGER NOT NULL,
        handed_at TEXT NOT NULL, PRIMARY KEY (run_id, sink)
    );
    CREATE TABLE extracts (
        run_id TEXT NOT NULL, node TEXT NOT NULL, files TEXT NOT NULL, cursor TEXT,
        description TEXT NOT NULL, staged_at TEXT NOT NULL, PRIMARY KEY (run_id, node)
    );
    """,
    """
    ALTER TABLE runs ADD COLUMN spark_session TEXT;
    """,
    """
    CREATE TABLE replays (
        sink TEXT NOT NULL, batch_id INTEGER NOT NULL, run_id TEXT NOT NULL,
        replayed_at TEXT NOT NULL, PRIMARY KEY (sink, batch_id, run_id)
    );
    """,
    """
    ALTER TABLE cursors RENAME TO legacy_cursors;
    DROP TABLE chunks;
    DROP TABLE extracts;
    """,
    """
    ALTER TABLE node_runs ADD COLUMN log_behind INTEGER;
    """,
]


def migrate(db: sqlite3.Connection) -> None:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    for number, ddl in enumerate(MIGRATIONS[version:], start=version + 1):
        db.executescript(f"BEGIN;\n{ddl}\nPRAGMA user_version = {number};\nCOMMIT;")


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        (verdict,) = db.execute("PRAGMA quick_check").fetchone()
        if verdict != "ok":
            raise sqlite3.DatabaseError(str(verdict).splitlines()[0])
        migrate(db)
    except BaseException:
        db.close()
        raise
    return db


class StateStore(RunRecords, BatchRecords, SchemaRecords):
    """The state store of one project. `damaged` says why an unreadable store was moved aside
    (for the command to print), else None."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self.damaged: str | None = None
        try:
            self.db = _open(path)
        except sqlite3.DatabaseError as exc:
            aside = path.with_name(f"{path.name}.damaged-{now()[:19].replace(':', '')}")
            for suffix in ("", "-wal", "-shm"):
                kept = path.with_name(path.name + suffix)
                if kept.exists():
                    kept.rename(aside.with_name(aside.name + suffix))
            self.damaged = (
                f"{STATE_DIR}/{path.name} could not be read ({exc}): moved aside to "
                f"{STATE_DIR}/{aside.name}, and a new one started; it held a record only "
                "(the tables hold what each consumer has)"
            )
            self.db = _open(path)

    @classmethod
    def for_project(cls, root: Path) -> StateStore:
        return cls(root / STATE_DIR / "state.db")

    def close(self) -> None:
        self.db.close()

    def show(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "batches": self._rows(
                "SELECT sink, MAX(batch_id) AS last_batch_id, COUNT(*) AS batches, "
                "MAX(committed_at) AS committed_at FROM batches GROUP BY sink ORDER BY sink"
            ),
            "runs": self._rows("SELECT * FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 5"),
        }

    def legacy_cursor(self, node: str) -> dict[str, Any] | None:
        """The cursor an earlier rivc kept here for `node`, before positions moved into the
        landing tables: the first extraction of a project upgraded from it starts there."""
        rows = self._rows("SELECT value FROM legacy_cursors WHERE node = ?", (node,))
        found: dict[str, Any] | None = json.loads(rows[0]["value"]) if rows else None
        return found

    def forget_legacy_cursor(self, node: str) -> None:
        """Once the landing table holds the position: read once, never again."""
        self._write("DELETE FROM legacy_cursors WHERE node = ?", (node,))

    def reset(self, nodes: list[str] | None) -> int:
        """Forget the records of `nodes` (all when None): batches, files, schemas, quality
        counts. The tables keep what they hold and where each consumer is."""
        count = 0
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            for table, col in (
                ("batches", "sink"),
                ("replays", "sink"),
                ("files", "node"),
                ("schemas", "node"),
                ("quality", "sink"),
                ("handed_out", "sink"),
                ("legacy_cursors", "node"),
            ):
                if nodes is None:
                    count += self.db.execute(f"DELETE FROM {table}").rowcount
                else:
                    for n in nodes:
                        count += self.db.execute(
                            f"DELETE FROM {table} WHERE {col} = ?", (n,)
                        ).rowcount
            self.db.execute("COMMIT")
        return count
