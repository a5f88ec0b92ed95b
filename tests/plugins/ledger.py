"""A connector that is not built in, added the way docs/architecture.md says: a spec class, a
runtime class and one registry entry (the test adds the entry)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rivc.adapters.plane.base import Sink, WriteResult
from rivc.compiler.registry import ConnectorInfo
from rivc.compiler.specbase import Spec


class LedgerConfig(Spec):
    path: str  # a directory; its ledger.jsonl holds one line per batch: {"batch", "rows"}


class LedgerSink(Sink):
    """Appends each batch as one line; knows its last batch id, so a replay is skipped."""

    config: LedgerConfig

    def _lines(self) -> list[dict[str, Any]]:
        path = Path(self.ctx.path(self.config.path)) / "ledger.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def last_batch_id(self) -> int | None:
        return max((line["batch"] for line in self._lines()), default=None)

    def write(self, data: Any, batch_id: int) -> WriteResult:
        rows = data.to_table().to_pylist()
        path = Path(self.ctx.path(self.config.path)) / "ledger.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps({"batch": batch_id, "rows": rows}, default=str) + "\n")
        return WriteResult(rows=len(rows), commits=1)


ENTRY = ConnectorInfo(
    "ledger",
    "sink",
    "debug",
    LedgerConfig,
    "each batch as one JSON line (a test connector)",
    "plugins.ledger:LedgerSink",
    location=lambda config: config.path,
)
