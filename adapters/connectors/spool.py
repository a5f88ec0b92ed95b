"""A durable spool of received messages for a source whose broker does not replay them (mqtt) or
would deliver them again in another order (sqs): append-only JSON-lines segments under .rivc/spool/,
a message's offset its sequence number, so a batch Spark planned is read again with the same
messages; the segments a committed batch holds only are deleted."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SEGMENT_MESSAGES = 10_000  # a spool segment is closed after this many messages


def spooled(data: bytes) -> dict[str, str]:
    """A payload as the spool's JSON line holds it: UTF-8 text as it is ("p"), other bytes in
    base64 ("b"); unspooled gives the bytes back exactly."""
    try:
        return {"p": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b": base64.b64encode(data).decode()}


def unspooled(record: Mapping[str, Any]) -> bytes:
    if "b" in record:
        return base64.b64decode(record["b"])
    text: str = record["p"]
    return text.encode("utf-8")


class Spool:
    """Append-only segments `<first seq>.jsonl`; a message's offset is its sequence number."""

    def __init__(self, path: Path, writer: bool = True) -> None:
        """One writer (the receiver) appends; readers (Spark's side) read and commit."""
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        segments = self._segments()
        if not segments and writer:
            (path / _segment_name(0)).touch()
            segments = [0]
        self.first = segments[0] if segments else 0
        self.next = self.durable = self.first
        self._out: Any = None
        self._in_segment = 0
        if writer:
            last = path / _segment_name(segments[-1])
            self.next = segments[-1] + _complete_lines(last)
            self.durable = self.next
            self._out = open(last, "ab")  # noqa: SIM115  (closed in close())
            self._in_segment = self.next - segments[-1]

    def first_segment(self) -> int:
        segments = self._segments()
        return segments[0] if segments else 0

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.path.glob("*.jsonl"))

    def append(self, record: dict[str, Any]) -> None:
        if self._in_segment >= SEGMENT_MESSAGES:
            self._rotate()
        self._out.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self.next += 1
        self._in_segment += 1

    def fileno(self) -> int:
        return int(self._out.fileno())

    def flush(self) -> None:
        """Hand what was appended to the OS: from now on it survives a kill of this process."""
        self._out.flush()

    def sync(self) -> None:
        """Flush and fsync what was appended; from now on it survives a machine crash."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self.durable = self.next

    def read(self, start: int, end: int) -> list[dict[str, Any]]:
        """Messages [start, end), which the writer has made durable."""
        out: list[dict[str, Any]] = []
        segments = self._segments()
        for i, first in enumerate(segments):
            upto = segments[i + 1] if i + 1 < len(segments) else end
            if upto <= start or first >= end:
                continue
            with open(self.path / _segment_name(first), "rb") as fh:
                for seq, line in enumerate(fh, start=first):
                    if seq >= end:
                        break
                    if seq >= start:
                        out.append(json.loads(line))
        if len(out) != max(0, end - start):
            raise RuntimeError(
                f"spool {self.path} holds {len(out)} of messages {start}..{end - 1}: "
                "it was deleted or edited while the checkpoint was kept"
            )
        return out

    def commit(self, end: int) -> None:
        """Messages below `end` are in the sink: drop the segments that hold only those (never
        the newest, which the writer appends to)."""
        segments = self._segments()
        for first, upto in zip(segments, segments[1:], strict=False):
            if upto <= end:
                (self.path / _segment_name(first)).unlink(missing_ok=True)
        self.first = max(self.first, end)

    def reseed(self, start: int) -> None:
        """The checkpoint is ahead of an empty spool (the spool was removed): continue from it."""
        if self._out is not None:
            self._out.close()
        for first in self._segments():
            (self.path / _segment_name(first)).unlink()
        (self.path / _segment_name(start)).touch()
        self.first = self.next = self.durable = start
        self._out = open(self.path / _segment_name(start), "ab")  # noqa: SIM115
        self._in_segment = 0

    def _rotate(self) -> None:
        self.sync()
        self._out.close()
        self._out = open(self.path / _segment_name(self.next), "ab")  # noqa: SIM115
        self._in_segment = 0

    def close(self) -> None:
        self.sync()
        self._out.close()


def _segment_name(first: int) -> str:
    return f"{first:016d}.jsonl"


def _complete_lines(path: Path) -> int:
    """Count whole lines; a torn last line (a crash mid-write) is cut off."""
    data = path.read_bytes()
    whole = data.rfind(b"\n") + 1
    if whole != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(whole)
    return data[:whole].count(b"\n")
