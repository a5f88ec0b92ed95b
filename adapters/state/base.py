"""What every part of the state store shares: one SQLite connection, a lock, and the node
result it records."""

from __future__ import annotations

import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


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
    log_behind: int | None = None  # change-log sources: bytes of log past the held position
    # microbatch models: the [start, end) of the batches built and of those that failed
    batches: dict[str, list[list[str]]] | None = None


class Records:
    """Every method commits its own write; threads share one connection under a lock."""

    db: sqlite3.Connection
    _lock: threading.Lock

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
