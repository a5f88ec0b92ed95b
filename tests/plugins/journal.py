"""A change log that is not built in, added the way docs/architecture.md says: a spec, a
`ChangeLog` with its typed position and session, and one registry entry (the test adds it). Its
log is a JSON-lines file: each line one transaction, `{"time": ..., "changes": [{"table",
"op": "c"|"u"|"d"|"truncate", "before", "after"}]}`, and a table is what its lines did to it.
The change-log driver (adapters/ingest/changelog.py) lands, kills and resumes it as it does
postgres-cdc and mysql-cdc: snapshot, moved keys, truncates, full refresh, shape checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from rivc.adapters.connectors.postgres.copy import arrow_type
from rivc.adapters.ingest.changelog import (
    Batch,
    Change,
    ChangeLog,
    LogContext,
    LogPosition,
    LogSession,
    LogSource,
    Rows,
)
from rivc.compiler.connector import ConnectorInfo, envelope
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specbase import Spec


class JournalConfig(Spec):
    path: str  # the journal file
    key: str  # the column that identifies a row


def journal_columns(_config: Any, columns: Any) -> dict[str, str] | None:
    return envelope(columns, {"line": "bigint"}, {})


@dataclass(frozen=True)
class LinePosition(LogPosition):
    line: int  # every line before it is landed

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line}

    def describe(self) -> str:
        return f"line {self.line}"


@dataclass(frozen=True)
class _Commit:
    line: int
    time: datetime

    def seq(self, i: int) -> int:
        return self.line * 1000 + i


def _lines(config: JournalConfig) -> list[dict[str, Any]]:
    path = Path(config.path)
    text = path.read_text() if path.exists() else ""
    return [
        json.loads(line, parse_float=Decimal)
        for line in text.splitlines(keepends=True)
        if line.endswith("\n")
    ]


class JournalLog(ChangeLog):
    def position(self, data: dict[str, Any]) -> LinePosition:
        return LinePosition(int(data["line"]))

    @contextmanager
    def open(self, ctx: LogContext, held: LogPosition | None) -> Iterator[LogSession]:
        lines = _lines(ctx.source.config)  # the log's end when the run began
        yield _Session(ctx, lines)

    def release(self, ctx: LogContext) -> tuple[str, int | None]:
        return "", len(_lines(ctx.source.config))

    def status(
        self, source: LogSource, held: dict[str, LogPosition | None]
    ) -> list[dict[str, Any]]:
        end = len(_lines(source.config))
        return [
            {"table": nid, "held": None if at is None else at.describe(), "log_end": end}
            for nid, at in held.items()
        ]


class _Session(LogSession):
    def __init__(self, ctx: LogContext, lines: list[dict[str, Any]]) -> None:
        self.ctx, self.lines = ctx, lines
        self.names = list(ctx.table.columns)
        self.types = dict(ctx.table.columns)
        self.name = ctx.table.table or ""

    @property
    def columns(self) -> dict[str, str]:
        found = journal_columns(None, self.types)
        assert found is not None
        return found

    def key_names(self) -> list[str]:
        return [self.ctx.source.config.key]

    def key_columns(self) -> list[int]:
        return [self.names.index(self.ctx.source.config.key)]

    def _image(self, values: dict[str, Any] | None) -> list[Any] | None:
        if values is None:
            return None
        unknown = set(values) - set(self.names)
        if unknown:
            raise ConnectorError(f"{self.ctx.label}: column {sorted(unknown)[0]} is not declared")
        return [values.get(n) for n in self.names]

    def snapshot(self, out: Batch, going: LogPosition | None) -> Iterator[LogPosition]:
        key = self.ctx.source.config.key
        rows: dict[Any, dict[str, Any]] = {}
        for line in self.lines:
            for c in line["changes"]:
                if c["table"] != self.name:
                    continue
                if c["op"] == "truncate":
                    rows.clear()
                elif c["op"] == "d":
                    rows.pop(c["before"][key], None)
                else:
                    if c.get("before"):
                        rows.pop(c["before"][key], None)
                    rows[c["after"][key]] = c["after"]
        for row in rows.values():
            out.add("r", None, self._image(row))
        yield LinePosition(len(self.lines))

    def changes(self, held: LogPosition) -> Iterator[tuple[_Commit, list[Change]]]:
        assert isinstance(held, LinePosition)
        for n in range(held.line, len(self.lines)):
            line = self.lines[n]
            found = [
                Change(c["op"], self._image(c.get("before")), self._image(c.get("after")), i)
                for i, c in enumerate(line["changes"])
                if c["table"] == self.name
            ]
            if found:
                yield _Commit(n, datetime.fromisoformat(line["time"]).astimezone(UTC)), found

    def envelopes(self, rows: Rows, parts: Any) -> Any:
        import pyarrow as pa

        fields = [pa.field(n, arrow_type(self.types[n])) for n in self.names]

        def images(values: list[Any]) -> Any:
            columns = [
                pa.array([None if v is None else v[j] for v in values], f.type)
                for j, f in enumerate(fields)
            ]
            mask = pa.array([v is None for v in values], pa.bool_())
            return pa.StructArray.from_arrays(columns, fields=fields, mask=mask)

        return pa.table(
            {
                "op": pa.array(rows.ops, pa.string()),
                "before": images(rows.before),
                "after": images(rows.after),
                "line": pa.array([c and c.line for c in rows.commits], pa.int64()),
                "seq": pa.array([Decimal(x) for x in rows.seq], pa.decimal128(38, 0)),
                "commit_time": pa.array(
                    [c and c.time for c in rows.commits], pa.timestamp("us", tz="UTC")
                ),
            }
        )

    def reached(self, held: LogPosition) -> LinePosition:
        return LinePosition(len(self.lines))

    def worth_recording(self, held: LogPosition, reached: LogPosition) -> bool:
        return reached != held


ENTRY = ConnectorInfo(
    "journal",
    "source",
    "debug",
    JournalConfig,
    "a JSON-lines change log (a test connector)",
    "rivc.adapters.connectors.logsource:read",
    log="plugins.journal:JournalLog",
    columns=journal_columns,
)
