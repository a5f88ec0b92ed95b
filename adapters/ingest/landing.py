"""Landing tables: every extraction of a PostgreSQL or MySQL source table, committed together
with the source position it reached (docs/sources.md, "Where extracted rows land").

A landing table is a Delta table under the warehouse (warehouse.landing_uri), partitioned by
`_rivc_batch`. Each extraction is a batch: the extraction writes its Parquet files straight
into `_rivc_batch=<id>/` (there is no second copy), and one Delta commit adds them with, in the
commit's `rivc` metadata, the position: the batch id, the cursor and its boundary keys, a
chunked pass's finished chunks, the columns. Whatever was extracted is what the table says;
state.db holds no position.

Batch ids are the time of the extraction in milliseconds since 1970 (one more than the last id
when two fall in the same millisecond): they grow across a re-created landing table too, so a
consumer's place from an earlier table is told apart (`base`) instead of hiding new batches.

What a reader sees depends on the table's role (compiler/nodes/consumers.source_role):
- `snapshot` (modes full, chunked, time_window): each batch is the whole table; the table is
  its newest complete batch;
- `log` (mode incremental): each batch adds rows; the table is every batch, or, with a
  `unique_key`, the newest version of each key.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from dataclasses import replace as replace_
from typing import TYPE_CHECKING, Any

from ..connectors.database.windows import Cursor
from ..lake import deltatable
from ..plane.base import footer_stats
from ..plane.tableread import DataFile, read_files
from ..plane.taskwrite import Written
from ..util.storage import Store, is_local, join, shares_disk

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

BATCH = "_rivc_batch"  # the partition column: a row's batch


@dataclass(frozen=True)
class Position:
    """Where the source's extraction stands, as the landing table's last commit says."""

    batch: int | None = None  # the newest complete batch
    cursor: Cursor | None = None  # incremental: the high-water mark and its boundary keys
    chunking: dict[str, Any] | None = None  # a chunked pass under way: {"batch", "plan", "done"}
    columns: dict[str, str] = field(default_factory=dict)  # the newest batch's columns
    floor: int | None = None  # retention folded the batches up to this one into it
    base: int | None = None  # the first batch this table held (carried by every commit)
    run: str | None = None  # the run that made the last commit
    # a change-log table: its log's position (a LogPosition's to_json, adapters/ingest/changelog.py)
    cdc: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["cursor"] = None if self.cursor is None else self.cursor.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["cursor"] = Cursor.from_json(known.get("cursor"))
        return cls(**known)


def new_batch_id(last: int | None) -> int:
    """The time now in milliseconds, or one above `last` if that is not earlier."""
    now = int(time.time() * 1000)
    return now if last is None or now > last else last + 1


class Landing:
    """One source table's landing table."""

    def __init__(
        self, uri: str, store: Store, role: str, keys: Sequence[str] = (), order: str | None = None
    ) -> None:
        self.uri, self.store, self.role = uri, store, role
        self.keys = tuple(keys)  # unique_key: a log's readers take each key's newest version
        self.order = order  # the cursor column: ties of one key within a batch
        self._dt: DeltaTable | None = None  # the table as last read; a commit of ours drops it
        self._lock = threading.RLock()  # sinks on other threads read the same table

    def table(self) -> DeltaTable | None:
        """The table as it is now. Read once and kept: within a run only this object commits
        to it (the run lock keeps other runs and `rivc maintain` out)."""
        with self._lock:
            if self._dt is None:
                self._dt = deltatable.open_table(self.uri, self.store.delta)
            return self._dt

    def position(self, dt: DeltaTable | None = None) -> Position:
        """The position the newest rivc commit recorded (maintenance commits record none)."""
        with self._lock:
            dt = dt or self.table()
            if dt is None:
                return Position()
            for limit in (10, None):
                for entry in dt.history(limit=limit):
                    text = entry.get("rivc")
                    if text:
                        return Position.from_json(json.loads(text).get("position", {}))
        return Position()

    def schema(self, dt: DeltaTable) -> Any:
        """The table's columns, without the batch column."""
        import pyarrow as pa

        return pa.schema([f for f in deltatable.table_schema(dt) if f.name != BATCH])

    def rel(self, uri: str) -> str:
        """A file's path in the table (as its log names it)."""
        root = self.uri.rstrip("/") + "/"
        return uri[len(root) :] if uri.startswith(root) else uri

    def batch_dir(self, batch: int, part: str) -> str:
        return join(self.uri, f"{BATCH}={batch}", part)

    def commit(
        self,
        batch: int,
        files: list[str],
        position: Position,
        schema: Any,
        replace: bool = False,
        removes: Sequence[str] = (),
    ) -> None:
        """One transaction: `files` (under batch_dir(batch)) added, `removes` (paths in the
        table) taken out, the batch id and `position` recorded. `replace` swaps the table's
        files and schema at once (a full refresh, a snapshot whose column types changed)."""
        import pyarrow as pa

        dt = self.table()
        columns = pa.schema([*(f for f in schema if f.name != BATCH), pa.field(BATCH, pa.int64())])
        if dt is not None and not replace:  # keep the table's columns: older batches have them
            columns = deltatable.widened(deltatable.table_schema(dt), columns)
        written = self._describe(batch, files)
        base = self.position(dt).base if dt is not None else None
        position = replace_(position, base=batch if base is None else base)
        stamp = deltatable.Stamp(metadata={"position": position.to_json()})
        # under the lock: a sibling on another thread reading this table (its position, for
        # the slot's release) never keeps the version from before this commit as the table
        with self._lock:
            try:
                deltatable.commit(
                    self.uri,
                    self.store,
                    "replace" if replace else "append",
                    columns,
                    written,
                    (BATCH,),
                    tuple(removes),
                    stamp,
                )
            finally:
                self._dt = None

    def _describe(self, batch: int, files: list[str]) -> list[Written]:
        """Add actions of staged files: their path in the table and their footer statistics."""
        out = []
        fs, _ = self.store.filesystem(self.uri)
        infos = fs.get_file_info([self.store.filesystem(f)[1] for f in files])
        for uri, info in zip(files, infos, strict=True):
            import pyarrow.parquet as pq

            with fs.open_input_file(info.path) as handle:
                meta = pq.ParquetFile(handle)
                rows, stats = footer_stats(meta.metadata, meta.schema_arrow)
            mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
            out.append(
                Written(self.rel(uri), {BATCH: str(batch)}, rows, info.size or 0, stats, mtime)
            )
        return out

    # ------------------------------------------------------------------ reading

    def files(
        self, after: int | None, upto: int | None, dt: DeltaTable | None = None
    ) -> list[DataFile]:
        """The data files of the batches in (after, upto]."""
        with self._lock:
            dt = dt or self.table()
            if dt is None or upto is None:
                return []
            listed = deltatable.table_files(dt, self.uri)
        return [f for f in listed if (after is None or batch_of(f) > after) and batch_of(f) <= upto]

    def whole_files(self, upto: int | None, dt: DeltaTable | None = None) -> list[DataFile]:
        """The files that make up the table as of batch `upto`: a snapshot's newest batch, or
        every batch of a log (which readers may still deduplicate by key)."""
        if self.role == "snapshot":
            return self.files(None if upto is None else upto - 1, upto, dt)
        return self.files(None, upto, dt)

    def frame(
        self,
        spark: SparkSession,
        files: list[DataFile],
        columns: dict[str, str],
        latest: bool = False,
    ) -> DataFrame:
        """`files` as a DataFrame of `columns` plus BATCH; with `latest`, a keyed log's newest
        version of each key only."""
        import pyarrow as pa

        with self._lock:
            dt = self.table()
            schema = deltatable.table_schema(dt) if dt is not None else pa.schema([])
        names = [n for n in columns if n in schema.names]
        stored = pa.schema([schema.field(n) for n in names])
        df = _read(spark, files, stored, pa.schema([*stored, pa.field(BATCH, pa.int64())]), self)
        if latest and self.keys:
            df = _newest(df, self.keys, self.order)
        return df

    def whole(self, spark: SparkSession, upto: int | None, columns: dict[str, str]) -> DataFrame:
        """The source table as of batch `upto` (what `source()` means)."""
        files = self.whole_files(upto)
        return self.frame(spark, files, columns, latest=self.role == "log")


