"""What `rivc run` prints: a line per node as it finishes, then a summary table (rich)."""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from rivc.compiler.redact import redact_text

from .state import NodeResult

STYLE = {
    "success": "green",
    "pass": "green",
    "warn": "yellow",
    "skipped": "yellow",
    "error": "red",
    "fail": "red",
}


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


START_DELAY_S = 2.0  # a node that ends sooner prints only its result line


class Progress:
    """Prints `[3/12] OK model stg_orders (1.2s)` lines; threads share one console.

    A node's `start` line appears only when the node is still running after START_DELAY_S, or
    when another line is printed while it runs: a start line right before its own result line
    says nothing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Timer] = {}

    def start(self, nid: str) -> None:
        timer = threading.Timer(START_DELAY_S, self._announce, (nid,))
        timer.daemon = True
        with self._lock:
            self._pending[nid] = timer
        timer.start()

    def _announce(self, nid: str) -> None:
        with self._lock:
            if self._pending.pop(nid, None) is not None:
                self.console.print(f"[dim]  start {nid}[/dim]")

    def note(self, nid: str, text: str) -> None:
        """A line of progress while `nid` runs (a stream's micro-batch); its start line first."""
        with self._lock:
            own = self._pending.pop(nid, None)
            if own is not None:
                own.cancel()
                self.console.print(f"[dim]  start {nid}[/dim]")
            self.console.print(f"[dim]  {nid} {text}[/dim]", highlight=False)

    def result(self, i: int, n: int, r: NodeResult) -> None:
        word = {"success": "OK", "pass": "PASS"}.get(r.status, r.status.upper())
        rows = f", {r.rows:,} rows" if r.rows is not None and r.kind != "test" else ""
        note = f" {r.message}" if r.message and r.status not in ("error", "fail") else ""
        line = f"[{i}/{n}] [{STYLE.get(r.status, 'white')}]{word}[/] {r.node}{note}{rows} ({r.duration_s:.1f}s)"
        if r.error:
            line += f"\n        {redact_text(r.error)}"
        if r.status == "skipped":
            line += f" - {r.message}"
        with self._lock:
            own = self._pending.pop(r.node, None)
            if own is not None:
                own.cancel()
            for other, timer in sorted(self._pending.items()):  # running beside this one
                timer.cancel()
                self.console.print(f"[dim]  start {other}[/dim]")
            self._pending.clear()
            self.console.print(line, highlight=False, markup=True, soft_wrap=True)


def summary(console: Console, report: Any) -> None:
    table = Table(title=f"run {report.run_id}", title_justify="left", show_edge=False)
    for col in ("node", "status", "rows", "files", "bytes", "duration", "peak RSS", "schema"):
        table.add_column(
            col, justify="right" if col not in ("node", "status", "schema") else "left"
        )
    for r in report.results:
        table.add_row(
            r.node,
            f"[{STYLE.get(r.status, 'white')}]{r.status}[/]",
            _count(r.rows),
            _count(r.files),
            human_bytes(r.bytes),
            f"{r.duration_s:.1f}s",
            "-" if r.peak_rss_mb is None else f"{r.peak_rss_mb:,.0f} MB",
            r.schema or "-",
        )
    console.print(table)
    counts: dict[str, int] = {}
    for r in report.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    console.print(
        f"{'FAILED' if report.failed else 'Done'}: {parts or 'nothing selected'} "
        f"in {report.elapsed_s:.1f}s (run {report.run_id}, target/run_results.json)",
        highlight=False,
    )
