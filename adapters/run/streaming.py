"""Streams: batch ids across checkpoints, and a first Ctrl-C that lets the running batch finish."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..util.storage import Store
from .sinkwriter import SinkWriter


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
