"""What `rivc run` prints: a line per node as it finishes, then a summary table (rich)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rivc.compiler.loading.secrets import redact_text

from ..state import NodeResult

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


LIVE_AFTER_S = 1.0  # a node running longer gets a live line on a terminal
TICK_S = 0.5


class Progress:
    """Prints `[3/12] OK model stg_orders (1.2s)`, one line per node; threads share one console.

    On a terminal, each node running longer than LIVE_AFTER_S also has a live line under the
    printed ones, erased when it ends: elapsed time and how far its Spark jobs are (`probe`).
    Elsewhere (CI, a log file) nothing but the result lines, and a stream's micro-batch lines."""

    def __init__(
        self, console: Console, probe: Callable[[str], str | None] = lambda nid: None
    ) -> None:
        self.console = console
        self.probe = probe  # nid -> what its live line says after the elapsed time
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}  # nid -> when it started
        self._live: Live | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if console.is_terminal:
            self._ticker = threading.Thread(target=self._tick, name="rivc-progress", daemon=True)
            self._ticker.start()

    def start(self, nid: str) -> None:
        with self._lock:
            self._running[nid] = time.perf_counter()

    def note(self, nid: str, text: str) -> None:
        """A line of progress while `nid` runs (a stream's micro-batch)."""
        with self._lock:
            self.console.print(f"[dim]  {escape(f'{nid} {text}')}[/dim]", highlight=False)

    def result(self, i: int, n: int, r: NodeResult) -> None:
        word = {"success": "OK", "pass": "PASS"}.get(r.status, r.status.upper())
        rows = f", {r.rows:,} rows" if r.rows is not None and r.kind != "test" else ""
        note = f" {r.message}" if r.message and r.status not in ("error", "fail", "skipped") else ""
        # the node, its message and its error are text, never markup: `[day]` stays
        text = escape(f"{r.node}{note}{rows}")
        line = f"[{i}/{n}] [{STYLE.get(r.status, 'white')}]{word}[/] {text} ({r.duration_s:.1f}s)"
        if r.error:
            line += f"\n        {escape(redact_text(r.error))}"
        if r.status == "skipped":
            line += f" - {escape(r.message or '')}"
        with self._lock:
            self._running.pop(r.node, None)
            self.console.print(line, highlight=False, markup=True, soft_wrap=True)
            if self._live is not None:
                self._refresh()

    def close(self) -> None:
        """Erase the live lines and stop updating them (before the summary prints)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._refresh()

    def lines(self) -> list[str]:
        """The live lines now: `  stg_orders  12s  45/200 tasks`, for nodes past LIVE_AFTER_S."""
        now = time.perf_counter()
        out = []
        for nid, since in sorted(self._running.items()):
            if now - since < LIVE_AFTER_S:
                continue
            seen = self.probe(nid)
            detail = f"  {seen}" if seen else ""
            out.append(f"  {nid}  {now - since:.0f}s{detail}")
        return out

    def _refresh(self) -> None:
        """Show the live lines, or none (called with the lock held)."""
        lines = self.lines() if not self._stop.is_set() else []
        if not lines:
            if self._live is not None:
                self._live.stop()
                self._live = None
            return
        text = Text("\n".join(lines), style="dim")
        if self._live is None:
            self._live = Live(text, console=self.console, transient=True, auto_refresh=False)
            self._live.start()
        self._live.update(text, refresh=True)

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                self._refresh()


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