def batch_of(f: DataFile) -> int:
    return int(f.partition[BATCH] or -1)


def _read(
    spark: SparkSession, files: list[DataFile], stored: Any, schema: Any, landing: Landing
) -> DataFrame:
    """Spark's Parquet reader over local files, the batch taken from each file's directory;
    rivc's file-list reader (with the partition values) everywhere else."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    if not files:
        return spark.createDataFrame([], from_arrow_schema(schema))
    if shares_disk(spark) and all(is_local(f.uri) for f in files):
        df = spark.read.schema(from_arrow_schema(stored)).parquet(*[f.uri for f in files])
        batch = F.regexp_extract(F.col("_metadata.file_path"), rf"{BATCH}=(\d+)", 1)
        return df.withColumn(BATCH, batch.cast("bigint"))
    return read_files(spark, files, schema, landing.store)


def _newest(df: DataFrame, keys: tuple[str, ...], order: str | None) -> DataFrame:
    """Each key's row of the newest batch (and, within a batch, the highest cursor)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordering = [F.col(BATCH).desc()]
    if order and order in df.columns:
        ordering.append(F.col(order).desc_nulls_last())
    window = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(*ordering)
    return (
        df.withColumn("_rivc_n", F.row_number().over(window)).where("_rivc_n = 1").drop("_rivc_n")
    )
