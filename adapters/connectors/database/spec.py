"""The database connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import SinkConfig
from rivc.compiler.loading.specbase import Spec, StrList, _as_tuple


class RelationalConfig(Spec):
    """postgres and mysql take their settings on the table itself; `config:` stays empty."""


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"


class DatabaseSinkConfig(SinkConfig):
    """A database table, written through a staging table and applied in one transaction with
    the batch id and places (docs/sinks.md): the postgres and mysql sinks."""

    connection: str = Field(min_length=1)  # a profile connection of the sink's database
    table: str = Field(pattern=rf"^({_IDENTIFIER}\.)?{_IDENTIFIER}$")  # [schema.]table
    mode: Literal["append", "overwrite", "upsert"] = "append"
    key_columns: StrList = ()
    schema_evolution: Literal["strict", "add_columns"] = "strict"
    auto_create_table: bool = True  # false: a missing table is refused, never made

    _tuple = field_validator("key_columns", mode="before")(_as_tuple)

    def connection_name(self) -> str | None:
        return self.connection

    @model_validator(mode="after")
    def _keys(self) -> DatabaseSinkConfig:
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode upsert needs key_columns")
        if self.key_columns and self.mode != "upsert":
            raise ValueError("key_columns is for mode upsert")
        return self

    def merge_by(self) -> tuple[str, ...]:
        return self.key_columns

    def qualified(self) -> tuple[str | None, str]:
        """(schema, table): the schema (a MySQL database) None when the table names none."""
        schema, _, name = self.table.rpartition(".")
        return schema or None, name
