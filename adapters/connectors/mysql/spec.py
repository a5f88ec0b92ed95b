"""The mysql connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from rivc.adapters.connectors.database.spec import DatabaseSinkConfig, RelationalConfig
from rivc.compiler.connector import RUNTIME, ConnectorInfo, envelope
from rivc.compiler.loading.specbase import Spec


class MysqlCdcConfig(Spec):
    """mysql-cdc's settings, on the source: the seed's `server_id`, the id rivc's binlog reader
    takes among the server's replicas (default: one derived from project and source)."""

    server_id: int | None = Field(None, ge=1, le=2**32 - 1)


def mysql_cdc_columns(_config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    """mysql-cdc's envelope: the binlog coordinates of the commit, and its GTID."""
    position = {"binlog_file": "string", "binlog_pos": "bigint"}
    return envelope(columns, position, {"gtid": "string"})


class MysqlSinkConfig(DatabaseSinkConfig):
    """A MySQL or MariaDB table (a table without a database is in the connection's)."""


ENTRIES = (
    ConnectorInfo(
        "mysql",
        "source",
        "database",
        RelationalConfig,
        "MySQL and MariaDB tables and queries (JDBC), source-safe modes",
        f"{RUNTIME}.database.relational:read",
        relational=True,
        database="mysql",
    ),
    ConnectorInfo(
        "mysql-cdc",
        "source",
        "database",
        MysqlCdcConfig,
        "MySQL's and MariaDB's binary log (row-based): inserts, updates, deletes",
        f"{RUNTIME}.logsource:read",
        log=f"{RUNTIME}.mysql.log:BinlogLog",
        database="mysql",
        columns=mysql_cdc_columns,
        preflight=f"{RUNTIME}.mysql.binlog:preflight",
    ),
    ConnectorInfo(
        "mysql",
        "sink",
        "database",
        MysqlSinkConfig,
        "MySQL and MariaDB tables (multi-row INSERTs by Spark's tasks), exactly-once per batch",
        f"{RUNTIME}.mysql.sink:MysqlSink",
        database="mysql",
        holds="table",
    ),
)
