"""Spark's tasks write a batch's files straight to the table's location; the rivc process gets
their descriptions back and commits them (Delta, Iceberg) or lists them (files).

Each task of `df.mapInArrow` streams its rows into Parquet through the filesystem layer
(rivc.adapters.util.storage), one file per partition value (rolled at `max_bytes`), and yields one
row per file: where, rows, bytes (counted from the output stream, not a listing) and footer
statistics. Only those rows come back to rivc, so the same code serves a local Spark, a cluster
and a Spark Connect server that cannot see rivc's disk. Files sit under a prefix of their own
(`rivc-<what>-<uuid>/`), removed whole when the write or its commit fails.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..util.storage import Store, is_local, join
from .base import footer_stats, spark_write

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

DESCRIPTION = "rel string, partition string, rows long, size long, stats string, mtime long"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Written:
    """One file a task wrote, relative to the table's root."""

    rel: str
    partition: dict[str, str | None]
    rows: int
    size: int
    stats: dict[str, Any]
    mtime_ms: int


APART = "_rivc_apart"  # write_parquet's `apart`: a partition of the write the table never sees


def met_apart(path: str) -> bool:
    """Whether a file `write_parquet` wrote with `apart` holds the rows that meet it."""
    return f"/{APART}=true/" in path


def prefix(what: str) -> str:
    return f"rivc-{what}-{uuid.uuid4().hex[:12]}"


def write_parquet(
    df: DataFrame,
    uri: str,
    store: Store,
    where: str,
    codec: str = "snappy",
    partition_by: tuple[str, ...] = (),
    max_bytes: int | None = None,
    apart: str | None = None,
) -> list[Written]:
    """Have Spark's tasks write `df` under `uri`/`where`/ and return what they wrote. On any
    failure the prefix is removed and the error raised. With `apart` (a condition), the rows
    that meet it and the others go to separate files, in one pass over `df` (a partition of
    the write, `where`/_rivc_apart=true/ and =false/, that no commit records).

    A table on a disk (a local Spark's, or a `file://` location, which compile lets a remote
    Spark have only as the promise that every machine mounts it at the same place) is written
    by Spark's own Parquet writer (no Python worker: measured 2-4x faster for small batches on a
    fresh session, and 2x at 20M rows on a cluster's executors, docs/performance.md) unless
    files roll at `max_bytes` (Spark's writer rolls by rows only); everything else (object
    stores) runs rivc's task, which
    reaches any store and rolls a file once it reaches `max_bytes` (checked after each Arrow
    batch Spark hands it, up to 10,000 rows). Brotli always takes rivc's task: Spark's writer
    has no brotli codec without Hadoop's native library."""
    if apart is not None:
        from pyspark.sql import functions as F

        marked = df.withColumn(APART, F.expr(f"coalesce({apart}, false)"))
        written = write_parquet(marked, uri, store, where, codec, (APART, *partition_by), max_bytes)
        return [
            replace(w, partition={k: v for k, v in w.partition.items() if k != APART})
            for w in written
        ]
    if is_local(uri) and not max_bytes and codec != "brotli":
        target = Path(uri) / where
        try:
            files = spark_write(df, target, codec, list(partition_by))
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return [
            Written(
                f"{where}/{f.rel}",
                f.partition,
                f.rows,
                f.size,
                f.stats,
                int(f.path.stat().st_mtime * 1000),
            )
            for f in files
        ]
    try:
        return task_write(df, uri, store, where, codec, partition_by, max_bytes)
    except BaseException:
        store.remove_tree(join(uri, where))
        raise


