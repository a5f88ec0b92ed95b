"""The postgres connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from rivc.adapters.connectors.database.spec import DatabaseSinkConfig, RelationalConfig
from rivc.compiler.connector import RUNTIME, ConnectorInfo, envelope
from rivc.compiler.loading.specbase import Spec


class PostgresCdcConfig(Spec):
    """postgres-cdc's settings, on the source (one slot and publication serve its tables):
    the seed's names (docs/cdc.md). The defaults name both after the project and source."""

    slot_name: str | None = Field(None, pattern=r"^[a-z0-9_]{1,63}$")
    publication_name: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    auto_create_slot: bool = True
    auto_create_publication: bool = True
    # rows a first snapshot lands at a time, in primary-key order: a killed run's next run
    # reads on from the last landed part (docs/cdc.md)
    snapshot_chunk_size: int = Field(1_000_000, ge=1)


def cdc_columns(_config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    """postgres-cdc's (and datagen's cdc_mode) envelope: the commit's LSN and transaction id."""
    return envelope(columns, {"commit_lsn": "decimal(20,0)"}, {"txid": "bigint"})


class PostgresSinkConfig(DatabaseSinkConfig):
    """A PostgreSQL table (a table without a schema is in `public`)."""


ENTRIES = (
    ConnectorInfo(
        "postgres",
        "source",
        "database",
        RelationalConfig,
        "PostgreSQL tables and queries (COPY or JDBC), source-safe modes",
        f"{RUNTIME}.database.relational:read",
        relational=True,
        database="postgres",
    ),
    ConnectorInfo(
        "postgres-cdc",
        "source",
        "database",
        PostgresCdcConfig,
        "PostgreSQL's change log (logical replication, pgoutput): inserts, updates, deletes",
        f"{RUNTIME}.logsource:read",
        log=f"{RUNTIME}.postgres.log:PgOutputLog",
        database="postgres",
        columns=cdc_columns,
        preflight=f"{RUNTIME}.postgres.slot:preflight",
    ),
    ConnectorInfo(
        "postgres",
        "sink",
        "database",
        PostgresSinkConfig,
        "PostgreSQL tables (COPY by Spark's tasks), exactly-once per batch",
        f"{RUNTIME}.postgres.sink:PostgresSink",
        database="postgres",
        holds="table",
    ),
)
