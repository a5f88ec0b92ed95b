"""The SQLite state store `.rivc/state.db`: runs, node runs, cursors, schemas, files, batches.

Migrations are append-only and numbered by `PRAGMA user_version`. One run at a time holds
`.rivc/run.lock` (an flock, so a crashed run never leaves it taken).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rivc.compiler.errors import StateError
from rivc.compiler.locate import STATE_DIR

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
]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def migrate(db: sqlite3.Connection) -> None:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    for number, ddl in enumerate(MIGRATIONS[version:], start=version + 1):
        db.executescript(f"BEGIN;\n{ddl}\nPRAGMA user_version = {number};\nCOMMIT;")


@dataclass(frozen=True)
class NodeResult:
    node: str
    kind: str
    status: str  # success | error | skipped | warn | pass | fail
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    duration_s: float = 0.0
    peak_rss_mb: float | None = None
    retries: int = 0
    schema: str | None = None  # NEW | SAME | CHANGED
    error: str | None = None
    message: str = ""
    commits: int | None = None  # sinks: table commits
    commit_ms: float | None = None  # sinks: time spent committing


class StateStore:
    """Every method commits its own write; threads share one connection under a lock."""

    def __init__(self, path: Path) -> None:
        import threading

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        migrate(self.db)

    @classmethod
    def for_project(cls, root: Path) -> StateStore:
        return cls(root / STATE_DIR / "state.db")

    def close(self) -> None:
        self.db.close()

    def _write(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute(sql, args)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self.db.execute(sql, args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    # ---------------------------------------------------------------- runs

    def start_run(
        self, run_id: str, command: str, selection: str, fingerprint: str | None = None
    ) -> str | None:
        """Record a new run and return the run it resumes, if any.

        Called under the run lock, so a run still marked running was killed. The last one is
        resumed when this run has the same fingerprint (the same command, selection, params
        and compiled project): it reuses that run's batch ids and staged extractions, so what
        a sink committed before the crash is recognised and skipped. Any other is closed as
        aborted."""
        dead = self._rows(
            "SELECT run_id, fingerprint FROM runs WHERE status = 'running' ORDER BY started_at DESC"
        )
        resumed = None
        if dead and fingerprint is not None and dead[0]["fingerprint"] == fingerprint:
            resumed = str(dead[0]["run_id"])
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for row in dead:
                    self.db.execute(
                        "UPDATE runs SET status = ?, finished_at = ? WHERE run_id = ?",
                        (
                            "resumed" if row["run_id"] == resumed else "aborted",
                            now(),
                            row["run_id"],
                        ),
                    )
                self.db.execute(
                    "INSERT INTO runs (run_id, command, selection, started_at, finished_at, "
                    "status, pid, fingerprint, resumed_from) VALUES (?,?,?,?,NULL,'running',?,?,?)",
                    (run_id, command, selection, now(), os.getpid(), fingerprint, resumed),
                )
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        return resumed

    def hand_out(self, run_id: str, sink: str, batch_id: int) -> None:
        """Record the batch id a run gives a sink, before the sink writes anything."""
        self._write(
            "INSERT OR REPLACE INTO handed_out VALUES (?, ?, ?, ?)", (run_id, sink, batch_id, now())
        )

    def handed_out(self, run_id: str, sink: str) -> int | None:
        rows = self._rows(
            "SELECT batch_id FROM handed_out WHERE run_id = ? AND sink = ?", (run_id, sink)
        )
        return int(rows[0]["batch_id"]) if rows else None

    def record_extract(
        self, run_id: str, node: str, files: list[str], cursor: str | None, description: str
    ) -> None:
        """An extraction's staged copy, so that a resumed run replays it instead of reading
        the database again (which could return more rows under an id a sink committed)."""
        self._write(
            "INSERT OR REPLACE INTO extracts VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, node, json.dumps(files), cursor, description, now()),
        )

    def extract_of(self, run_id: str, node: str) -> tuple[list[str], str | None, str] | None:
        rows = self._rows(
            "SELECT files, cursor, description FROM extracts WHERE run_id = ? AND node = ?",
            (run_id, node),
        )
        if not rows:
            return None
        return json.loads(rows[0]["files"]), rows[0]["cursor"], str(rows[0]["description"])

    def finish_run(self, run_id: str, status: str) -> None:
        self._write(
            "UPDATE runs SET finished_at = ?, status = ?, spark_session = NULL WHERE run_id = ?",
            (now(), status, run_id),
        )

    def set_spark_session(self, run_id: str, session: str | None) -> None:
        """The Spark Connect session a run works in, kept until the run finishes: a killed
        run's session is how the next run finds its operations still running on the server."""
        self._write("UPDATE runs SET spark_session = ? WHERE run_id = ?", (session, run_id))

    def killed_sessions(self, run_id: str) -> list[tuple[str, str]]:
        """(run, Spark Connect session) of the runs killed before they finished, other than
        `run_id`, whose sessions were not fenced yet."""
        rows = self._rows(
            "SELECT run_id, spark_session FROM runs WHERE spark_session IS NOT NULL "
            "AND run_id != ? ORDER BY started_at",
            (run_id,),
        )
        return [(str(r["run_id"]), str(r["spark_session"])) for r in rows]

    def record(self, run_id: str, r: NodeResult) -> None:
        self._write(
            "INSERT OR REPLACE INTO node_runs (run_id, node, kind, status, rows, bytes, files, "
            "duration_s, peak_rss_mb, retries, schema, error, finished_at, commits, commit_ms) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                r.node,
                r.kind,
                r.status,
                r.rows,
                r.bytes,
                r.files,
                round(r.duration_s, 3),
                r.peak_rss_mb,
                r.retries,
                r.schema,
                r.error,
                now(),
                r.commits,
                None if r.commit_ms is None else round(r.commit_ms, 1),
            ),
        )

    def history(self, nodes: list[str] | None = None, last: int = 5) -> list[dict[str, Any]]:
        """Node runs of the last `last` runs, newest first."""
        runs = [
            r["run_id"]
            for r in self._rows(
                "SELECT run_id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT ?", (last,)
            )
        ]
        if not runs:
            return []
        marks = ",".join("?" * len(runs))
        rows = self._rows(
            f"SELECT * FROM node_runs WHERE run_id IN ({marks}) ORDER BY finished_at DESC",
            tuple(runs),
        )
        quality: dict[tuple[str, str], list[str]] = {}
        for q in self._rows(
            f"SELECT run_id, sink, check_name, action, SUM(rows) AS n FROM quality "
            f"WHERE run_id IN ({marks}) GROUP BY run_id, sink, check_name, action "
            "ORDER BY check_name",
            tuple(runs),
        ):
            quality.setdefault((q["run_id"], q["sink"]), []).append(
                f"{q['check_name']}: {q['n']} {q['action']}"
            )
        return [
            {**r, "quality": "; ".join(quality.get((r["run_id"], r["node"]), []))}
            for r in rows
            if nodes is None or r["node"] in nodes
        ]

    # ---------------------------------------------------------------- schemas

    def last_schema(self, node: str) -> dict[str, str] | None:
        rows = self._rows(
            "SELECT columns FROM schemas WHERE node = ? ORDER BY taken_at DESC LIMIT 1", (node,)
        )
        return json.loads(rows[0]["columns"]) if rows else None

    def schema_change(
        self, run_id: str, node: str, columns: dict[str, str], record: bool = True
    ) -> str:
        """NEW, SAME or CHANGED against the last snapshot; `record=False` keeps a change unrecorded."""
        rows = self._rows(
            "SELECT columns FROM schemas WHERE node = ? ORDER BY taken_at DESC LIMIT 1", (node,)
        )
        text = json.dumps(columns)
        if rows and rows[0]["columns"] == text:
            return "SAME"
        if rows and not record:  # a change the caller refuses stays unrecorded
            return "CHANGED"
        self._write(
            "INSERT OR REPLACE INTO schemas VALUES (?, ?, ?, ?)", (node, text, run_id, now())
        )
        return "CHANGED" if rows else "NEW"

    # ---------------------------------------------------------------- batches and files

    def last_batch_id(self, sink: str) -> int | None:
        """The highest batch id this store recorded for `sink` (committed or handed out)."""
        rows = self._rows(
            "SELECT MAX(m) AS m FROM (SELECT MAX(batch_id) AS m FROM batches WHERE sink = ? "
            "UNION ALL SELECT MAX(batch_id) FROM handed_out WHERE sink = ?)",
            (sink, sink),
        )
        last = rows[0]["m"]
        return None if last is None else int(last)

    def commit_batch(
        self,
        sink: str,
        batch_id: int,
        run_id: str,
        rows: int,
        bytes_: int,
        files: list[tuple[str, int | None, int]],
        retries: int = 0,
        replayed: bool = False,
        commits: int = 0,
        commit_ms: float = 0.0,
    ) -> None:
        """Record a batch the sink committed, with the files it wrote, in one transaction. A
        replay (the sink already held the batch) is recorded as one of this run's replays and
        leaves the batch's own record, its rows and files, as the run that wrote it left them;
        without one (the writer was killed before recording), the batch is recorded as
        replayed, with the rows unknown."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                if replayed:
                    self.db.execute(
                        "INSERT OR REPLACE INTO replays VALUES (?, ?, ?, ?)",
                        (sink, batch_id, run_id, now()),
                    )
                    known = self.db.execute(
                        "SELECT 1 FROM batches WHERE sink = ? AND batch_id = ?", (sink, batch_id)
                    ).fetchone()
                    if known:
                        self.db.execute("COMMIT")
                        return
                self.db.execute(
                    "INSERT OR REPLACE INTO batches (sink, batch_id, run_id, rows, bytes, retries, "
                    "replayed, committed_at, commits, commit_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        sink,
                        batch_id,
                        run_id,
                        rows,
                        bytes_,
                        retries,
                        int(replayed),
                        now(),
                        commits,
                        round(commit_ms, 1),
                    ),
                )
                self.db.executemany(
                    "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(run_id, sink, batch_id, p, n, b, now()) for p, n, b in files],
                )
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def batch_totals(self, sink: str, run_id: str) -> dict[str, int]:
        """What a sink committed during a run: batches, replays skipped, rows, bytes, files, retries."""
        (b,) = self._rows(
            "SELECT COUNT(*) AS batches, "
            "(SELECT COUNT(*) FROM replays WHERE sink = ?1 AND run_id = ?2) AS replayed, "
            "COALESCE(SUM(rows), 0) AS rows, COALESCE(SUM(bytes), 0) AS bytes, "
            "COALESCE(SUM(retries), 0) AS retries, COALESCE(SUM(commits), 0) AS commits, "
            "COALESCE(SUM(commit_ms), 0) AS commit_ms FROM batches "
            "WHERE sink = ?1 AND run_id = ?2 AND replayed = 0",
            (sink, run_id),
        )
        b["batches"] += b["replayed"]
        (f,) = self._rows(
            "SELECT COUNT(*) AS files FROM files WHERE node = ? AND run_id = ?", (sink, run_id)
        )
        return {**b, **f}

    def record_quality(
        self, sink: str, batch_id: int, run_id: str, counts: list[tuple[str, str, int]]
    ) -> None:
        """Rows of one batch that failed each check: (check, action, rows)."""
        with self._lock:
            self.db.executemany(
                "INSERT OR REPLACE INTO quality VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(sink, batch_id, run_id, c, a, n, now()) for c, a, n in counts],
            )

    def quality_totals(self, sink: str, run_id: str) -> list[dict[str, Any]]:
        return self._rows(
            "SELECT check_name, action, SUM(rows) AS rows FROM quality WHERE sink = ? AND run_id = ? "
            "GROUP BY check_name, action ORDER BY check_name",
            (sink, run_id),
        )

    def files(self, nodes: list[str] | None = None) -> list[dict[str, Any]]:
        rows = self._rows("SELECT * FROM files ORDER BY written_at, path")
        return [r for r in rows if nodes is None or r["node"] in nodes]

    # ---------------------------------------------------------------- cursors

    def cursor(self, node: str) -> str | None:
        rows = self._rows("SELECT value FROM cursors WHERE node = ?", (node,))
        return rows[0]["value"] if rows else None

    def set_cursor(self, node: str, value: str, run_id: str) -> None:
        self._write(
            "INSERT OR REPLACE INTO cursors VALUES (?, ?, ?, ?)", (node, value, run_id, now())
        )

    # ---------------------------------------------------------------- chunk checkpoints

    def done_chunks(self, node: str, plan: str) -> dict[int, str]:
        rows = self._rows(
            "SELECT chunk, path FROM chunks WHERE node = ? AND plan = ?", (node, plan)
        )
        return {r["chunk"]: r["path"] for r in rows}

    def chunk_done(self, node: str, plan: str, chunks: list[int], path: str) -> None:
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("DELETE FROM chunks WHERE node = ? AND plan <> ?", (node, plan))
            self.db.executemany(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)",
                [(node, plan, c, path, now()) for c in chunks],
            )
            self.db.execute("COMMIT")

    def clear_chunks(self, node: str) -> None:
        self._write("DELETE FROM chunks WHERE node = ?", (node,))

    # ---------------------------------------------------------------- show / reset

    def show(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "cursors": self._rows("SELECT * FROM cursors ORDER BY node"),
            "batches": self._rows(
                "SELECT sink, MAX(batch_id) AS last_batch_id, COUNT(*) AS batches, "
                "MAX(committed_at) AS committed_at FROM batches GROUP BY sink ORDER BY sink"
            ),
            "runs": self._rows("SELECT * FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 5"),
        }

    def reset(self, nodes: list[str] | None) -> int:
        """Forget cursors, batches, files and schemas of `nodes` (all when None)."""
        count = 0
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            for table, col in (
                ("cursors", "node"),
                ("batches", "sink"),
                ("replays", "sink"),
                ("files", "node"),
                ("schemas", "node"),
                ("chunks", "node"),
                ("quality", "sink"),
                ("handed_out", "sink"),
                ("extracts", "node"),
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


@contextmanager
def run_lock(root: Path, run_id: str) -> Iterator[None]:
    """Hold the project's run lock; a second run gets a StateError naming the running one."""
    path = root / STATE_DIR / "run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            try:
                info = json.loads(holder)
                who = f"run {info['run_id']} (pid {info['pid']}, started {info['started_at']})"
            except (ValueError, KeyError):
                who = "another run"
            raise StateError(
                f"{path.relative_to(root)}: {who} is using this project's state store; "
                "wait for it to finish"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            json.dumps({"run_id": run_id, "pid": os.getpid(), "started_at": now()}).encode(),
            0,
        )
        yield
    finally:
        os.close(fd)  # closing releases the flock
