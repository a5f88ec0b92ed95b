"""Runs and node results: which run is going, which was killed, what each node did."""

from __future__ import annotations

import os
from typing import Any

from .base import NodeResult, Records, now


class RunRecords(Records):
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
            "duration_s, peak_rss_mb, retries, schema, error, finished_at, commits, commit_ms, "
            "log_behind) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
                r.log_behind,
            ),
        )

    def log_behind(self, node: str) -> int | None:
        """How far a change-log source was behind the log's end after its last run (bytes)."""
        rows = self._rows(
            "SELECT log_behind FROM node_runs WHERE node = ? AND log_behind IS NOT NULL "
            "ORDER BY finished_at DESC LIMIT 1",
            (node,),
        )
        return None if not rows else int(rows[0]["log_behind"])

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
