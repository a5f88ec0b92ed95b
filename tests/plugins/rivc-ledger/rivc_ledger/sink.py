"""The ledger sink's runtime: it merges by a key, can be selected by its mode, previews what it
holds and maintains itself, through the hooks the built-in sinks use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rivc.adapters.plane.base import Can, Sink, WriteResult

from .spec import LedgerConfig


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
