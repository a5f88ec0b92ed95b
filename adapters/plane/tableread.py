"""Spark's tasks read a table's data files through the filesystem layer.

A lakehouse table is a list of Parquet files (with partition values for Delta, whose files leave
the partition columns out). rivc reads that list from the table's log in its own process,
prunes it with the filters it knows, and hands it to `rivc_files`, a Python data source whose
tasks open the files with pyarrow (rivc.adapters.util.storage), on a local Spark, a cluster or a
Spark Connect server alike. No row passes through rivc.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..util.storage import Store, is_local, shares_disk
from .base import register_data_source

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

FORMAT = "rivc_files"
TARGET_SPLIT = 128 << 20  # bytes of files one task reads


@dataclass(frozen=True)
class DataFile:
    uri: str
    size: int
    partition: dict[str, str | None]


def read_files(
    spark: SparkSession, files: list[DataFile], schema: pa.Schema, store: Store
) -> DataFrame:
    """A DataFrame of `files` with the table's `schema` (partition columns filled from the
    file's partition values). A local Spark reading local files uses Spark's own Parquet reader
    (no Python process to start); anything else rivc's data source."""
    if shares_disk(spark) and all(is_local(f.uri) for f in files):
        return _read_local(spark, files, schema)
    return _load(spark, files, schema, store)


def _load(
    spark: SparkSession,
    files: list[DataFile],
    schema: pa.Schema,
    store: Store,
    lines: dict[str, Any] | None = None,
) -> DataFrame:
    """`files` through the `rivc_files` data source: Parquet in `schema`, or with `lines`
    (read_lines_group's options) their text lines."""
    from pyspark.sql.pandas.types import from_arrow_schema

    register(spark)
    payload = {
        "files": [[f.uri, f.size, f.partition] for f in files],
        "schema": _schema_bytes(schema),
        "lines": lines,
    }
    return (
        spark.read.format(FORMAT)
        .schema(from_arrow_schema(schema))
        .option("files", json.dumps(payload))
        .option("storage_secret", json.dumps(store.options))  # "secret": Spark redacts it
        .load()
    )


def read_lines(
    spark: SparkSession, files: list[DataFile], store: Store, skip_header: bool = False
) -> DataFrame:
    """The text lines of `files` as a `value` column, read by Spark's tasks through the
    filesystem layer (compressed files by their extension: .gz, .bz2, .zst, .lz4), with the
    files' partition values as string columns; blank lines are left out, as Spark's JSON and
    CSV readers leave them, and with `skip_header` each file's first line."""
    import pyarrow as pa

    parts = sorted({k for f in files for k in f.partition})
    schema = pa.schema([("value", pa.string()), *((k, pa.string()) for k in parts)])
    return _load(spark, files, schema, store, {"skip_header": skip_header})


