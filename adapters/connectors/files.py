"""Files: the `files` source (a directory read by Spark) and the `files` sink (written with pyarrow)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector_specs import FilesSinkConfig, FilesSourceConfig, parse_size
from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import quote

from ..plane.base import JSON_OPTIONS, Sink, SourceContext, WriteResult, stream
from ..util.storage import Store, is_local, resolve, shares_disk

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession

SPARK_FORMATS = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet"}


def read(spark: SparkSession, ctx: SourceContext) -> DataFrame:
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

    from ..plane.tableread import DataFile, read_files, read_lines

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


EXTENSIONS = {
    "parquet": ".parquet",
    "csv": ".csv",
    "jsonl": ".jsonl",
    "json": ".json",
    "avro": ".avro",
}
COMPRESSED = {"gzip": ".gz", "zstd": ".zst"}
SLICE_ROWS = 1_000  # most rows per write when max_file_size is set
BINARY = ("parquet", "avro")  # formats that compress inside the file


_BATCH_NAME = re.compile(r"batch-(\d+)-part-")
_COMMIT = re.compile(r"commit-(\d+)$")
MARKERS = "_rivc"  # under a files sink's location: its writer and its batches' commit markers


class FilesSink(Sink):
    """Files named from the batch id (`batch-<id>-part-<n>`), each written under a hidden name,
    then renamed, so a reader never sees half a file. A batch is committed by its marker,
    `_rivc/commit-<id>` (JSON), written after its files: it holds the places of what the batch
    consumed. A replayed batch whose marker exists is skipped; one without (a killed write may
    have left part of its files) is written again under the same names."""

    config: FilesSinkConfig

    @property
    def store(self) -> Store:
        uri = self.ctx.path(self.config.path)
        return Store.of(uri, dict(self.ctx.storage), dict(self.config.storage_options))

    def preview(self, limit: int) -> Any | None:
        """Parquet files read back (hive partitions as columns); other formats show their
        input."""
        if self.config.format != "parquet":
            return None
        import pyarrow.dataset as pads

        uri = self.ctx.path(self.config.path)
        store = self.store
        if not store.files(uri, ".parquet"):
            return None
        fs, path = store.filesystem(uri)
        return pads.dataset(path, filesystem=fs, format="parquet", partitioning="hive").head(limit)

    def _listing(self) -> list[Any] | None:
        import pyarrow.fs as pafs

        fs, base = self.store.filesystem(self.ctx.path(self.config.path))
        try:
            return list(fs.get_file_info(pafs.FileSelector(base, recursive=True)))
        except (FileNotFoundError, NotADirectoryError):
            return None  # nothing written yet; a path that is a file fails at the write

    def last_batch_id(self) -> int | None:
        """The highest batch id in the location's file names and commit markers: new batches
        start above it even when the state store was reset, or is a detached job's own, and
        never rewrite an earlier batch's files."""
        import pyarrow.fs as pafs

        infos = self._listing() or []
        names = [i.base_name for i in infos if i.type == pafs.FileType.File]
        found = [int(m[1]) for n in names if (m := _BATCH_NAME.match(n) or _COMMIT.match(n))]
        return max(found, default=None)

    def _markers(self) -> dict[int, str]:
        import pyarrow.fs as pafs

        infos = self._listing() or []
        return {
            int(m[1]): i.path
            for i in infos
            if i.type == pafs.FileType.File and (m := _COMMIT.match(i.base_name))
        }

    def committed(self, batch_id: int) -> bool:
        return batch_id in self._markers()

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        markers = self._markers()
        found: dict[str, Any] = {}
        if markers:
            fs, _ = self.store.filesystem(self.ctx.path(self.config.path))
            with fs.open_input_stream(markers[max(markers)], compression=None) as handle:
                found = json.loads(handle.read()).get("places", {})
        return {i: found.get(self.ctx.place_id(i)) for i in inputs}

    def writer(self) -> str | None:
        fs, base = self.store.filesystem(self.ctx.path(self.config.path))
        path = f"{base.rstrip('/')}/{MARKERS}/writer"
        try:
            with fs.open_input_stream(path, compression=None) as handle:
                return handle.read().decode().strip() or None
        except (FileNotFoundError, NotADirectoryError, OSError):
            return None

    def record_places(self, batch_id: int) -> None:
        location = Location(self.config.path, self.ctx.root, self.store)
        self._commit(location, batch_id, [], keep=True)

    def _claim(self, location: Location) -> None:
        """Refuse a location another project writes; record ours in one that names none."""
        if self.ctx.claim(self.writer(), self.ctx.path(self.config.path)):
            _write_whole(location, f"{MARKERS}/writer", self.ctx.writer.encode())

    def _commit(
        self, location: Location, batch_id: int, written: list[Any], keep: bool = False
    ) -> None:
        """The batch's marker, after its files: the batch is committed once it exists. In
        overwrite mode the older markers go (unless `keep`: a marker without files)."""
        body = {
            "batch": batch_id,
            "writer": self.ctx.writer,
            "places": {self.ctx.place_id(k): v for k, v in self.ctx.places.items()},
            "files": [p for p, _, _ in written],
        }
        _write_whole(location, f"{MARKERS}/commit-{batch_id:06d}", json.dumps(body).encode())
        if self.config.mode == "overwrite" and not keep:  # the newest batch is the data
            for older, path in self._markers().items():
                if older != batch_id:
                    location.fs.delete_file(path)

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        c = self.config
        location = Location(c.path, self.ctx.root, self.store)
        self._claim(location)
        rows = data.count_rows()
        written: list[tuple[str, int | None, int]] = []
        if rows or c.mode == "overwrite":
            limit = parse_size(c.max_file_size) if c.max_file_size is not None else None
            name = c.avro_record_name or self.ctx.sink
            with _Parts(location, c, batch_id, data.schema, limit, name) as parts:
                for batch in stream(data):
                    parts.write(batch)
                if not rows:
                    parts.write(None)  # an empty result still replaces the old one
            written = parts.files
        if c.mode == "overwrite":  # the new batch is in place; now drop the earlier ones
            keep = {p for p, _, _ in written}
            location.delete([p for p in location.batch_files() if p not in keep])
        self._commit(location, batch_id, written)
        return WriteResult(rows=rows, bytes=sum(b for _, _, b in written), files=written)

    def write_spark(self, df: Any, batch_id: int) -> WriteResult | None:
        """On a remote Spark or an object store: Spark's tasks write the batch's files straight
        to the location, each under names of its own (`batch-<id>-part-<task>-<n>`), and return
        what they wrote; then the files of this batch id that a replay did not write again
        (and, for overwrite, the earlier batches' files) are deleted. A local Spark writing a
        local directory takes the staged path (measured faster: no Python workers to start)."""

        c = self.config
        uri = self.ctx.path(c.path)
        if shares_disk(df) and is_local(uri):
            return None
        limit = parse_size(c.max_file_size) if c.max_file_size is not None else None
        location = Location(uri, self.ctx.root, self.store)
        self._claim(location)
        task = _FilesTask(c, uri, self.store, batch_id, c.avro_record_name or self.ctx.sink, limit)
        written = [
            (r.uri, r.rows, r.size)
            for r in df.mapInArrow(task, "uri string, rows long, size long").collect()
        ]
        if not written:
            return None  # an empty batch: the driver path writes what an empty result needs
        keep = {p for p, _, _ in written}
        mine = f"batch-{batch_id:06d}-"
        location.delete(
            [
                p
                for p in location.batch_files()
                if p not in keep
                and (c.mode == "overwrite" or p.rsplit("/", 1)[-1].startswith(mine))
            ]
        )
        self._commit(location, batch_id, written)
        return WriteResult(
            rows=sum(r for _, r, _ in written),
            bytes=sum(b for _, _, b in written),
            files=sorted(written),
        )

    def adopt(self, paths: list[str], batch_id: int) -> WriteResult | None:
        """Parquet files already on this machine (an extracted table) in the sink's codec, for an
        unpartitioned local directory: hard-link each under its batch file name (a copy where
        links cannot cross filesystems), without reading a row."""
        import pyarrow.parquet as pq

        c = self.config
        plain = c.format == "parquet" and c.partitioning == "none" and c.max_file_size is None
        if not plain or "://" in c.path or c.row_group_size or not paths:
            return None
        sources = [Path(p.removeprefix("file://")) for p in paths]
        meta = pq.ParquetFile(sources[0]).metadata
        codec = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else ""
        if codec != (c.compression or "snappy").replace("none", "uncompressed"):
            return None
        location = Location(c.path, self.ctx.root, self.store)
        self._claim(location)
        written: list[tuple[str, int | None, int]] = []
        for n, src in enumerate(sources):
            final = Path(location.base) / f"batch-{batch_id:06d}-part-{n:04d}.parquet"
            tmp = final.with_name(f".{final.name}.tmp")
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
            os.replace(tmp, final)
            written.append(
                (str(final), pq.ParquetFile(final).metadata.num_rows, final.stat().st_size)
            )
        if c.mode == "overwrite":
            keep = {p for p, _, _ in written}
            location.delete([p for p in location.batch_files() if p not in keep])
        self._commit(location, batch_id, written)
        return WriteResult(
            rows=sum(r or 0 for _, r, _ in written),
            bytes=sum(b for _, _, b in written),
            files=written,
        )


