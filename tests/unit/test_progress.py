"""What `rivc run` prints while nodes run: on a terminal a live line per long node, erased when
it ends; elsewhere (CI) one line per node and nothing else."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from rivc.adapters.ops import report
from rivc.adapters.ops.report import Progress
from rivc.adapters.state import NodeResult


def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_on_a_terminal_a_long_node_has_a_live_line_with_its_spark_progress(monkeypatch):
    monkeypatch.setattr(report, "LIVE_AFTER_S", 0.05)
    monkeypatch.setattr(report, "TICK_S", 0.02)
    out = io.StringIO()
    seen = {"model:slow": "3/8 tasks, 1.2 MB read"}
    progress = Progress(Console(file=out, force_terminal=True, width=100), seen.get)
    progress.start("model:slow")
    progress.start("model:quick")
    _wait_for(lambda: "3/8 tasks, 1.2 MB read" in out.getvalue())
    assert "model:quick" in out.getvalue()  # running, nothing known about its jobs yet
    progress.result(1, 2, NodeResult("model:quick", "model", "success", rows=5, duration_s=0.1))
    progress.result(2, 2, NodeResult("model:slow", "model", "success", rows=8, duration_s=0.3))
    progress.close()
    text = out.getvalue()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "[1/2] OK model:quick, 5 rows (0.1s)" in plain
    assert "[2/2] OK model:slow, 8 rows (0.3s)" in plain
    # the live lines are erased at the end: cursor up and clear line, nothing drawn after
    assert text.endswith("\x1b[1A\x1b[2K"), repr(text[-80:])


def test_elsewhere_each_node_prints_one_line_and_a_stream_its_batches(monkeypatch):
    monkeypatch.setattr(report, "LIVE_AFTER_S", 0.0)
    out = io.StringIO()
    progress = Progress(Console(file=out, force_terminal=False, width=140), lambda nid: "0/8")
    progress.start("model:slow")
    time.sleep(0.1)
    progress.start("sink:events")
    progress.note("sink:events", "batch 0: 10 rows in 0.2s (10 in all) [bold]")
    progress.result(1, 2, NodeResult("model:slow", "model", "success", rows=8, duration_s=3.0))
    progress.result(2, 2, NodeResult("sink:events", "sink", "success", rows=10, duration_s=4.0))
    progress.close()
    assert out.getvalue().splitlines() == [
        "  sink:events batch 0: 10 rows in 0.2s (10 in all) [bold]",
        "[1/2] OK model:slow, 8 rows (3.0s)",
        "[2/2] OK sink:events, 10 rows (4.0s)",
    ]


def test_a_failed_node_prints_its_error_and_a_skipped_one_why():
    out = io.StringIO()
    progress = Progress(Console(file=out, force_terminal=False, width=140))
    error = "models/a.sql:1:1: error: partition_by [day] is not [status]"  # text, not markup
    progress.result(1, 2, NodeResult("model:a", "model", "error", error=error, duration_s=0.5))
    why = "upstream model:a did not succeed"
    progress.result(2, 2, NodeResult("model:b", "model", "skipped", message=why))
    progress.close()
    assert out.getvalue().splitlines() == [
        "[1/2] ERROR model:a (0.5s)",
        f"        {error}",
        f"[2/2] SKIPPED model:b (0.0s) - {why}",
    ]
