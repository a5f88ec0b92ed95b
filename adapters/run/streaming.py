"""Streams: batch ids across checkpoints, and a first Ctrl-C that lets the running batch finish."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..delivery.sinkwriter import SinkWriter
from ..state import NodeResult
from ..util.storage import Store

if TYPE_CHECKING:
    from .plan import Plan
    from .runtime import Runtime

FAILED = {"error", "fail"}


@contextmanager
def graceful_interrupt(event: threading.Event) -> Iterator[None]:
    """The first Ctrl-C sets `event` (streams stop after their current batch, no new node
    starts); the second one interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if event.is_set():
            raise KeyboardInterrupt
        event.set()
        print("stopping after the current batch (Ctrl-C again to stop now)", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stream_base(checkpoint: str, store: Store, writer: SinkWriter) -> int:
    """What a stream adds to Spark's batch ids. Spark numbers a new checkpoint's batches from 0;
    the sink's tables may already hold higher ids (a lost or reset checkpoint), and would skip
    the new batches as replays. So a new checkpoint starts above them, and keeps that base in
    the checkpoint itself: the two are lost or reset together."""
    import pyarrow.fs as pafs

    fs, where = store.filesystem(checkpoint)
    where = where.rstrip("/")
    marker, offsets = fs.get_file_info([f"{where}/rivc-batch-base", f"{where}/offsets"])
    if marker.type == pafs.FileType.File:
        with fs.open_input_stream(marker.path, compression=None) as handle:
            return int(handle.read())
    if offsets.type != pafs.FileType.NotFound:
        return 0  # a checkpoint from before bases were kept
    last = writer.last_batch_id()
    base = 0 if last is None else last + 1
    fs.create_dir(where, recursive=True)
    with fs.open_output_stream(marker.path, compression=None) as out:
        out.write(str(base).encode())
    return base


class Batches:
    """One progress line per micro-batch of a stream (rows, duration, running total), from
    Spark's query progress: read on the driver, so it works on Spark Connect too."""

    def __init__(self, nid: str, base: int, say: Callable[[str, str], None]) -> None:
        self.nid, self.base, self.say = nid, base, say
        self.last, self.total = -1, 0

    def report(self, progress: Sequence[Mapping[str, Any]]) -> None:
        for p in progress:
            batch = int(p.get("batchId", -1))
            if batch <= self.last:
                continue
            self.last = batch
            rows = int(p.get("numInputRows") or 0)
            self.total += rows
            seconds = (p.get("durationMs") or {}).get("triggerExecution", 0) / 1000
            self.say(
                self.nid,
                f"batch {batch + self.base}: {rows:,} rows in {seconds:.1f}s "
                f"({self.total:,} in all)",
            )


def log_stream(plan: Plan, graph: Any, todo: list[str]) -> tuple[float, list[str]] | None:
    """A run that follows change logs (docs/cdc.md, "Streaming"): the selected change-log
    tables that feed a selected sink with a `processing_time` trigger, with every selected node
    below them, and the shortest of those triggers; None when there are none."""
    from rivc.compiler.loading.specs import interval_seconds

    chosen, waits, followed = set(todo), [], set()
    for nid in todo:
        node = plan.nodes[nid]
        if node.kind != "source" or not plan.project.sources[node.name].connector.log:
            continue
        below = graph.downstream(nid) & chosen
        timed = [
            interval_seconds(t["processing_time"])
            for t in (plan.nodes[n].sink.trigger for n in below if plan.nodes[n].kind == "sink")
            if isinstance(t, dict)
        ]
        if timed:
            waits.append(min(timed))
            followed |= {nid, *below}
    if not waits:
        return None
    return min(waits), [n for n in todo if n in followed]


def follow(
    runtime: Runtime,
    results: list[NodeResult],
    wait_s: float,
    nodes: list[str],
    run_pass: Callable[[list[str]], list[NodeResult]],
) -> list[NodeResult]:
    """After the run's first pass, `nodes` (change-log tables and what reads them) run again,
    a pass starting every `wait_s` seconds (at once after a longer pass), until Ctrl-C or a
    failure. Each pass is what a batch run does: the tables land what the log holds now, and
    every consumer takes what it has not taken, so a kill anywhere leaves what a batch run's
    kill leaves. A pass that moved rows says so in a
    line per node; each node's result adds up its passes (a sink's already does: it reports
    what it committed in the whole run)."""
    total = {r.node: r for r in results}
    runtime.resume_from = None  # only the first pass resumes a killed run
    done = 1
    began = time.monotonic()  # passes start every wait_s, as Spark's trigger; at once when late
    while not any(total[n].status in FAILED for n in nodes):
        if runtime.interrupt.wait(max(0.0, began + wait_s - time.monotonic())):
            break
        began = time.monotonic()
        done += 1
        for r in run_pass(nodes):
            was = total[r.node]
            if r.status == "skipped" and runtime.interrupt.is_set():
                continue  # Ctrl-C during the pass: not run, nothing lost
            if r.status in FAILED:
                runtime.on_progress(r.node, f"pass {done}: {r.error or r.message}")
            if r.kind == "sink":
                if r.rows or r.status in FAILED:  # else nothing new: the run's totals stand
                    moved = (r.rows or 0) - (was.rows or 0)
                    if moved:
                        runtime.on_progress(r.node, f"pass {done}: {moved:,} rows")
                    total[r.node] = replace(r, duration_s=was.duration_s + r.duration_s)
                continue
            if r.rows and r.status not in FAILED:
                runtime.on_progress(r.node, f"pass {done}: {r.message}")
            total[r.node] = replace(
                r,
                status=r.status if r.status in FAILED else was.status,
                rows=_sum(was.rows, r.rows),
                bytes=_sum(was.bytes, r.bytes),
                files=_sum(was.files, r.files),
                duration_s=was.duration_s + r.duration_s,
                retries=was.retries + r.retries,
                message=r.message if r.rows or r.status in FAILED else was.message,
            )
    for n in nodes:  # the state store holds the sum, as the console's summary does
        runtime.state.record(runtime.run_id, total[n])
    return [total[r.node] for r in results]


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)