def task_write(
    df: DataFrame,
    uri: str,
    store: Store,
    where: str,
    codec: str = "snappy",
    partition_by: tuple[str, ...] = (),
    max_bytes: int | None = None,
) -> list[Written]:
    """rivc's task writer: each task of `df.mapInArrow` writes its rows under `uri`/`where`/ and
    describes its files. Decimal columns of up to 18 digits cross from the JVM to the tasks as
    their unscaled 64-bit integers (Spark's own compact form) and are decimals again in Arrow:
    Spark converts a decimal to Arrow through a Java BigDecimal per value, which made a
    decimal(18,2) column cost as much as two bigint columns (docs/performance.md)."""
    df, decimals = _compact_decimals(df)
    task = _Task(uri, store, where, codec, tuple(partition_by), max_bytes, decimals)
    rows = df.mapInArrow(task, DESCRIPTION).collect()
    return sorted(
        (
            Written(r.rel, json.loads(r.partition), r.rows, r.size, json.loads(r.stats), r.mtime)
            for r in rows
        ),
        key=lambda w: w.rel,
    )


Decimals = tuple[tuple[str, int, int], ...]  # (column, precision, scale) sent unscaled


def _compact_decimals(df: DataFrame) -> tuple[DataFrame, Decimals]:
    """`df` with each top-level decimal column of up to 18 digits as its unscaled bigint (exact:
    below 10^18 < 2^63), and those columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    decimals = tuple(
        (f.name, f.dataType.precision, f.dataType.scale)
        for f in df.schema.fields
        if isinstance(f.dataType, DecimalType) and f.dataType.precision <= 18
    )
    if not decimals:
        return df, ()
    unscaled = {
        name: F.expr(f"CAST({_quoted(name)} * {10**scale} AS BIGINT)").alias(name)
        for name, _, scale in decimals
    }
    return df.select(*[unscaled.get(n, F.col(_quoted(n))) for n in df.columns]), decimals


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _decimals_back(batch: pa.RecordBatch, decimals: Decimals) -> pa.RecordBatch:
    """The unscaled bigints of `decimals` as the decimal128 values they stand for: each 64-bit
    integer sign-extended to the 128 bits of Arrow's decimal, the validity bitmap kept."""
    import numpy as np
    import pyarrow as pa

    arrays, fields = list(batch.columns), list(batch.schema)
    for name, precision, scale in decimals:
        i = batch.schema.get_field_index(name)
        col = arrays[i]
        validity, data = col.buffers()
        low = np.frombuffer(data, dtype="<i8", count=len(col) + col.offset)
        wide = np.empty((low.size, 2), dtype="<i8")
        wide[:, 0] = low
        wide[:, 1] = low >> 63
        kind = pa.decimal128(precision, scale)
        arrays[i] = pa.Array.from_buffers(
            kind, len(col), [validity, pa.py_buffer(wide)], col.null_count, col.offset
        )
        fields[i] = fields[i].with_type(kind)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, batch.schema.metadata))


def partition_value(value: Any) -> str | None:
    """A partition value as Delta's log and Hive paths hold it."""
    from datetime import date, datetime

    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


