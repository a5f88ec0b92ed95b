"""The `files` source: a directory of Parquet, CSV or JSON files read by Spark (or, on an
object store, by Spark's tasks through rivc's filesystem layer)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import quote

from ...plane.base import JSON_OPTIONS, SourceContext
from ...util.storage import Store, is_local
from .spec import FilesSourceConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SPARK_FORMATS = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet"}


def read(spark: SparkSession, ctx: SourceContext[FilesSourceConfig]) -> DataFrame:
    """The registry's entry point: a path relative to the project, or a URI. A batch on an
    object store is read by Spark's tasks through rivc's filesystem layer (`read_store`);
    a local path and a stream by Spark's own file readers."""
    cfg: FilesSourceConfig = ctx.config
    path = ctx.path(cfg.path)
    if not cfg.stream and not is_local(path):
        return read_store(spark, path, cfg, ctx.columns, Store.of(path, dict(ctx.storage)))
    return read_source(spark, path, cfg, ctx.columns, cfg.stream)


def read_store(
    spark: SparkSession, path: str, cfg: FilesSourceConfig, columns: dict[str, str], store: Store
) -> DataFrame:
    """Files on an object store, read by Spark's tasks with pyarrow's filesystems
    (rivc.adapters.plane.tableread), so a cluster needs no Hadoop connector for the store
    (hadoop-aws and the like). JSON and CSV lines are parsed by Spark's own `from_json` and
    `from_csv` with the declared columns and the source's options, the parsers of its file
    readers; Parquet files are read with pyarrow, and a declared type that is not the files'
    is refused. `key=value` directories give the declared columns of that name, as Spark's
    partition discovery does."""
    from urllib.parse import unquote

    from pyspark.sql import functions as F

    from ...plane.tableread import DataFile, read_files, read_lines

    fs, base = store.filesystem(path)
    info = fs.get_file_info(base)
    listed = [(path, info.size or 0)] if info.type.name == "File" else store.files(path)
    if not listed:
        raise ConnectorError(f"files source: {path} holds no files")
    files = []
    for uri, size in listed:
        dirs = uri[len(path.rstrip("/")) :].strip("/").split("/")[:-1]
        partition = {}
        for d in dirs:
            key, eq, value = d.partition("=")
            if eq:
                partition[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)
        files.append(DataFile(uri, size, partition))
    parts = sorted({k for f in files for k in f.partition})
    undeclared = [p for p in parts if p not in columns]
    if undeclared:
        raise ConnectorError(
            f"files source: {path} is partitioned by {undeclared[0]!r}, which is not a "
            "declared column (declare it with its type under columns:)"
        )
    fmt = SPARK_FORMATS[cfg.format]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        with fs.open_input_file(store.filesystem(files[0].uri)[1]) as handle:
            found = pq.read_schema(handle)
        schema = pa.schema(
            [f for f in found if f.name not in parts] + [(p, pa.string()) for p in parts]
        )
        df = read_files(spark, files, schema, store)
        if not columns:
            return df
        declared = spark.createDataFrame([], _ddl(columns)).schema
        out = []
        for field in declared.fields:
            if field.name in parts:
                out.append(F.col(field.name).cast(field.dataType))
            elif field.name not in df.columns:
                out.append(F.lit(None).cast(field.dataType).alias(field.name))
            else:
                have = df.schema[field.name].dataType
                if have != field.dataType:
                    raise ConnectorError(
                        f"files source: {path}: column {field.name!r} is declared "
                        f"{field.dataType.simpleString()} but the files hold "
                        f"{have.simpleString()}"
                    )
                out.append(F.col(field.name))
        return df.select(*out)
    options: dict[str, str] = {
        k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in cfg.options.items()
    }
    header = fmt == "csv" and options.pop("header", str(cfg.header)).lower() == "true"
    if fmt == "csv":
        options = {"sep": cfg.delimiter, **options}
    data = {k: v for k, v in columns.items() if k not in parts}
    if not columns:
        if fmt == "json":
            raise ConnectorError(
                f"files source: {path}: declare its columns (JSON on an object store is "
                "parsed by Spark's from_json, which infers no schema)"
            )
        data = _csv_header(fs, store.filesystem(files[0].uri)[1], options["sep"], header)
    lines = read_lines(spark, files, store, skip_header=header)
    ddl = _ddl(data)
    if fmt == "json":
        parsed = F.from_json("value", ddl, {**JSON_OPTIONS, **options})
    else:
        parsed = F.from_csv("value", ddl, options or None)  # an empty map has no string type
    df = lines.select(parsed.alias("_rivc_parsed"), *parts)
    order = columns or data
    return df.select(
        *[
            F.col(n).cast(t).alias(n) if n in parts else F.col(f"_rivc_parsed.{quote(n)}").alias(n)
            for n, t in order.items()
        ]
    )


def _ddl(columns: dict[str, str]) -> str:
    return ", ".join(f"{quote(k)} {v}" for k, v in columns.items())


def _csv_header(fs: Any, path: str, sep: str, header: bool) -> dict[str, str]:
    """Spark's CSV schema without declared columns: every column a string, named by the first
    file's header (or _c0, _c1, ... without one)."""
    with fs.open_input_stream(path, compression="detect") as stream:
        first = stream.read(1 << 20).decode("utf-8", errors="replace").splitlines()[:1]
    fields = next(csv.reader(first, delimiter=sep), []) if first else []
    names = fields if header else [f"_c{i}" for i in range(len(fields))]
    return {n: "string" for n in names}


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
    if fmt == "json":
        options = {**JSON_OPTIONS, **options}
    if not Path(path).exists() and "://" not in path:
        raise ConnectorError(f"files source: {path} does not exist")
    schema = ", ".join(f"{quote(k)} {v}" for k, v in columns.items()) if columns else None
    if stream:
        if schema is None:  # a stream needs a schema up front: take the one Spark infers now
            schema = spark.read.format(fmt).options(**options).load(path).schema.simpleString()
            schema = schema.removeprefix("struct<").removesuffix(">").replace(":", " ")
        streaming = spark.readStream.format(fmt).options(**options).schema(schema)
        if cfg.max_files_per_trigger:
            streaming = streaming.option("maxFilesPerTrigger", cfg.max_files_per_trigger)
        return streaming.load(path)
    reader = spark.read.format(fmt).options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(path)
