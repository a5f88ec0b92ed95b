"""The delta connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import (
    RUNTIME,
    Compression,
    ConnectorInfo,
    Scd2Columns,
    SinkConfig,
    _valid_size,
)
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import (
    StorageOptions,
)
from rivc.compiler.loading.specbase import Location, Spec, StrList, _as_tuple


class DeltaSourceConfig(Spec):
    """A Delta table that exists: its current version, read by Spark's tasks."""

    table_uri: Location
    storage_options: StorageOptions = {}


class DeltaSinkConfig(SinkConfig):
    table_uri: Location
    mode: Literal["append", "overwrite", "merge", "scd2"] = "append"
    merge_keys: StrList = ()
    scd2: Scd2Columns = Scd2Columns()
    partition_by: StrList = ()
    compression: Compression = "snappy"
    target_file_size: int | None = Field(None, gt=0)
    table_properties: dict[str, str] = {}
    schema_evolution: Literal["strict", "add_columns"] = "strict"
    storage_options: StorageOptions = {}
    auto_create_table: bool = True  # false: a missing table is refused, never made
    spark_write_threshold: int | str = "64MB"  # batches Spark estimates at least this big are
    # written by its executors; smaller ones go through the driver as one file

    _tuple = field_validator("merge_keys", "partition_by", mode="before")(_as_tuple)
    _size = field_validator("spark_write_threshold")(_valid_size)

    @model_validator(mode="after")
    def _keys(self) -> DeltaSinkConfig:
        if self.mode in ("merge", "scd2") and not self.merge_keys:
            raise ValueError(f"mode {self.mode} needs merge_keys")
        return self

    def merge_by(self) -> tuple[str, ...]:
        return self.merge_keys if self.mode in ("merge", "scd2") else ()

    def history(self) -> Scd2Columns | None:
        return self.scd2 if self.mode == "scd2" else None


ENTRIES = (
    ConnectorInfo(
        "delta",
        "source",
        "lakehouse",
        DeltaSourceConfig,
        "an existing Delta table (its current version), read by Spark's tasks",
        f"{RUNTIME}.delta.runtime:read_source",
        newest=f"{RUNTIME}.delta.runtime:newest",
    ),
    ConnectorInfo(
        "delta",
        "sink",
        "lakehouse",
        DeltaSinkConfig,
        "Delta Lake tables (delta-rs), exactly-once per batch",
        f"{RUNTIME}.delta.runtime:DeltaSink",
        location=lambda config: config.table_uri,
        holds="table",
        aliases=aliases.delta_sink,
    ),
)