@dataclass(frozen=True)
class _Task:
    """What each Spark task runs (pickled to the executors with the store's options)."""

    uri: str
    store: Store
    where: str
    codec: str
    partition_by: tuple[str, ...]
    max_bytes: int | None
    decimals: Decimals = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        fs, root = self.store.filesystem(self.uri)
        open_files: dict[tuple[str | None, ...], _File] = {}
        done: list[dict[str, Any]] = []
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if self.decimals:
                    batch = _decimals_back(batch, self.decimals)
                for key, part in self._split(pa.Table.from_batches([batch])):
                    # with a target file size, every 10,000 rows are flushed so the file's
                    # size is known, and it rolls once it holds that much
                    step = ROLL_ROWS if self.max_bytes else max(part.num_rows, 1)
                    for at in range(0, part.num_rows, step):
                        f = open_files.get(key)
                        if f is None:
                            f = open_files[key] = _File.open(
                                fs, root, self._dir(key), part.schema, self.codec
                            )
                        f.write(part.slice(at, step), flush=bool(self.max_bytes))
                        if self.max_bytes and f.stream.tell() >= self.max_bytes:
                            done.append(self._close(open_files.pop(key), key))
            for key in list(open_files):
                done.append(self._close(open_files.pop(key), key))
        finally:
            for f in open_files.values():
                f.abandon()
        if done:
            yield pa.RecordBatch.from_pylist(done, schema=_description_schema())

    def _dir(self, key: tuple[str | None, ...]) -> str:
        parts = [self.where]  # directory names are for people: readers take values from the log
        for col, value in zip(self.partition_by, key, strict=True):
            shown = NULL_PARTITION if value is None else _UNSAFE.sub("_", value)[:64]
            parts.append(f"{_UNSAFE.sub('_', col)}={shown}")
        return "/".join(parts)

    def _split(self, table: pa.Table) -> Iterator[tuple[tuple[str | None, ...], pa.Table]]:
        if not self.partition_by:
            yield (), table
            return
        import pyarrow.compute as pc

        cols = list(self.partition_by)
        keys = table.select(cols).group_by(cols, use_threads=False).aggregate([])
        for row in keys.to_pylist():
            mask = None
            for col in cols:
                value = row[col]
                m = pc.is_null(table[col]) if value is None else pc.equal(table[col], value)
                mask = m if mask is None else pc.and_(mask, m)
            part = table.filter(mask).drop_columns(cols)
            yield tuple(partition_value(row[c]) for c in cols), part

    def _close(self, f: _File, key: tuple[str | None, ...]) -> dict[str, Any]:
        rows, size, stats = f.close()
        return {
            "rel": f.rel,
            "partition": json.dumps(dict(zip(self.partition_by, key, strict=True))),
            "rows": rows,
            "size": size,
            "stats": json.dumps(stats, allow_nan=False),
            "mtime": int(time.time() * 1000),
        }


ROLL_ROWS = 10_000  # with a target file size: rows written between two looks at the size
ROW_GROUP_ROWS = 1 << 20  # Spark's batches (10,000 rows) gathered into row groups of this many
ROW_GROUP_BYTES = 64 << 20  # ... or of this much Arrow memory, whichever comes first


class _File:
    def __init__(self, fs: Any, path: str, rel: str, stream: Any, writer: Any) -> None:
        self.fs, self.path, self.rel, self.stream, self.writer = fs, path, rel, stream, writer
        self.held: list[pa.Table] = []  # batches not written yet: the next row group
        self.rows = self.bytes = 0

    @classmethod
    def open(cls, fs: Any, root: str, directory: str, schema: pa.Schema, codec: str) -> _File:
        import pyarrow.parquet as pq

        rel = f"{directory}/part-{uuid.uuid4().hex}.parquet"
        path = f"{root.rstrip('/')}/{rel}"
        if directory:
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        stream = fs.open_output_stream(path, compression=None)
        return cls(fs, path, rel, stream, pq.ParquetWriter(stream, schema, compression=codec))

    def write(self, table: pa.Table, flush: bool = False) -> None:
        """Add rows; a row group is written once enough are held (a row group per Spark batch
        made files of 10,000-row groups, slower to write and to read)."""
        self.held.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes
        if flush or self.rows >= ROW_GROUP_ROWS or self.bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.held:
            whole = pa.concat_tables(self.held)
            self.writer.write_table(whole, row_group_size=max(whole.num_rows, 1))
        self.held, self.rows, self.bytes = [], 0, 0

    def close(self) -> tuple[int, int, dict[str, Any]]:
        self._flush()
        self.writer.close()
        meta = self.writer.writer.metadata
        size = self.stream.tell()
        self.stream.close()  # on an object store the upload completes here
        rows, stats = footer_stats(meta, self.writer.schema)
        return rows, size, stats

    def abandon(self) -> None:
        try:
            self.writer.close()
            self.stream.close()
            self.fs.delete_file(self.path)
        except Exception:  # noqa: BLE001  (the task is failing already; the prefix goes too)
            pass


def _description_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("rel", pa.string()),
            ("partition", pa.string()),
            ("rows", pa.int64()),
            ("size", pa.int64()),
            ("stats", pa.string()),
            ("mtime", pa.int64()),
        ]
    )