@dataclass(frozen=True)
class _FilesTask:
    """What each Spark task of `FilesSink.write_spark` runs (pickled with the store)."""

    config: FilesSinkConfig
    uri: str
    store: Store
    batch_id: int
    record_name: str
    limit: int | None

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        location = Location(self.uri, Path("/"), self.store)
        parts: _Parts | None = None
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                batch = _in_utc(batch)
                if parts is None:
                    parts = _Parts(
                        location,
                        self.config,
                        self.batch_id,
                        batch.schema,
                        self.limit,
                        self.record_name,
                        task,
                    )
                parts.write(batch)
        except BaseException:
            if parts is not None:
                parts.__exit__(RuntimeError, None, None)  # abandon the open files
            raise
        if parts is None:
            return
        parts.__exit__(None, None, None)
        yield pa.RecordBatch.from_pylist(
            [{"uri": u, "rows": r, "size": b} for u, r, b in parts.files],
            schema=pa.schema([("uri", pa.string()), ("rows", pa.int64()), ("size", pa.int64())]),
        )


def _in_utc(batch: Any) -> Any:
    """Spark hands a task its timestamps in the session's time zone; files hold them in UTC, as
    the staged path does."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, pa.timestamp(f.type.unit, "UTC"), f.nullable)
        if pa.types.is_timestamp(f.type) and f.type.tz
        else f
        for f in batch.schema
    ]
    return batch.cast(pa.schema(fields)) if fields != list(batch.schema) else batch


class Location:
    """Where a files sink writes. A local directory: each file is written under a hidden name and
    renamed. An object store (s3://, gs://, abfss://): a multipart upload, which the store shows
    only once it is complete. Credentials come from the filesystem layer (rivc.adapters.util.storage):
    the environment, the profile's `storage:`, then the sink's `storage_options`."""

    def __init__(self, path: str, root: Path, store: Store) -> None:
        uri = resolve(path, root)
        self.object_store = not is_local(uri)
        self.fs, base = store.filesystem(uri)
        self.base = base.rstrip("/")
        self.prefix = uri[: len(uri) - len(base)] if self.object_store else ""  # "s3://", "gs://"
        if not self.object_store:
            Path(self.base).mkdir(parents=True, exist_ok=True)

    def uri(self, rel: str) -> str:
        return f"{self.prefix}{self.base}/{rel}"

    def open(self, rel: str) -> tuple[Any, Callable[[], int], Callable[[], None]]:
        """(stream, commit -> size, abort) for the file `rel` under the location."""
        final = f"{self.base}/{rel}"
        if self.object_store:
            out = self.fs.open_output_stream(final, compression=None)  # no codec by name
            return out, lambda: int(self.fs.get_file_info(final).size), lambda: None
        Path(final).parent.mkdir(parents=True, exist_ok=True)
        tmp = str(Path(final).with_name(f".{Path(final).name}.tmp"))
        out = self.fs.open_output_stream(tmp, compression=None)

        def commit() -> int:
            os.replace(tmp, final)
            return Path(final).stat().st_size

        return out, commit, lambda: Path(tmp).unlink(missing_ok=True)

    def batch_files(self) -> list[str]:
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.base, recursive=True))
        except FileNotFoundError:
            return []
        markers = f"{self.base}/{MARKERS}/"
        return [
            f"{self.prefix}{i.path}"
            for i in infos
            if i.type == pafs.FileType.File
            and i.base_name.startswith("batch-")
            and not i.path.startswith(markers)
        ]

    def delete(self, uris: list[str]) -> None:
        for uri in uris:
            self.fs.delete_file(uri.removeprefix(self.prefix))


def _write_whole(location: Location, rel: str, body: bytes) -> None:
    """A small file that appears whole or not at all (a rename here, one upload on a store)."""
    out, commit, abort = location.open(rel)
    try:
        out.write(body)
        out.close()
    except BaseException:
        abort()
        raise
    commit()


class _Parts:
    """Open files of one batch: one per partition directory, rolled over at max_file_size."""

    def __init__(
        self,
        location: Location,
        config: FilesSinkConfig,
        batch_id: int,
        schema: Any,
        limit: int | None,
        record_name: str,
        task: int | None = None,
    ) -> None:
        self.location, self.config, self.batch_id, self.limit = location, config, batch_id, limit
        self.record_name = record_name
        self.task = task  # a Spark task's partition: part of each name, so tasks never collide
        self.row_bytes = 100  # a first guess, replaced by what the files measure
        keys = set(config.partition_by)
        self.schema = schema
        self.data_schema = pa_schema([f for f in schema if f.name not in keys])
        self.open: dict[str, tuple[Any, Any, Any, int]] = {}  # dir -> (writer, commit, abort, rows)
        self.counters: dict[str, int] = {}
        self.files: list[tuple[str, int | None, int]] = []

    def __enter__(self) -> _Parts:
        return self

    def __exit__(self, *exc: object) -> None:
        failed = exc[0] is not None
        error: BaseException | None = None
        for key in list(self.open):
            try:
                self._close(key, failed=failed or error is not None)
            except BaseException as caught:  # the others are abandoned, then this is raised
                error = error or caught
        if error is not None and not failed:
            raise error

    def write(self, batch: Any) -> None:
        if batch is None:
            self._writer("").write(None)
            return
        for key, part in self._split(batch):
            start = 0
            while start < part.num_rows:
                piece = part.slice(start, self._step(part.num_rows))
                start += piece.num_rows
                writer = self._writer(key)
                writer.write(piece)
                rows = self.open[key][3] + piece.num_rows
                self.open[key] = (*self.open[key][:3], rows)
                if self.limit is not None:
                    self.row_bytes = max(1, writer.size() // max(1, rows))
                    if writer.size() >= self.limit:
                        self._close(key)

    def _step(self, rows: int) -> int:
        """Rows per write: all of them, or with a size limit, a slice that fills a quarter of
        a file at the measured bytes per row, so a file ends close to the limit."""
        if self.limit is None:
            return max(1, rows)
        return max(1, min(SLICE_ROWS, self.limit // (4 * self.row_bytes)))

    def _split(self, batch: Any) -> list[tuple[str, Any]]:
        """(directory under the sink's path, rows) for each partition the batch touches."""
        c = self.config
        if c.partitioning == "none":
            return [("", batch)]
        import pyarrow as pa
        import pyarrow.compute as pc

        table = pa.Table.from_batches([batch])
        if c.partitioning in ("day", "hour"):
            fmt = "dt=%Y-%m-%d" + ("/hour=%H" if c.partitioning == "hour" else "")
            if c.time_column:
                times = table[c.time_column]
                keys = pc.fill_null(pc.strftime(times, format=fmt), "dt=__HIVE_DEFAULT_PARTITION__")
            else:  # the batch's own time
                now = datetime.now(UTC).strftime(fmt)
                return [(now, batch)]
        else:
            parts = []
            for k in c.partition_by:
                text = pc.fill_null(pc.cast(table[k], pa.string()), "__HIVE_DEFAULT_PARTITION__")
                parts.append(pc.binary_join_element_wise(f"{k}=", text, ""))
            keys = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "/")
            table = table.drop_columns(list(c.partition_by))
        out = []
        for key in pc.unique(keys).to_pylist():
            part = table.filter(pc.equal(keys, key))
            out += [(key, b) for b in part.to_batches()]
        return out

    def _writer(self, key: str) -> Any:
        if key not in self.open:
            n = self.counters.get(key, 0)
            self.counters[key] = n + 1
            c = self.config
            ext = EXTENSIONS[c.format] + (
                COMPRESSED.get(c.compression or "", "") if c.format not in BINARY else ""
            )
            task = "" if self.task is None else f"{self.task:05d}-"
            name = f"batch-{self.batch_id:06d}-part-{task}{n:04d}{ext}"
            rel = f"{key}/{name}" if key else name
            out, commit, abort = self.location.open(rel)
            writer = _open_writer(out, c, self.data_schema, self.record_name)
            self.open[key] = (writer, (commit, rel), abort, 0)
        return self.open[key][0]

    def _close(self, key: str, failed: bool = False) -> None:
        writer, (commit, rel), abort, rows = self.open.pop(key)
        try:
            writer.close()  # a full disk often fails here, flushing the last pages
            if failed:
                return
            size = commit()
        except BaseException:
            failed = True
            raise
        finally:
            if failed:
                abort()  # no hidden half-written file is left behind
        self.files.append((self.location.uri(rel), rows, size))


def pa_schema(fields: list[Any]) -> Any:
    import pyarrow as pa

    return pa.schema(fields)


def _open_writer(out: Any, config: FilesSinkConfig, schema: Any, record_name: str) -> Any:
    if config.format == "parquet":
        return _ParquetFile(out, config, schema)
    if config.format == "avro":
        return _AvroFile(out, config, schema, record_name)
    return _TextFile(out, config, schema)


AVRO_CODECS = {None: "null", "none": "null", "snappy": "snappy", "zstd": "zstandard"}


def avro_schema(schema: Any, name: str, namespace: str) -> dict[str, Any]:
    """An Avro record schema for an Arrow schema; every field nullable, as Spark's columns are."""
    import pyarrow as pa

    counter = iter(range(1_000_000))

    def avro(t: Any) -> Any:
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_integer(t):
            return "long" if t.bit_width == 64 else "int"
        if pa.types.is_float32(t):
            return "float"
        if pa.types.is_floating(t):
            return "double"
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "string"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return "bytes"
        if pa.types.is_date(t):
            return {"type": "int", "logicalType": "date"}
        if pa.types.is_timestamp(t):
            return {"type": "long", "logicalType": "timestamp-micros"}
        if pa.types.is_decimal(t):
            return {
                "type": "bytes",
                "logicalType": "decimal",
                "precision": t.precision,
                "scale": t.scale,
            }
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return {"type": "array", "items": ["null", avro(t.value_type)]}
        if pa.types.is_struct(t):
            return record([t.field(i) for i in range(t.num_fields)], f"{name}_{next(counter)}")
        if pa.types.is_map(t):
            return {"type": "map", "values": ["null", avro(t.item_type)]}
        raise ConnectorError(f"no Avro type for the Arrow type {t}")

    def record(fields: list[Any], record_name: str) -> dict[str, Any]:
        return {
            "type": "record",
            "name": record_name,
            "fields": [
                {"name": f.name, "type": ["null", avro(f.type)], "default": None} for f in fields
            ],
        }

    return {**record(list(schema), name), "namespace": namespace}


class _AvroFile:
    def __init__(self, out: Any, config: FilesSinkConfig, schema: Any, name: str) -> None:
        import fastavro
        from fastavro.write import Writer

        self.fh = out
        parsed = fastavro.parse_schema(avro_schema(schema, name, config.avro_namespace))
        self.out = Writer(self.fh, parsed, codec=AVRO_CODECS[config.compression])

    def write(self, batch: Any) -> None:
        if batch is not None:
            for row in batch.to_pylist():
                self.out.write(row)
            self.out.flush()

    def size(self) -> int:
        return int(self.fh.tell())

    def close(self) -> None:
        self.out.flush()
        self.fh.close()


class _ParquetFile:
    def __init__(self, out: Any, config: FilesSinkConfig, schema: Any) -> None:
        import pyarrow.parquet as pq

        self.raw, self.row_group = out, config.row_group_size
        self.out = pq.ParquetWriter(out, schema, compression=config.compression or "snappy")

    def write(self, batch: Any) -> None:
        if batch is not None:
            self.out.write_batch(batch, row_group_size=self.row_group)

    def size(self) -> int:
        return int(self.raw.tell())

    def close(self) -> None:
        self.out.close()
        self.raw.close()


class _TextFile:
    """CSV, JSON lines or one JSON array; gzip or zstd through Arrow's compressed streams.
    Nested values (structs, lists, maps) are written as JSON text in CSV."""

    def __init__(self, raw: Any, config: FilesSinkConfig, schema: Any) -> None:
        import pyarrow as pa

        self.config, self.names, self.rows = config, schema.names, 0
        codec = config.compression if config.compression in ("gzip", "zstd") else None
        self.raw = raw
        self.out = pa.CompressedOutputStream(raw, codec) if codec else raw
        self.arrow: Any = None  # Arrow's CSV writer, when the quote is Arrow's own
        self.nested = [f.name for f in schema if pa.types.is_nested(f.type)]
        # Text has no IEEE floats or raw bytes: NaN/Infinity/-Infinity as words (valid JSON as
        # strings; what Spark, PostgreSQL and Java read in CSV), bytes as hex (docs/types.md)
        self.floats = [f.name for f in schema if pa.types.is_floating(f.type)]
        self.binary = [
            f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
        ]
        if config.format == "csv" and config.csv.quote == '"':
            import pyarrow.csv as pacsv

            as_text = {*self.nested, *self.floats, *self.binary}
            flat = pa.schema(
                [pa.field(f.name, pa.string()) if f.name in as_text else f for f in schema]
            )
            if config.csv.header:  # quoted only where needed, as the csv module does
                self._emit([self.names])
            options = pacsv.WriteOptions(
                include_header=False,
                delimiter=config.csv.delimiter,
                null_string=config.csv.null_value,
            )
            self.arrow = pacsv.CSVWriter(self.out, flat, write_options=options)
        elif config.format == "csv" and config.csv.header:
            self._emit([self.names])
        if config.format == "json":
            self.out.write(b"[")

    def write(self, batch: Any) -> None:
        if batch is None:
            return
        if self.arrow is not None:  # C++ all the way; nested values become JSON text first
            import pyarrow as pa

            for name in self.nested:
                i = batch.schema.get_field_index(name)
                cells = [
                    None if v is None else json.dumps(v, default=_jsonable, ensure_ascii=False)
                    for v in batch.column(i).to_pylist()
                ]
                batch = batch.set_column(i, name, pa.array(cells, pa.string()))
            for name in self.floats:
                i = batch.schema.get_field_index(name)
                batch = batch.set_column(i, name, _float_text(batch.column(i)))
            for name in self.binary:
                i = batch.schema.get_field_index(name)
                cells = [None if v is None else v.hex() for v in batch.column(i).to_pylist()]
                batch = batch.set_column(i, name, pa.array(cells, pa.string()))
            self.arrow.write_batch(batch)
            return
        rows = batch.to_pylist()
        if self.floats:
            for r in rows:
                for name in self.floats:
                    value = r[name]
                    if value is not None and not math.isfinite(value):
                        r[name] = _NON_FINITE[str(value)]
        fmt = self.config.format
        if fmt == "csv":
            self._emit([[self._cell(r[n]) for n in self.names] for r in rows])
            return
        text = "".join(
            ("" if fmt == "jsonl" or (self.rows == 0 and i == 0) else ",")
            + ("\n" if fmt == "json" else "")
            + json.dumps(r, default=_jsonable, ensure_ascii=False)
            + ("\n" if fmt == "jsonl" else "")
            for i, r in enumerate(rows)
        )
        self.rows += len(rows)
        self.out.write(text.encode())

    def _cell(self, value: Any) -> Any:
        if value is None:
            return self.config.csv.null_value
        if isinstance(value, dict | list):
            return json.dumps(value, default=_jsonable, ensure_ascii=False)
        if isinstance(value, bytes):
            return value.hex()
        return value

    def _emit(self, rows: list[list[Any]]) -> None:
        buffer = io.StringIO()
        writer = csv.writer(
            buffer,
            delimiter=self.config.csv.delimiter,
            quotechar=self.config.csv.quote,
            lineterminator="\n",
        )
        writer.writerows(rows)
        self.out.write(buffer.getvalue().encode())

    def size(self) -> int:
        return int(self.raw.tell())

    def close(self) -> None:
        if self.config.format == "json":
            self.out.write(b"\n]\n")
        if self.arrow is not None:
            self.arrow.close()
        self.out.close()


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _float_text(values: Any) -> Any:
    """Floats as text, the non-finite ones as NaN, Infinity and -Infinity."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = values.cast(pa.string())
    for arrow_word, word in _NON_FINITE.items():
        text = pc.if_else(pc.equal(text, arrow_word), word, text)
    return text


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)  # Decimal and the rest: their exact text
