"""Schema snapshots: a node's columns and types whenever they change."""

from __future__ import annotations

import json

from .base import Records, now


class SchemaRecords(Records):
    def last_schema(self, node: str) -> dict[str, str] | None:
        rows = self._rows(
            "SELECT columns FROM schemas WHERE node = ? ORDER BY taken_at DESC LIMIT 1", (node,)
        )
        return json.loads(rows[0]["columns"]) if rows else None

    def schema_change(
        self, run_id: str, node: str, columns: dict[str, str], record: bool = True
    ) -> str:
        """NEW, SAME or CHANGED against the last snapshot; `record=False` keeps a change unrecorded."""
        rows = self._rows(
            "SELECT columns FROM schemas WHERE node = ? ORDER BY taken_at DESC LIMIT 1", (node,)
        )
        text = json.dumps(columns)
        if rows and rows[0]["columns"] == text:
            return "SAME"
        if rows and not record:  # a change the caller refuses stays unrecorded
            return "CHANGED"
        self._write(
            "INSERT OR REPLACE INTO schemas VALUES (?, ?, ?, ?)", (node, text, run_id, now())
        )
        return "CHANGED" if rows else "NEW"
