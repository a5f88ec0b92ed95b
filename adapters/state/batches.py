"""Committed batches, the files they wrote, their quality counts: what the sinks reported."""

from __future__ import annotations

from typing import Any

from .base import Records, now


class BatchRecords(Records):
    def last_batch_id(self, sink: str) -> int | None:
        """The highest batch id this store recorded for `sink` (committed or handed out)."""
        rows = self._rows(
            "SELECT MAX(m) AS m FROM (SELECT MAX(batch_id) AS m FROM batches WHERE sink = ? "
            "UNION ALL SELECT MAX(batch_id) FROM handed_out WHERE sink = ?)",
            (sink, sink),
        )
        last = rows[0]["m"]
        return None if last is None else int(last)

    def committed_batch(self, sink: str) -> int | None:
        """The highest batch id this store recorded as committed to `sink`'s table."""
        rows = self._rows("SELECT MAX(batch_id) AS m FROM batches WHERE sink = ?", (sink,))
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
