"""The runtime half of rivc.compiler.registry: a connector's entry names its runtime by import
path; this module imports it when a run, `rivc doctor` or a generated job needs it."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import ConnectorInfo
from rivc.compiler.errors import ConnectorError
from rivc.compiler.registry import connector, unknown

from .base import Sink, SinkContext, SourceContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _load(info: ConnectorInfo, path: str) -> Any:
    """What an entry names by "module:attribute"; a path that does not load (a plugin's missing
    module or dependency) is refused naming the connector and the path."""
    module, _, attribute = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConnectorError(
            f"{info.kind} connector {info.name!r}: {path} does not load ({type(exc).__name__}: {exc})"
        ) from exc


def sink_for(name: str, config: Any, ctx: SinkContext) -> Sink[Any]:
    info = connector("sink", name)
    if info is None:
        raise ConnectorError(unknown("sink", name))
    sink: Sink[Any] = _load(info, info.runtime)(config, ctx)
    return sink


def read_source(spark: SparkSession, info: ConnectorInfo, ctx: SourceContext[Any]) -> DataFrame:
    df: DataFrame = _load(info, info.runtime)(spark, ctx)
    return df


def lag(info: ConnectorInfo, config: Any, project: str, name: str) -> int | None:
    """A stream source's messages waiting for its sink, when its connector can tell."""
    if info.lag is None:
        return None
    found: int | None = _load(info, info.lag)(config, project, name)
    return found


def probe(
    info: ConnectorInfo, config: Any, root: Path, storage: Mapping[str, str]
) -> tuple[bool, str] | None:
    """Doctor's reach check of a connector's endpoint (a broker, a catalog), when it has one."""
    if info.probe is None:
        return None
    result: tuple[bool, str] = _load(info, info.probe)(config, root, storage)
    return result


def newest(
    info: ConnectorInfo, config: Any, root: Path, storage: Mapping[str, str], column: str
) -> tuple[bool, Any]:
    """A source table's newest value of `column` read without Spark: (whether its connector can
    tell, the value)."""
    if info.newest is None:
        return False, None
    return True, _load(info, info.newest)(config, root, storage, column)


def change_log(info: ConnectorInfo) -> Any:
    """A change-log source's log (adapters/ingest/changelog.py: ChangeLog)."""
    assert info.log is not None
    return _load(info, info.log)()


def preflight(info: ConnectorInfo, conn: Any, tables: list[str], table: str) -> list[str] | None:
    """`rivc check` of a change-log table: what stops it from running (None: no check)."""
    if info.preflight is None:
        return None
    found: list[str] = _load(info, info.preflight)(conn, tables, table)
    return found
