"""dbt `sources:` in properties YAML: tables that exist already, read in place (docs/dbt.md).

A dbt source table becomes a rivc source table of one of three kinds:
- the seed of the same name (or of its `identifier`), as jaffle-shop's `raw` schema is loaded;
- `external: {location: ..., file_format: ...}`: a Delta table (the default format) or a
  folder of parquet, csv or json files, the `delta` and `files` connectors;
- otherwise a table in Spark's catalog named as dbt-spark names it,
  `[database.]schema.identifier` with the source's name as the default schema (`table`).

Its columns are known at compile when every listed column has a `data_type` (dbt's YAML often
lists only the columns it documents); otherwise models reading it are checked when they run.
`loaded_at_field` and `freshness` are kept in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ProjectError
from ..loading.property_specs import DbtSource, DbtSourceTable
from ..loading.yamlio import YamlDoc, YamlPath

# dbt's `external: {file_format}` -> the rivc source connector that reads it, the config field
# its location goes in, and the rest of its config
EXTERNAL: dict[str, tuple[str, str, dict[str, str]]] = {
    "delta": ("delta", "table_uri", {}),
    **{fmt: ("files", "path", {"format": fmt}) for fmt in ("parquet", "csv", "json", "jsonl")},
}


@dataclass(frozen=True, slots=True)
class DbtTable:
    source: DbtSource
    table: DbtSourceTable
    doc: YamlDoc
    at: YamlPath  # ("sources", i, "tables", j)

    @property
    def fqn(self) -> str:
        return f"{self.source.name}.{self.table.name}"

    @property
    def identifier(self) -> str:
        return self.table.identifier or self.table.name

    def catalog_name(self) -> str:
        parts = (self.source.database, self.source.schema_ or self.source.name, self.identifier)
        return ".".join(p for p in parts if p)

    def event_time(self) -> str | None:
        """dbt's `config: {event_time: ...}`, the table's over its source's: the column a
        microbatch model reading the table filters it on (compiler/microbatch.py)."""
        for config in (self.table.config, self.source.config):
            if isinstance(config, dict) and config.get("event_time"):
                return str(config["event_time"])
        return None

    def freshness(self) -> dict[str, Any] | None:
        """dbt's `loaded_at_field` and `freshness`, a table's own over its source's."""
        field = self.table.loaded_at_field or self.source.loaded_at_field
        given = self.table.freshness if self.table.freshness is not None else self.source.freshness
        if field is None and given is None:
            return None
        return {"loaded_at_field": field, "freshness": given}

    def as_source(self) -> tuple[dict[str, Any], YamlPath]:
        """The rivc source spec (one table) this table is read as, and where its connector's
        settings come from, for errors."""
        ext = self.table.external or {}
        where: YamlPath = (*self.at, "external") if ext else self.at
        if ext:
            location = ext.get("location")
            if not isinstance(location, str) or not location:
                raise ProjectError(
                    f"dbt source {self.fqn}: external needs location: (a Delta table or a folder "
                    "of parquet, csv or json files)",
                    self.doc.location(where),
                )
            fmt = str(ext.get("file_format") or ext.get("using") or "delta").lower()
            if fmt not in EXTERNAL:
                raise ProjectError(
                    f"dbt source {self.fqn}: file_format {fmt!r} is not read; rivc reads "
                    f"{', '.join(EXTERNAL)} (an Iceberg table: an iceberg source in "
                    "sources/*.yml)",
                    self.doc.location(where),
                )
            connector, field, rest = EXTERNAL[fmt]
            config = {field: location, **rest}
        else:
            connector, config = "table", {"name": self.catalog_name()}
        table = {
            "name": self.table.name,
            "description": self.table.description,
            "columns": self.columns(),
            "config": config,
        }
        spec = {
            "name": self.source.name,
            "connector": connector,
            "description": self.source.description,
            "tables": [table],
        }
        return spec, where

    def columns(self) -> dict[str, str]:
        """Declared columns with Spark types, when every listed column has a `data_type`."""
        cols = self.table.columns
        if not cols or any(c.data_type is None for c in cols):
            return {}
        types = {c.name: spark_type(str(c.data_type)) for c in cols}
        if any(t is None for t in types.values()):
            return {}
        return {k: str(t) for k, t in types.items()}


def spark_type(text: str) -> str | None:
    """A warehouse type written as Spark SQL's (`varchar(20)` is `string`); None if unread."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        built = exp.DataType.build(text, dialect="spark")
    except (ParseError, ValueError):
        return None
    if built.this in exp.DataType.TEXT_TYPES:
        return "string"  # Spark reads char and varchar columns as strings
    return built.sql(dialect="spark").lower()


def dbt_tables(doc: YamlDoc, sources: tuple[DbtSource, ...]) -> list[DbtTable]:
    return [
        DbtTable(source, table, doc, ("sources", i, "tables", j))
        for i, source in enumerate(sources)
        for j, table in enumerate(source.tables)
    ]
