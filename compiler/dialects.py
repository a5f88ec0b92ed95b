"""The databases rivc reads and writes, one class each: what compile knows of a database (its
name as a connection `type:`, its SQL dialect for sqlglot, its default port, how each of its
column types is delivered). The runtime half of each class (its driver, connections, sessions,
plans, JDBC) is rivc.adapters.connectors.database.engine, a subclass of the class here.

Adding a database is a class here, its subclass there, and its connectors' entries naming it
(docs/architecture.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from . import dbtypes
from .dbtypes import DbColumn, Delivery
from .sql import SqlWriter


class Dialect(SqlWriter, ABC):
    """A database as compile knows it; its SQL as rivc writes it (quote, literal: SqlWriter)."""

    name: ClassVar[str]  # its connection `type:` in a profile, and connectors' `database`
    sqlglot: ClassVar[str]  # its dialect for sqlglot and for rivc.compiler.sql
    default_port: ClassVar[int]
    title: ClassVar[str]  # how messages and docs name it
    # "module:Class": its runtime half, a subclass of this class in its connector package
    # (driver, connections, sessions, JDBC; rivc.adapters.connectors.database.engine.database)
    runtime: ClassVar[str]

    @abstractmethod
    def delivery(self, col: DbColumn, declared: str | None = None) -> Delivery:
        """How a column of this database is read and delivered (docs/types.md)."""


class Postgres(Dialect):
    name = "postgres"
    sqlglot = "postgres"
    default_port = 5432
    title = "PostgreSQL"
    runtime = "rivc.adapters.connectors.postgres.database:PostgresDatabase"
    quote_char = '"'

    def bytes_literal(self, value: bytes) -> str:
        return f"'\\x{value.hex()}'::bytea"

    def delivery(self, col: DbColumn, declared: str | None = None) -> Delivery:
        return dbtypes.postgres(col, declared, self.quote(col.name))


class Mysql(Dialect):
    name = "mysql"
    sqlglot = "mysql"
    default_port = 3306
    title = "MySQL/MariaDB"
    runtime = "rivc.adapters.connectors.mysql.database:MysqlDatabase"

    def timestamp_literal(self, text: Any) -> str:
        # a plain DATETIME would drop the fraction of a second
        return f"CAST({text.sql(dialect=self.sqlglot)} AS DATETIME(6))"

    def delivery(self, col: DbColumn, declared: str | None = None) -> Delivery:
        return dbtypes.mysql(col, declared, self.quote(col.name))


DIALECTS: dict[str, Dialect] = {d.name: d for d in (Postgres(), Mysql())}


def dialect(name: str) -> Dialect:
    """The dialect of a database compile accepted (a connection type, a connector's
    `database`); a KeyError is a bug."""
    return DIALECTS[name]
