"""The files connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig, parse_size
from rivc.compiler.importers import aliases
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
    header: bool = True  # Rivven's include_header
    quote: str = Field('"', min_length=1, max_length=1)  # Rivven's quote_char
    null_value: str = ""
    always_quote: bool = False  # every value quoted (a NULL stays null_value, unquoted)
    line_ending: Literal["lf", "crlf"] = "lf"
    columns: StrList = ()  # the columns written, in this order (default: all, as they come)

    _tuple = field_validator("columns", mode="before")(_as_tuple)


class ParquetOptions(Spec):
    """Parquet's writer settings beyond the codec and the row group (`compression`,
    `row_group_size`)."""

    enable_statistics: bool = True  # min/max/null counts in the footer
    data_page_size: int | None = Field(None, gt=0)  # bytes (Arrow's default: 1 MiB)
    dictionary_page_size: int | None = Field(None, gt=0)  # bytes before plain encoding


TEXT_CODECS = ("gzip", "zstd", "snappy", "lz4")  # a text file compressed whole (.gz, .zst, ...)
CODECS = {
    "parquet": ("snappy", "zstd", "gzip", "lz4", "brotli"),
    "avro": ("snappy", "zstd", "deflate"),
    "csv": TEXT_CODECS,
    "jsonl": TEXT_CODECS,
    "json": TEXT_CODECS,
}
LEVELLED = ("gzip", "zstd", "brotli", "deflate")


class FilesSinkConfig(SinkConfig):
    path: Location
    format: Literal["parquet", "csv", "jsonl", "json", "avro"] = "parquet"
    # append: every batch adds its files; overwrite: a batch's files replace the earlier ones
    mode: Literal["append", "overwrite"] = "append"
    compression: Literal["snappy", "zstd", "gzip", "lz4", "brotli", "deflate", "none"] | None = None
    compression_level: int | None = None  # the codec's level (gzip, zstd, brotli, deflate)
    row_group_size: int | None = Field(None, gt=0)
    partitioning: Literal["none", "day", "hour", "columns"] = "none"
    partition_by: StrList = ()
    time_column: str | None = None
    max_file_size: int | str | None = None
    csv: CsvOptions = CsvOptions()
    parquet: ParquetOptions = ParquetOptions()
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
        codecs = CODECS[self.format]
        if self.compression not in (None, "none", *codecs):
            raise ValueError(f"{self.format} files take compression {', '.join(codecs)} or none")
        if self.compression_level is not None and self.compression not in LEVELLED:
            raise ValueError(
                f"compression_level is for compression {', '.join(LEVELLED)}, "
                f"not {self.compression or 'the default'}"
            )
        if self.format != "csv" and self.csv != CsvOptions():
            raise ValueError("csv: is for format csv")
        if self.format != "parquet" and self.parquet != ParquetOptions():
            raise ValueError("parquet: is for format parquet")
        return self

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        out = super().input_columns()
        if self.csv.columns:
            out["csv.columns"] = self.csv.columns
        return out

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
        aliases=aliases.files_sink,
        location=lambda config: config.path,
        holds="files",
    ),
)
