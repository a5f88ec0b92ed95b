"""The `files` sink: files written with pyarrow, named from the batch id, committed by a marker
(the formats are in formats.py, the source in source.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import parse_size

from ...plane.base import Can, Sink, WriteResult, stream
from ...util.storage import Store, is_local, resolve, shares_disk
from .formats import open_writer, pa_schema
from .spec import FilesSinkConfig

if TYPE_CHECKING:
    import pyarrow.dataset as pads

EXTENSIONS = {
    "parquet": ".parquet",
    "csv": ".csv",
    "jsonl": ".jsonl",
    "json": ".json",
    "avro": ".avro",
}
COMPRESSED = {"gzip": ".gz", "zstd": ".zst", "snappy": ".snappy", "lz4": ".lz4"}
SLICE_ROWS = 1_000  # most rows per write when max_file_size is set
BINARY = ("parquet", "avro")  # formats that compress inside the file


_BATCH_NAME = re.compile(r"batch-(\d+)-part-")
_COMMIT = re.compile(r"commit-(\d+)$")
MARKERS = "_rivc"  # under a files sink's location: its writer and its batches' commit markers


class FilesSink(Sink[FilesSinkConfig]):
    """Files named from the batch id (`batch-<id>-part-<n>`), each written under a hidden name,
    then renamed, so a reader never sees half a file. A batch is committed by its marker,
    `_rivc/commit-<id>` (JSON), written after its files: it holds the places of what the batch
    consumed. A replayed batch whose marker exists is skipped; one without (a killed write may
    have left part of its files) is written again under the same names."""

    can = frozenset({Can.RECORD_PLACES, Can.WRITE_FROM_SPARK, Can.ADOPT_FILES, Can.PREVIEW})

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
            writer = open_writer(out, c, self.data_schema, self.record_name)
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
