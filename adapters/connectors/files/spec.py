"""The files connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig, parse_size
from rivc.compiler.loading.secrets import (
    StorageOptions,
)
from rivc.compiler.loading.specbase import Location, Spec, StrList, _as_tuple


class FilesSourceConfig(Spec):
    path: Location
    format: Literal["json", "jsonl", "csv", "parquet"] = "parquet"
    stream: bool = False
    max_files_per_trigger: int | None = Field(None, gt=0)
    header: bool = True
    delimiter: str = ","
    options: dict[str, str | int | bool] = {}


class CsvOptions(Spec):
    delimiter: str = Field(",", min_length=1, max_length=1)
    header: bool = True
    quote: str = Field('"', min_length=1, max_length=1)
    null_value: str = ""


class FilesSinkConfig(SinkConfig):
    path: Location
    format: Literal["parquet", "csv", "jsonl", "json", "avro"] = "parquet"
    # append: every batch adds its files; overwrite: a batch's files replace the earlier ones
    mode: Literal["append", "overwrite"] = "append"
    compression: Literal["snappy", "zstd", "gzip", "lz4", "brotli", "none"] | None = None
    row_group_size: int | None = Field(None, gt=0)
    partitioning: Literal["none", "day", "hour", "columns"] = "none"
    partition_by: StrList = ()
    time_column: str | None = None
    max_file_size: int | str | None = None
    csv: CsvOptions = CsvOptions()
    avro_namespace: str = "rivc"
    avro_record_name: str | None = None
    storage_options: StorageOptions = {}

    _tuple = field_validator("partition_by", mode="before")(_as_tuple)

    @field_validator("max_file_size")
    @classmethod
    def _size(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            parse_size(value)
        return value

    @model_validator(mode="after")
    def _combination(self) -> FilesSinkConfig:
        if self.partitioning == "columns" and not self.partition_by:
            raise ValueError("partitioning columns needs partition_by")
        if self.partition_by and self.partitioning != "columns":
            raise ValueError("partition_by needs partitioning: columns")
        text = self.format in ("csv", "jsonl", "json")
        if text and self.compression not in (None, "none", "gzip", "zstd"):
            raise ValueError(f"{self.format} files take compression gzip, zstd or none")
        if self.format == "avro" and self.compression not in (None, "none", "snappy", "zstd"):
            raise ValueError("avro files take compression snappy, zstd or none")
        return self

    def file_format(self) -> str | None:
        return self.format


ENTRIES = (
    ConnectorInfo(
        "files",
        "source",
        "storage",
        FilesSourceConfig,
        "a directory of json, csv or parquet files; batch or stream",
        f"{RUNTIME}.files.source:read",
    ),
    ConnectorInfo(
        "files",
        "sink",
        "storage",
        FilesSinkConfig,
        "parquet, csv, jsonl, json or avro files, local or s3://",
        f"{RUNTIME}.files.sink:FilesSink",
        location=lambda config: config.path,
        holds="files",
    ),
)
