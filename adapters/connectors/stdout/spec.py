"""The stdout connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from pydantic import Field

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig


class StdoutSinkConfig(SinkConfig):
    pretty: bool = False
    limit: int | None = Field(None, gt=0)


ENTRIES = (
    ConnectorInfo(
        "stdout",
        "sink",
        "debug",
        StdoutSinkConfig,
        "JSON lines on standard output",
        f"{RUNTIME}.stdout.sink:StdoutSink",
    ),
)
