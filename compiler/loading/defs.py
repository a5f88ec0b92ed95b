"""What project files define, each with where it was written: source tables, sinks, SQL files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..connector import ConnectorInfo
from ..errors import SourceLocation
from .specbase import Spec
from .specs import SinkSpec, SourceSpec, SourceTable
from .yamlio import YamlDoc, YamlPath


@dataclass(frozen=True, slots=True)
class Located:
    """A spec with the YAML document and path it came from, to point errors at its keys."""

    doc: YamlDoc
    at: YamlPath

    def location(self, *keys: str | int) -> SourceLocation:
        return self.doc.location((*self.at, *keys))


@dataclass(frozen=True, slots=True)
class SourceTableDef:
    source: SourceSpec
    table: SourceTable
    connector: ConnectorInfo
    config: Spec
    where: Located
    freshness: dict[str, Any] | None = None  # a dbt source's loaded_at_field and freshness
    event_time: str | None = None  # a dbt source's: what a microbatch model below it filters on

    @property
    def fqn(self) -> str:
        return f"{self.source.name}.{self.table.name}"

    def manifest_table(self) -> dict[str, Any]:
        """The table as the manifest holds it: its `config:` as its connector's spec dumps it
        (secret fields masked), never as the YAML wrote it."""
        out: dict[str, Any] = self.table.model_dump(
            mode="json", exclude_defaults=True, by_alias=True, exclude={"config"}
        )
        config = self.config.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return {**out, "config": config} if config else out

    def known_columns(self) -> dict[str, str] | None:
        """The columns this table produces, as far as compile knows them; None if unknown."""
        return self.connector.columns(self.config, self.table.columns)


@dataclass(frozen=True, slots=True)
class SinkDef:
    spec: SinkSpec
    connector: ConnectorInfo
    config: Spec
    where: Located


@dataclass(frozen=True, slots=True)
class SqlFile:
    name: str
    path: Path  # relative to the project root
    text: str
