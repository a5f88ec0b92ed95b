"""The ledger sink's compile half: its config spec and its registry entry (what the entry point
names). Compile imports it without Spark, so it imports nothing of the run."""

from __future__ import annotations

from typing import Literal

from rivc.compiler.connector import ConnectorInfo, SinkConfig


class LedgerConfig(SinkConfig):
    path: str  # a directory; its ledger.jsonl holds one line per batch: {"batch", "rows"}
    mode: Literal["append", "merge"] = "append"  # merge: current.json keeps a row per key
    key: str | None = None

    def merge_by(self) -> tuple[str, ...]:
        return (self.key,) if self.mode == "merge" and self.key else ()

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        return {"key": (self.key,)} if self.key else {}


ENTRIES = (
    ConnectorInfo(
        "ledger",
        "sink",
        "debug",
        LedgerConfig,
        "each batch as one JSON line (a test connector)",
        "rivc_ledger.sink:LedgerSink",
        location=lambda config: config.path,
        holds="files",  # JSON lines: no interval type
    ),
)