def _read_local(spark: SparkSession, files: list[DataFile], schema: pa.Schema) -> DataFrame:
    """Spark's Parquet reader over local files, one read per partition value, unioned."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type

    parts = sorted({k for f in files for k in f.partition})
    stored = pa.schema([f for f in schema if f.name not in parts])
    groups: dict[tuple[str | None, ...], list[str]] = {}
    for f in files:
        groups.setdefault(tuple(f.partition.get(c) for c in parts), []).append(f.uri)
    frames = []
    for values, uris in groups.items():
        df = spark.read.schema(from_arrow_schema(stored)).parquet(*uris)
        for col, value in zip(parts, values, strict=True):
            t = from_arrow_type(schema.field(col).type)
            df = df.withColumn(col, F.lit(value).cast(t))
        frames.append(df.select(*schema.names))
    if not frames:
        return spark.createDataFrame([], from_arrow_schema(schema))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def register(spark: SparkSession) -> None:
    register_data_source(spark, _source_class())


def _schema_bytes(schema: pa.Schema) -> str:
    import base64

    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _source_class() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FilesReader(DataSourceReader):
        def __init__(self, options: Mapping[str, str]) -> None:
            payload = json.loads(options["files"])
            self.files = payload["files"]
            self.schema_b64 = payload["schema"]
            self.lines = payload.get("lines")
            self.store = Store(json.loads(options.get("storage_secret", "{}")))

        def partitions(self) -> list[InputPartition]:
            groups: list[list[Any]] = [[]]
            size = 0
            for f in self.files:
                if groups[-1] and size + f[1] > TARGET_SPLIT:
                    groups.append([])
                    size = 0
                groups[-1].append(f)
                size += f[1]
            return [InputPartition(g) for g in groups if g]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            import base64

            import pyarrow as pa

            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_b64)))
            files = [DataFile(uri, size, part) for uri, size, part in partition.value]
            if self.lines is not None:
                yield from read_lines_group(files, schema, self.store, **self.lines)
            else:
                yield from read_group(files, schema, self.store)

    class FilesSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FORMAT

        def reader(self, schema: Any) -> DataSourceReader:
            return FilesReader(self.options)

    return FilesSource


def read_group(
    files: list[DataFile], schema: pa.Schema, store: Store, batch_size: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """What one task reads (and `rivc show`, in rivc's process): each file's record batches in
    the table's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in files:
        uri, partition = f.uri, f.partition
        fs, path = store.filesystem(uri)
        with fs.open_input_file(path) as handle:
            pf = pq.ParquetFile(handle, pre_buffer=False)
            present = set(pf.schema_arrow.names)
            wanted = [n for n in schema.names if n in present]
            for batch in pf.iter_batches(batch_size=batch_size, columns=wanted):
                cols = []
                for field in schema:
                    if field.name in present:
                        cols.append(batch.column(field.name).cast(field.type))
                    elif field.name in partition:
                        cols.append(_constant(partition[field.name], field.type, batch.num_rows))
                    else:  # a column added to the table after this file was written
                        cols.append(pa.nulls(batch.num_rows, field.type))
                yield pa.RecordBatch.from_arrays(cols, schema=schema)


_LINE_END = re.compile(r"\r\n|\r|\n")


def read_lines_group(
    files: list[DataFile],
    schema: pa.Schema,
    store: Store,
    skip_header: bool = False,
    batch_rows: int = 65_536,
) -> Iterator[pa.RecordBatch]:
    """What one task of read_lines reads: each file's non-blank lines (\\n, \\r\\n or \\r),
    decoded as UTF-8, in batches, with the file's partition values."""
    import pyarrow as pa

    names = schema.names[1:]
    for f in files:
        fs, path = store.filesystem(f.uri)
        values = [f.partition.get(n) for n in names]

        def batch(lines: list[str], values: list[str | None] = values) -> pa.RecordBatch:
            cols = [pa.array(lines, pa.string())]
            cols += [pa.array([v] * len(lines), pa.string()) for v in values]
            return pa.RecordBatch.from_arrays(cols, schema=schema)

        pending: list[str] = []
        first = skip_header
        with fs.open_input_stream(path, compression="detect") as stream:
            rest = b""
            while True:
                chunk = stream.read(8 << 20)
                text = rest + chunk
                if chunk:
                    cut = max(text.rfind(b"\n"), text.rfind(b"\r"))
                    if cut < 0:
                        rest = text
                        continue
                    text, rest = text[: cut + 1], text[cut + 1 :]
                # only \n, \r\n and \r end a line, as for Spark (str.splitlines would also
                # split at U+2028 and others, which JSON strings may hold as they are)
                for line in _LINE_END.split(text.decode("utf-8", errors="replace")):
                    if first:
                        first = False
                        continue
                    if line.strip():
                        pending.append(line)
                if len(pending) >= batch_rows:
                    yield batch(pending)
                    pending = []
                if not chunk:
                    break
        if pending:
            yield batch(pending)


def _constant(value: str | None, type_: pa.DataType, rows: int) -> pa.Array:
    """A partition value (as Delta's log writes it) repeated for a batch."""
    import pyarrow as pa

    text = pa.array([value] * rows, pa.string())
    if pa.types.is_timestamp(type_) and type_.tz:  # the log holds UTC without an offset
        return text.cast(pa.timestamp(type_.unit)).cast(type_)
    return text.cast(type_)
