"""Files: the `files` source (a directory read by Spark) and the `files` sink (written with pyarrow)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from rivc.compiler.connectors import FilesSinkConfig, FilesSourceConfig
from rivc.compiler.errors import ConnectorError

from .base import SINKS, Sink, WriteResult, stream

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession

SPARK_FORMATS = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet"}


def read_source(
    spark: SparkSession, path: str, cfg: FilesSourceConfig, columns: dict[str, str], stream: bool
) -> DataFrame:
    """Declared columns become the schema; without them Spark infers one (streams too)."""
    fmt = SPARK_FORMATS[cfg.format]
    options: dict[str, str] = {
        k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in cfg.options.items()
    }
    if fmt == "csv":
        options = {"header": str(cfg.header).lower(), "sep": cfg.delimiter, **options}
    if not Path(path).exists() and "://" not in path:
        raise ConnectorError(f"files source: {path} does not exist")
    schema = ", ".join(f"`{k}` {v}" for k, v in columns.items()) if columns else None
    if stream:
        if schema is None:  # a stream needs a schema up front: take the one Spark infers now
            schema = spark.read.format(fmt).options(**options).load(path).schema.simpleString()
            schema = schema.removeprefix("struct<").removesuffix(">").replace(":", " ")
        reader = spark.readStream.format(fmt).options(**options).schema(schema)
        if cfg.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", cfg.max_files_per_trigger)
        return reader.load(path)
    reader = spark.read.format(fmt).options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(path)


@SINKS.register("files")
class FilesSink(Sink):
    """One file per batch and part, named from the batch id: a replayed batch rewrites the same
    files instead of adding new ones. Each file is written under a hidden name, then renamed."""

    config: FilesSinkConfig

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        c = self.config
        if c.format != "parquet" or c.partitioning != "none" or "://" in c.path:
            raise ConnectorError(
                f"sink {self.ctx.sink}: files sinks write local parquet without partitioning so far "
                f"(format {c.format}, partitioning {c.partitioning}, path {c.path})"
            )
        import pyarrow.parquet as pq

        directory = Path(self.ctx.path(c.path))
        directory.mkdir(parents=True, exist_ok=True)
        rows = data.count_rows()
        if rows == 0 and c.mode == "append":
            return WriteResult()
        final = directory / f"batch-{batch_id:06d}-part-0000.parquet"
        tmp = directory / f".{final.name}.tmp"
        with pq.ParquetWriter(tmp, data.schema, compression=c.compression or "snappy") as out:
            for batch in stream(data):
                out.write_batch(batch, row_group_size=c.row_group_size)
        os.replace(tmp, final)
        if c.mode == "overwrite":  # the new batch is in place; now drop the earlier ones
            for old in directory.glob("batch-*"):
                if old != final:
                    old.unlink()
        size = final.stat().st_size
        return WriteResult(rows=rows, bytes=size, files=[(str(final), rows, size)])
