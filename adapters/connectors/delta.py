"""Delta Lake tables through delta-rs: the delta sink and model materializations."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector_specs import DeltaSinkConfig, parse_size
from rivc.compiler.errors import ConnectorError

from .base import (
    Sink,
    SparkFile,
    WriteResult,
    commit_with_retries,
    large,
    parquet_stats,
    spark_write,
    stream,
)

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

SPARK_CODECS = {"snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "zstd": "zstd", "none": "none"}
CODECS = {
    "snappy": "SNAPPY",
    "gzip": "GZIP",
    "lz4": "LZ4_RAW",
    "zstd": "ZSTD",
    "none": "UNCOMPRESSED",
}


def open_table(uri: str, storage_options: dict[str, str] | None = None) -> DeltaTable | None:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri, storage_options=storage_options or None):
        return None
    return DeltaTable(uri, storage_options=storage_options or None)


def _files(dt: DeltaTable | None) -> dict[str, int]:
    if dt is None:
        return {}
    actions = dt.get_add_actions(flatten=True)
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    return dict(zip(paths, sizes, strict=True))


def write(
    uri: str,
    data: pads.Dataset,
    mode: str,
    keys: tuple[str, ...] = (),
    partition_by: tuple[str, ...] = (),
    compression: str = "snappy",
    target_file_size: int | None = None,
    configuration: dict[str, str] | None = None,
    schema_mode: str | None = None,
    storage_options: dict[str, str] | None = None,
    app: tuple[str, int] | None = None,
) -> WriteResult:
    """Append, overwrite or merge `data`; with `app`, record (app_id, batch id) in the same commit."""
    from deltalake import CommitProperties, Transaction, WriterProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

    props = WriterProperties(compression=CODECS[compression])  # type: ignore[arg-type]
    commit = CommitProperties(
        app_transactions=[Transaction(app[0], app[1])] if app else None, max_commit_retries=0
    )

    def attempt() -> dict[str, int]:
        dt = open_table(uri, storage_options)
        before = _files(dt)
        try:
            if mode == "merge" and dt is not None:
                predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
                (
                    dt.merge(
                        stream(data),
                        predicate,
                        source_alias="s",
                        target_alias="t",
                        merge_schema=schema_mode == "merge",
                        writer_properties=props,
                        commit_properties=commit,
                    )
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute()
                )
            else:
                options: dict[str, Any] = dict(
                    mode="overwrite" if mode == "overwrite" else "append",
                    partition_by=list(partition_by) or None,
                    schema_mode=schema_mode,
                    configuration=configuration or None,
                    target_file_size=target_file_size,
                    writer_properties=props,
                    commit_properties=commit,
                    storage_options=storage_options or None,
                )
                write_deltalake(uri, stream(data), **options)
        except (SchemaMismatchError, DeltaError) as exc:
            if isinstance(exc, CommitFailedError):
                raise
            raise ConnectorError(f"delta write to {uri}: {exc}") from exc
        return before

    before, retries, took = commit_with_retries(attempt, CommitFailedError, uri)
    after = _files(open_table(uri, storage_options))
    added = {p: s for p, s in after.items() if p not in before}
    return WriteResult(
        rows=data.count_rows(),
        bytes=sum(added.values()),
        files=[(f"{uri.rstrip('/')}/{p}", None, s) for p, s in sorted(added.items())],
        retries=retries,
        commits=1,
        commit_s=took,  # delta-rs writes the files and commits in one call
    )


def read(spark: SparkSession, uri: str) -> DataFrame:
    """The table's current snapshot as a Spark DataFrame (Spark reads the Parquet files itself)."""
    dt = open_table(uri)
    if dt is None:
        raise ConnectorError(f"{uri} is not a Delta table")
    if dt.metadata().partition_columns or not dt.file_uris():
        return spark.createDataFrame(dt.to_pyarrow_table())
    return spark.read.parquet(*dt.file_uris())


