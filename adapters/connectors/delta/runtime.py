"""The delta sink and the delta source (the table format is lake/deltatable.py)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rivc.compiler.connector import parse_size
from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ...lake.deltamerge import merge
from ...lake.deltatable import (
    SPARK_CODECS,
    Stamp,
    arrow_schema,
    commit,
    head,
    maintain,
    maintained,
    open_table,
    read,
    reconcile,
    table_schema,
    write,
    write_batch,
)
from ...plane.base import Can, Sink, SourceContext, WriteResult, large, parquet_stats
from ...plane.taskwrite import Written
from ...util.storage import Store, join, resolve
from .spec import DeltaSinkConfig, DeltaSourceConfig

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


R = TypeVar("R")


WRITER = "rivc.writer"  # the table property naming the project that writes a sink's table


def read_source(spark: SparkSession, ctx: SourceContext[DeltaSourceConfig]) -> DataFrame:
    """The registry's entry point of the delta source: the table as it is now. Declared
    columns, when given, must be in the table."""
    uri = ctx.path(ctx.config.table_uri)
    df = read(spark, uri, Store.of(uri, dict(ctx.storage), dict(ctx.config.storage_options)))
    missing = [c for c in ctx.columns if c not in df.columns]
    if missing:
        raise ConnectorError(f"source {ctx.name}: {uri} has no column {', '.join(missing)}")
    return df


def newest(config: DeltaSourceConfig, root: Path, storage: Mapping[str, str], column: str) -> Any:
    """`rivc source freshness`: the newest value of `column` in the table, read without
    Spark."""
    import pyarrow.compute as pc

    uri = resolve(config.table_uri, root)
    dt = open_table(uri, Store.of(uri, dict(storage), dict(config.storage_options)).delta)
    if dt is None:
        raise ConnectorError(f"no Delta table at {uri}")
    return pc.max(dt.to_pyarrow_table(columns=[column]).column(column)).as_py()


class DeltaSink(Sink[DeltaSinkConfig]):
    can = frozenset(
        {Can.RECORD_PLACES, Can.WRITE_FROM_SPARK, Can.ADOPT_FILES, Can.PREVIEW, Can.MAINTAIN}
    )

    def preview(self, limit: int) -> Any | None:
        return head(self.uri, self.store, limit)

    def maintain(self, retain_hours: int, dry_run: bool) -> str | None:
        return maintained(maintain(self.uri, self.store, retain_hours, dry_run), dry_run)

    def last_batch_id(self) -> int | None:
        dt = open_table(self.uri, self.store.delta)
        if dt is None:
            return None
        version = dt.transaction_version(self.ctx.app_id)
        return None if version is None else int(version)

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        dt = open_table(self.uri, self.store.delta)
        if dt is None:
            return dict.fromkeys(inputs)
        return {i: dt.transaction_version(self.ctx.place_id(i)) for i in inputs}

    def record_places(self, batch_id: int) -> None:
        dt = open_table(self.uri, self.store.delta)
        if dt is None:
            raise ConnectorError(f"sink {self.ctx.sink}: {self.uri} holds no table yet")
        commit(self.uri, self.store, "append", table_schema(dt), [], stamp=self._stamp(batch_id))

    def _stamp(self, batch_id: int) -> Stamp:
        places = ((self.ctx.place_id(k), v) for k, v in sorted(self.ctx.places.items()))
        return Stamp(((self.ctx.app_id, batch_id), *places), {"writer": self.ctx.writer})

    def writer(self) -> str | None:
        dt = open_table(self.uri, self.store.delta)
        return None if dt is None else dt.metadata().configuration.get(WRITER)

    def _claim(self, dt: DeltaTable | None) -> None:
        """Refuse a missing table unless rivc may create it, a table another project writes,
        or one partitioned otherwise than a given
        `partition_by` (Delta cannot change a table's partitioning in place: never ignored;
        without one, the table's own); give one that names no writer ours (a table property;
        a new table gets it after its first commit, which may not set one)."""
        if dt is None and not self.config.auto_create_table:
            raise ConnectorError(
                f"sink {self.ctx.sink}: {self.uri} holds no Delta table and auto_create_table "
                "is false: create it first (or let rivc create it on the first write)"
            )
        held = () if dt is None else tuple(dt.metadata().partition_columns)
        if self.config.partition_by and dt is not None and held != self.config.partition_by:
            raise ConnectorError(
                f"sink {self.ctx.sink}: partition_by is {', '.join(self.config.partition_by)} "
                f"but {self.uri} is partitioned by {', '.join(held) or 'nothing'}; Delta cannot "
                "change a table's partitioning in place: write to a new table_uri (or remove "
                "the table)"
            )
        found = None if dt is None else dt.metadata().configuration.get(WRITER)
        if dt is None or not self.ctx.claim(found, self.uri):
            return
        dt.alter.set_table_properties({WRITER: self.ctx.writer}, raise_if_not_exists=False)

    def _claimed(self, result: R) -> R:
        """After a write that may have created the table: claim it."""
        if result is not None and self.ctx.writer and not self.ctx.shared:
            self._claim(open_table(self.uri, self.store.delta))
        return result

    @property
    def uri(self) -> str:
        return self.ctx.path(self.config.table_uri)

    @property
    def store(self) -> Store:
        return Store.of(self.uri, dict(self.ctx.storage), dict(self.config.storage_options))

    def write_spark(self, df: Any, batch_id: int) -> WriteResult | None:
        """A batch Spark estimates at `spark_write_threshold` or more (any batch on Spark
        Connect, where there is no estimate): Spark's tasks write the data files into the table
        (rivc.adapters.plane.taskwrite) and this commits them with the batch id, so no row
        passes through rivc. A merge rewrites only the files that can hold the batch's keys."""
        c = self.config
        deletes = DELETE_COLUMN in df.columns  # unwrap_cdc's deletes: only this path applies them
        history = c.history()  # and only this path keeps versions
        if not deletes and not history and not large(df, parse_size(c.spark_write_threshold)):
            return None
        store = self.store
        stamp = self._stamp(batch_id)
        dt = open_table(self.uri, store.delta)
        self._claim(dt)
        schema = arrow_schema(df.drop(DELETE_COLUMN))
        if dt is not None and c.mode != "overwrite":
            evolve = "append_new_columns" if c.schema_evolution == "add_columns" else "fail"
            carry = (DELETE_COLUMN,) if deletes else ()
            fix = "schema_evolution is strict (add_columns adds new columns)"
            df, schema = reconcile(df, dt, evolve, f"sink {self.ctx.sink!r}", carry, fix)
        if c.mode in ("merge", "scd2"):
            return self._claimed(
                merge(
                    df,
                    self.uri,
                    store,
                    c.merge_keys,
                    schema,
                    stamp,
                    c.compression,
                    c.partition_by,
                    dict(c.table_properties),
                    history,
                )
            )
        if dt is not None and c.mode == "overwrite" and list(df.columns) != table_schema(dt).names:
            return None  # a new layout: delta-rs's overwrite replaces the schema
        return self._claimed(
            write_batch(
                df,
                self.uri,
                store,
                c.mode,
                schema,
                c.partition_by if dt is None else tuple(dt.metadata().partition_columns),
                stamp,
                c.compression,
                c.target_file_size,
                configuration=dict(c.table_properties),
            )
        )

    def adopt(self, paths: list[str], batch_id: int) -> WriteResult | None:
        """Parquet files already on this machine (an extracted table) in the table's codec:
        hard-link them into an unpartitioned local table (a copy where links cannot cross
        filesystems) and commit them as add actions, without reading a row."""
        c = self.config
        if c.mode in ("merge", "scd2") or c.partition_by or "://" in self.uri or not paths:
            return None
        import pyarrow.parquet as pq

        sources = [Path(p.removeprefix("file://")) for p in paths]
        if c.mode == "append" and self.last_batch_id() is not None and not self.ctx.places:
            if sum(pq.ParquetFile(s).metadata.num_rows for s in sources) == 0:
                return WriteResult()  # nothing to add: no empty commit
        meta = pq.ParquetFile(sources[0]).metadata
        codec = meta.row_group(0).column(0).compression if meta.num_row_groups else ""
        if codec.lower() != SPARK_CODECS[c.compression].replace("none", "uncompressed"):
            return None  # the table asks for another codec: rewrite through the driver
        schema = pq.read_schema(sources[0]).remove_metadata()
        existing = open_table(self.uri)
        self._claim(existing)
        if existing is not None and existing.metadata().partition_columns:
            return None  # a partitioned table (made elsewhere): its files go under partitions
        if existing is not None and c.mode == "append":
            if table_schema(existing).names != schema.names:
                return None  # delta-rs evolves the schema (or refuses)
        where = f"rivc-batch-{batch_id:06d}-{uuid.uuid4().hex[:8]}"
        target = Path(self.uri) / where
        try:
            target.mkdir(parents=True)
            written = []
            for n, src in enumerate(sources):
                dest = target / f"part-{n:05d}.parquet"
                try:
                    os.link(src, dest)
                except OSError:
                    shutil.copyfile(src, dest)
                rows, stats = parquet_stats(dest)
                mtime = int(dest.stat().st_mtime * 1000)
                written.append(
                    Written(f"{where}/{dest.name}", {}, rows, dest.stat().st_size, stats, mtime)
                )
            props = dict(c.table_properties)
            stamp = self._stamp(batch_id)
            retries, took = commit(self.uri, Store(), c.mode, schema, written, (), (), stamp, props)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)  # files no commit references
            raise
        self._claimed(WriteResult())
        return WriteResult(
            rows=sum(w.rows for w in written),
            bytes=sum(w.size for w in written),
            files=[(join(self.uri, w.rel), w.rows, w.size) for w in written],
            retries=retries,
            commits=1,
            commit_s=took,
        )

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        c = self.config
        if DELETE_COLUMN in data.schema.names or c.history():  # write_spark takes them all
            raise ConnectorError(
                f"sink {self.ctx.sink}: a {c.mode} batch reached the streamed path"
            )
        dt = open_table(self.uri, self.store.delta)
        self._claim(dt)
        if c.mode != "overwrite" and data.count_rows() == 0 and dt is not None:
            if not self.ctx.places:
                return WriteResult()  # nothing to add: no empty commit (the state store records it)
            commit(
                self.uri, self.store, "append", table_schema(dt), [], stamp=self._stamp(batch_id)
            )
            return WriteResult(commits=1)  # no rows, but the places move
        schema_mode = "merge" if c.schema_evolution == "add_columns" else None
        return self._claimed(
            write(
                self.uri,
                data,
                c.mode,
                c.merge_keys,
                c.partition_by,
                c.compression,
                c.target_file_size,
                dict(c.table_properties),
                schema_mode,
                self.store.delta,
                stamp=self._stamp(batch_id),
            )
        )
