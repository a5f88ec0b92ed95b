"""Delta Lake as rivc's table format, through delta-rs: open, read, write and commit a table
(with the batch id and places in its commit), reconcile schemas, housekeeping. The warehouse's
model tables, the landing tables and the delta sink all use it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import quote

from ..plane.base import WriteResult, commit_with_retries, repeated_key, stream
from ..plane.tableread import DataFile, read_files
from ..plane.taskwrite import Written, partition_value, prefix, write_parquet
from ..util.faults import fault
from ..util.storage import Store, is_local, join, shares_disk

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


SPARK_CODECS = {
    "snappy": "snappy",
    "gzip": "gzip",
    "lz4": "lz4_raw",
    "zstd": "zstd",
    "none": "none",
}


CODECS = {
    "snappy": "SNAPPY",
    "gzip": "GZIP",
    "lz4": "LZ4_RAW",
    "zstd": "ZSTD",
    "none": "UNCOMPRESSED",
}


@dataclass(frozen=True)
class Stamp:
    """What a commit records beside its data, in the same transaction: app transactions (an
    app id and its version: a batch id, or a consumer's place in an input) and the commit's
    `rivc` metadata (a landing table's source position, the writer)."""

    txns: tuple[tuple[str, int], ...] = ()
    metadata: dict[str, Any] | None = None

    @property
    def batch_id(self) -> int | None:
        return self.txns[0][1] if self.txns else None

    def properties(self) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(
            app_transactions=[Transaction(a, v) for a, v in self.txns] or None,
            custom_metadata={"rivc": json.dumps(self.metadata)} if self.metadata else None,
            max_commit_retries=0,
        )


NO_STAMP = Stamp()  # a commit that records no batch


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
    stamp: Stamp = Stamp(),
) -> WriteResult:
    """Append, overwrite or merge `data`, with `stamp` in the same commit."""
    from deltalake import WriterProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

    props = WriterProperties(compression=CODECS[compression])  # type: ignore[arg-type]
    commit = stamp.properties()

    if mode == "merge":
        repeated = repeated_key(data.to_table(columns=list(keys)))
        if repeated:
            raise ConnectorError(
                f"merge into {uri}: the batch holds key ({repeated}) more than once"
            )

    def attempt() -> dict[str, int]:
        dt = open_table(uri, storage_options)
        before = _files(dt)
        try:
            if mode == "merge" and dt is not None:
                predicate = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
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


# reader features whose tables rivc reads faithfully; any other is refused by name
READABLE = {"timestampNtz"}


def add_actions(dt: DeltaTable) -> Any:
    """The table's add actions as an Arrow table. Read as a stream: `pa.table()` of delta-rs's
    arro3 table asks pandas first whether it is a DataFrame, which imports pandas (0.25 s of a
    `rivc show`)."""
    import pyarrow as pa

    return pa.RecordBatchReader.from_stream(dt.get_add_actions(flatten=True)).read_all()


def table_files(dt: DeltaTable, uri: str) -> list[DataFile]:
    """The current snapshot's data files with their partition values; a table whose files
    would be read wrongly without a feature rivc lacks is refused."""

    protocol = dt.protocol()
    unknown = sorted(set(protocol.reader_features or ()) - READABLE)
    mapping = dt.metadata().configuration.get("delta.columnMapping.mode", "none")
    if unknown or mapping != "none" or protocol.min_reader_version > 3:
        what = ", ".join(unknown) or f"column mapping ({mapping})"
        raise ConnectorError(f"{uri}: rivc cannot read Delta tables that use {what}")
    parts = dt.metadata().partition_columns
    actions = add_actions(dt)
    rows = actions.select(["size_bytes", *[f"partition.{c}" for c in parts]]).to_pylist()
    uris = dt.file_uris()  # decoded, in the order of the add actions
    if len(uris) != len(rows):
        raise ConnectorError(f"{uri}: the table's file list changed while it was read")
    return [
        DataFile(u, r["size_bytes"], {c: partition_value(r[f"partition.{c}"]) for c in parts})
        for u, r in zip(uris, rows, strict=True)
    ]


def table_schema(dt: DeltaTable) -> Any:
    import pyarrow as pa

    return pa.schema(dt.schema().to_arrow())


def read(spark: SparkSession, uri: str, store: Store | None = None) -> DataFrame:
    """The table's current snapshot as a Spark DataFrame, read by Spark's tasks. A local
    unpartitioned table on a local Spark goes to Spark's own Parquet reader (faster); every
    other case to rivc's file-list reader (rivc.adapters.plane.tableread)."""
    store = store or Store.of(uri)
    dt = open_table(uri, store.delta)
    if dt is None:
        raise ConnectorError(f"{uri} is not a Delta table")
    files = table_files(dt, uri)
    schema = table_schema(dt)
    if shares_disk(spark) and is_local(uri) and files and not dt.metadata().partition_columns:
        names = schema.names
        df = spark.read.parquet(*[f.uri for f in files])
        if df.columns == names:
            return df
    return read_files(spark, files, schema, store)


def reconcile(
    df: DataFrame,
    dt: DeltaTable,
    on_change: str,
    what: str,
    carry: tuple[str, ...] = (),
    fix: str = "on_schema_change is fail; run with --full-refresh to rebuild it",
) -> tuple[DataFrame, Any]:
    """A batch made to fit an incremental table, as dbt's `on_schema_change` says: `ignore`
    keeps the table's columns (new ones dropped, missing ones null), `fail` refuses any
    difference, `append_new_columns` adds new columns to the table, `sync_all_columns` also
    drops the columns the model no longer has. A column whose type changed is refused, except
    under `ignore`, which casts to the table's type. `carry`: columns of the batch that are not
    data (unwrap_cdc's delete flag), kept as they are. Returns (batch, table schema to commit)."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    table = table_schema(dt)
    batch = arrow_schema(df.drop(*carry))
    old, new = set(table.names), set(batch.names)
    added = [n for n in batch.names if n not in old]
    removed = [n for n in table.names if n not in new]
    changed = [
        n
        for n in table.names
        if n in new and not _same_type(table.field(n).type, batch.field(n).type)
    ]
    if on_change == "fail" and (added or removed or changed):
        diff = [f"+{n}" for n in added] + [f"-{n}" for n in removed] + [f"~{n}" for n in changed]
        raise ConnectorError(
            f"{what}: its columns differ from its table's ({', '.join(diff)}) and {fix}"
        )
    if changed and on_change != "ignore":
        shown = ", ".join(f"{n} {table.field(n).type} -> {batch.field(n).type}" for n in changed)
        raise ConnectorError(
            f"{what}: column types changed ({shown}); run with --full-refresh to rebuild it"
        )
    if on_change == "ignore":
        fields = list(table)
    elif on_change == "append_new_columns":
        fields = [*table, *(batch.field(n) for n in added)]
    else:  # sync_all_columns
        fields = [
            *(table.field(n) for n in table.names if n in new),
            *(batch.field(n) for n in added),
        ]
    schema = pa.schema(fields)
    out = df.select(
        *[
            F.col(f.name).cast(from_arrow_type(f.type))
            if f.name in new
            else F.lit(None).cast(from_arrow_type(f.type)).alias(f.name)
            for f in schema
        ],
        *[F.col(c) for c in carry if c in df.columns],
    )
    return out, schema


def drop_columns(spark: SparkSession, uri: str, store: Store, names: list[str]) -> None:
    """Rewrite the table without `names` (Delta drops a column in place only with column
    mapping, which rivc does not use): one replace commit of the remaining columns."""
    import pyarrow as pa

    dt = open_table(uri, store.delta)
    assert dt is not None
    kept = pa.schema([f for f in table_schema(dt) if f.name not in names])
    parts = tuple(p for p in dt.metadata().partition_columns if p not in names)
    df = read(spark, uri, store).select(*kept.names)
    write_batch(df, uri, store, "replace", kept, parts)


def _same_type(a: Any, b: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    return bool(a.equals(b))


@dataclass(frozen=True)
class Maintained:
    compacted: int  # small files merged away
    added: int  # the files they became
    vacuumed: list[str]  # unreferenced files deleted (or that would be, on a dry run)


def maintain(
    uri: str,
    store: Store,
    retain_hours: int,
    dry_run: bool,
    target_size: int | None = None,
    compacted: Callable[[], object] | None = None,
) -> Maintained | None:
    """Delta's own housekeeping through delta-rs: compact small files (one commit, which a
    concurrent writer's commit makes conflict and fail rather than lose data), call `compacted`
    (a catalog's name moves to the new files), then VACUUM the files no version younger than
    `retain_hours` references: the files of killed jobs and of rewritten ones. None when `uri`
    holds no table."""
    dt = open_table(uri, store.delta)
    if dt is None:
        return None

    def vacuum(dry: bool) -> list[str]:
        try:
            return list(dt.vacuum(retention_hours=retain_hours, dry_run=dry, full=True))
        except Exception as exc:  # noqa: BLE001  (delta-rs raises one error type for all)
            raise ConnectorError(f"vacuum of {uri}: {str(exc).splitlines()[0]}") from exc

    planned = vacuum(True)  # a retention the table refuses stops here, before any change
    if dry_run:
        return Maintained(0, 0, planned)
    metrics = dt.optimize.compact(target_size=target_size)
    if compacted is not None:
        compacted()
    return Maintained(int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]), vacuum(False))


def head(uri: str, store: Store, limit: int) -> Any:
    """The first `limit` rows of the table at `uri` (Arrow, read from its files; no JVM), or
    None when there is no table."""
    import pyarrow as pa

    from ..plane.tableread import read_group

    table = open_table(uri, store.delta)
    if table is None:
        return None
    schema = table_schema(table)
    parts, rows = [], 0
    for batch in read_group(table_files(table, uri), schema, store, batch_size=limit):
        parts.append(pa.Table.from_batches([batch]))
        rows += batch.num_rows
        if rows >= limit:
            break
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts).slice(0, limit)


def maintained(done: Maintained | None, dry_run: bool) -> str:
    """What maintain() did to a table, in one line."""
    if done is None:
        return "not built yet"
    if dry_run:
        return f"VACUUM would delete {len(done.vacuumed)} files"
    return (
        f"{done.compacted} files compacted into {done.added}, "
        f"{len(done.vacuumed)} unreferenced files deleted"
    )


def arrow_schema(df: DataFrame) -> Any:
    """The Delta table schema of a Spark DataFrame (timestamps in UTC, as Delta holds them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema, timezone="UTC")


def commit(
    uri: str,
    store: Store,
    mode: str,
    schema: Any,
    written: list[Written],
    partition_by: tuple[str, ...] = (),
    removes: tuple[str, ...] = (),
    stamp: Stamp = Stamp(),
    configuration: dict[str, str] | None = None,
) -> tuple[int, float]:
    """One Delta transaction of the files Spark's tasks wrote, with the batch id. mode `replace`
    swaps the table's files, schema and partitioning at once (a table model); `append` and
    `overwrite` keep the table's layout, adding the schema's new columns first (their own
    commit); `replace_partitions` too, and every file of the partitions the new files are in
    leaves in the same commit (all of them when the table has no partitions: dbt's
    insert_overwrite). `removes` (paths in the table) leave in the same commit: a merge's
    rewritten files. Returns (retries, seconds)."""
    from time import time

    import pyarrow as pa
    from deltalake import Schema, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

    adds = [
        AddAction(
            path=w.rel,
            size=w.size,
            partition_values=w.partition,
            modification_time=w.mtime_ms,
            data_change=True,
            stats=json.dumps(w.stats, allow_nan=False),
        )
        for w in written
    ]
    props = stamp.properties()

    def attempt() -> None:
        dt = open_table(uri, store.delta)
        try:
            if dt is None or mode == "replace":
                create_table_with_add_actions(
                    uri,
                    Schema.from_arrow(schema),
                    adds,
                    mode="error" if dt is None else "overwrite",
                    partition_by=list(partition_by) or None,
                    configuration=configuration or None,
                    storage_options=store.delta,
                    commit_properties=props,
                )
                return
            have = table_schema(dt)
            new = [f for f in schema if f.name not in have.names]
            if new:  # nullable columns first (older files read them as null), then the data
                dt.alter.add_columns(list(Schema.from_arrow(pa.schema(new)).fields))
                dt = open_table(uri, store.delta)
                assert dt is not None
            wider = widened(have, schema)
            if any(wider.field(f.name).type != f.type for f in have):  # a struct's new fields
                write_deltalake(  # the same, by a schema merge of no rows
                    uri,
                    wider.empty_table(),
                    mode="append",
                    schema_mode="merge",
                    storage_options=store.delta,
                )
                dt = open_table(uri, store.delta)
                assert dt is not None
            now = int(time() * 1000)
            leaving = list(removes)
            if mode == "replace_partitions":  # read in each attempt: the table as it is now
                written_in = {tuple(sorted(w.partition.items())) for w in written}
                root = uri.rstrip("/") + "/"
                leaving += [
                    f.uri[len(root) :]
                    for f in table_files(dt, uri)
                    if not f.partition or tuple(sorted(f.partition.items())) in written_in
                ]
            gone = [RemoveAction(p, True, now) for p in leaving]
            dt.create_write_transaction(
                [*gone, *adds],
                "append" if mode == "replace_partitions" else mode,
                schema,
                dt.metadata().partition_columns or None,
                commit_properties=props,
            )
        except (SchemaMismatchError, DeltaError) as exc:
            if isinstance(exc, CommitFailedError):
                raise
            raise ConnectorError(f"delta write to {uri}: {exc}") from exc

    _, retries, took = commit_with_retries(attempt, CommitFailedError, uri)
    return retries, took


def widened(have: Any, schema: Any) -> Any:
    """The table's columns (`have`), with `schema`'s new columns after them and the new fields
    of its struct columns (a CDC image whose table gained a column) in them."""
    import pyarrow as pa

    kept = []
    for f in have:
        now = schema.field(f.name).type if f.name in schema.names else None
        if now is not None and pa.types.is_struct(f.type) and pa.types.is_struct(now):
            held = {c.name for c in f.type}
            f = f.with_type(pa.struct([*f.type, *(c for c in now if c.name not in held)]))
        kept.append(f)
    return pa.schema([*kept, *(f for f in schema if f.name not in have.names)])


def write_batch(
    df: DataFrame,
    uri: str,
    store: Store,
    mode: str,
    schema: Any,
    partition_by: tuple[str, ...] = (),
    stamp: Stamp = Stamp(),
    codec: str = "snappy",
    max_bytes: int | None = None,
    removes: tuple[str, ...] = (),
    configuration: dict[str, str] | None = None,
    apart: str | None = None,
) -> WriteResult:
    """Spark's tasks write `df` into the table; rivc commits what they wrote, or deletes it.
    With `apart` (a condition), the rows that meet it and the others go to separate files."""
    batch = stamp.batch_id
    where = prefix("batch" if batch is None else f"batch-{batch:06d}")
    written = write_parquet(
        df, uri, store, where, SPARK_CODECS[codec], partition_by, max_bytes, apart
    )
    fault("before-commit", uri.rstrip("/").rsplit("/", 1)[-1])  # the files are in, the log not
    try:
        retries, took = commit(
            uri, store, mode, schema, written, partition_by, removes, stamp, configuration
        )
    except BaseException:
        store.remove_tree(join(uri, where))
        raise
    return WriteResult(
        rows=sum(w.rows for w in written),
        bytes=sum(w.size for w in written),
        files=[(join(uri, w.rel), w.rows, w.size) for w in written],
        retries=retries,
        commits=1,
        commit_s=took,
    )