class DeltaSink(Sink):
    config: DeltaSinkConfig

    def last_batch_id(self) -> int | None:
        dt = open_table(self.uri, self.config.storage_options)
        if dt is None:
            return None
        version = dt.transaction_version(self.ctx.app_id)
        return None if version is None else int(version)

    @property
    def uri(self) -> str:
        return self.ctx.path(self.config.table_uri)

    def write_spark(self, df: Any, batch_id: int) -> WriteResult | None:
        """Append or overwrite of a local table, when Spark estimates the batch at
        `spark_write_threshold` or more: Spark's executors write the data files into the table
        directory (Hive-style partition directories, the partition columns left out as Delta
        expects) and this commits them as add actions with their footer statistics, so no row
        passes through the driver. Merges, object stores and small batches take the streamed path.
        """
        c = self.config
        if (
            c.mode == "merge"
            or "://" in self.uri
            or not large(df, parse_size(c.spark_write_threshold))
        ):
            return None
        import pyarrow.parquet as pq

        if not self._same_columns(list(df.columns)):
            return None
        rel = f"rivc-batch-{batch_id:06d}-{uuid.uuid4().hex[:8]}"
        target = Path(self.uri) / rel

        def place() -> tuple[list[SparkFile], Any]:
            files = spark_write(df, target, SPARK_CODECS[c.compression], list(c.partition_by))
            if not files:
                return files, None
            schema = pq.read_schema(files[0].path).remove_metadata()
            for col in c.partition_by:  # back into the table schema, in the batch's order
                schema = schema.append(_spark_field(df, col))
            return files, _reorder(schema, df.columns)

        return self._commit_files(rel, target, place, batch_id)

    def adopt(self, paths: list[str], batch_id: int) -> WriteResult | None:
        """Parquet files already on this machine (an extracted table) in the table's codec:
        hard-link them into an unpartitioned local table (a copy where links cannot cross
        filesystems) and commit them as add actions, without reading a row."""
        c = self.config
        if c.mode == "merge" or c.partition_by or "://" in self.uri or not paths:
            return None
        import pyarrow.parquet as pq

        sources = [Path(p.removeprefix("file://")) for p in paths]
        if c.mode == "append" and self.last_batch_id() is not None:
            if sum(pq.ParquetFile(s).metadata.num_rows for s in sources) == 0:
                return WriteResult()  # nothing to add: no empty commit
        meta = pq.ParquetFile(sources[0]).metadata
        codec = meta.row_group(0).column(0).compression if meta.num_row_groups else ""
        if codec.lower() != SPARK_CODECS[c.compression].replace("none", "uncompressed"):
            return None  # the table asks for another codec: rewrite through the driver
        schema = pq.read_schema(sources[0]).remove_metadata()
        if not self._same_columns(schema.names):
            return None
        rel = f"rivc-batch-{batch_id:06d}-{uuid.uuid4().hex[:8]}"
        target = Path(self.uri) / rel

        def place() -> tuple[list[SparkFile], Any]:
            target.mkdir(parents=True)
            files = []
            for n, src in enumerate(sources):
                dest = target / f"part-{n:05d}.parquet"
                try:
                    os.link(src, dest)
                except OSError:
                    shutil.copyfile(src, dest)
                rows, stats = parquet_stats(dest)
                files.append(SparkFile(dest, dest.name, {}, rows, dest.stat().st_size, stats))
            return files, schema

        return self._commit_files(rel, target, place, batch_id)

    def _same_columns(self, names: list[str]) -> bool:
        """An append whose columns differ from the table's goes through delta-rs, which evolves
        the schema (or refuses)."""
        existing = open_table(self.uri)
        if existing is None or self.config.mode != "append":
            return True
        return [f.name for f in existing.schema().fields] == names

    def _commit_files(
        self,
        rel: str,
        target: Path,
        place: Callable[[], tuple[list[SparkFile], Any]],
        batch_id: int,
    ) -> WriteResult | None:
        """Put a batch's files under `target` (`rel` in the table) and commit them as add
        actions with the batch id; on any failure the files are deleted."""
        from deltalake import CommitProperties, DeltaTable, Transaction
        from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError
        from deltalake.transaction import AddAction

        c = self.config
        try:
            files, schema = place()
            if not files:  # an empty batch: nothing to add, the streamed path records it
                shutil.rmtree(target, ignore_errors=True)
                return None
            actions: list[Any] = [
                AddAction(
                    path=f"{rel}/{f.rel}",
                    size=f.size,
                    partition_values=f.partition,
                    modification_time=int(f.path.stat().st_mtime * 1000),
                    data_change=True,
                    stats=json.dumps(f.stats, allow_nan=False),
                )
                for f in files
            ]
            commit = CommitProperties(
                app_transactions=[Transaction(self.ctx.app_id, batch_id)], max_commit_retries=0
            )

            def attempt() -> None:
                dt = open_table(self.uri) or DeltaTable.create(
                    self.uri,
                    schema,
                    partition_by=list(c.partition_by) or None,
                    configuration=dict(c.table_properties) or None,
                )
                try:
                    dt.create_write_transaction(
                        actions,
                        c.mode,
                        schema,
                        list(c.partition_by) or None,
                        commit_properties=commit,
                    )
                except (SchemaMismatchError, DeltaError) as exc:
                    if isinstance(exc, CommitFailedError):
                        raise
                    raise ConnectorError(f"delta write to {self.uri}: {exc}") from exc

            _, retries, took = commit_with_retries(attempt, CommitFailedError, self.uri)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)  # files no commit references
            raise
        return WriteResult(
            rows=sum(f.rows for f in files),
            bytes=sum(f.size for f in files),
            files=[(f"{self.uri}/{rel}/{f.rel}", f.rows, f.size) for f in files],
            retries=retries,
            commits=1,
            commit_s=took,
        )

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        c = self.config
        if c.mode != "overwrite" and data.count_rows() == 0 and self.last_batch_id() is not None:
            return WriteResult()  # nothing to add: no empty commit (the state store records it)
        schema_mode = "merge" if c.schema_evolution == "add_columns" else None
        return write(
            self.uri,
            data,
            c.mode,
            c.merge_keys,
            c.partition_by,
            c.compression,
            c.target_file_size,
            dict(c.table_properties),
            schema_mode,
            dict(c.storage_options),
            app=(self.ctx.app_id, batch_id),
        )


def _spark_field(df: Any, name: str) -> Any:
    """The Arrow field of a Spark column (a partition column, which the files leave out)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    field = df.schema[name]
    return pa.field(name, to_arrow_type(field.dataType, timezone="UTC"), nullable=True)


def _reorder(schema: Any, order: list[str]) -> Any:
    import pyarrow as pa

    return pa.schema([schema.field(n) for n in order if n in schema.names])
