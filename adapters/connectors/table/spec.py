"""The table connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from pydantic import Field

from rivc.compiler.connector import RUNTIME, ConnectorInfo
from rivc.compiler.loading.specbase import Spec


class TableSourceConfig(Spec):
    """A table in Spark's catalog, read as it is now: `table`, `schema.table` or
    `catalog.schema.table`."""

    name: str = Field(min_length=1)


ENTRIES = (
    ConnectorInfo(
        "table",
        "source",
        "lakehouse",
        TableSourceConfig,
        "a table in Spark's catalog (a dbt source), read as it is now by Spark's tasks",
        f"{RUNTIME}.table.source:read_source",
    ),
)
