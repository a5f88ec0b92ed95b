"""A connector that is not built in, added the way docs/architecture.md says: a spec class, a
runtime class and one registry entry (the test adds the entry). It merges by a key, can be
selected by its mode, refuses a type it cannot hold, previews what it holds and maintains
itself, all through the hooks the built-in sinks use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from rivc.adapters.plane.base import Can, Sink, WriteResult
from rivc.compiler.connector import ConnectorInfo, SinkConfig


class LedgerConfig(SinkConfig):
    path: str  # a directory; its ledger.jsonl holds one line per batch: {"batch", "rows"}
    mode: Literal["append", "merge"] = "append"  # merge: current.json keeps a row per key
    key: str | None = None

    def merge_by(self) -> tuple[str, ...]:
        return (self.key,) if self.mode == "merge" and self.key else ()

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        return {"key": (self.key,)} if self.key else {}


class LedgerSink(Sink[LedgerConfig]):
    """Appends each batch as one line; knows its last batch id, so a replay is skipped."""

    can = frozenset({Can.PREVIEW, Can.MAINTAIN})

    @property
    def home(self) -> Path:
        return Path(self.ctx.path(self.config.path))

    def _lines(self) -> list[dict[str, Any]]:
        path = self.home / "ledger.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def last_batch_id(self) -> int | None:
        return max((line["batch"] for line in self._lines()), default=None)

    def write(self, data: Any, batch_id: int) -> WriteResult:
        rows = data.to_table().to_pylist()
        self.home.mkdir(parents=True, exist_ok=True)
        if self.config.key:
            current = self.home / "current.json"
            held = json.loads(current.read_text()) if current.exists() else {}
            held.update({str(r[self.config.key]): r for r in rows})
            current.write_text(json.dumps(held, default=str))
        with (self.home / "ledger.jsonl").open("a") as fh:
            fh.write(json.dumps({"batch": batch_id, "rows": rows}, default=str) + "\n")
        return WriteResult(rows=len(rows), commits=1)

    def preview(self, limit: int) -> Any | None:
        import pyarrow as pa

        lines = self._lines()
        return pa.Table.from_pylist(lines[-1]["rows"][:limit]) if lines else None

    def maintain(self, retain_hours: int, dry_run: bool) -> str | None:
        """Keeps the last line of the ledger only (the batch id a replay is checked against)."""
        lines = self._lines()
        if dry_run or len(lines) < 2:
            return f"would drop {max(len(lines) - 1, 0)} ledger lines"
        (self.home / "ledger.jsonl").write_text(json.dumps(lines[-1], default=str) + "\n")
        return f"dropped {len(lines) - 1} ledger lines"


ENTRY = ConnectorInfo(
    "ledger",
    "sink",
    "debug",
    LedgerConfig,
    "each batch as one JSON line (a test connector)",
    "plugins.ledger:LedgerSink",
    location=lambda config: config.path,
    holds="files",  # JSON lines: no interval type
)
