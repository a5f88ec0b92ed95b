"""Running a PostgreSQL/MySQL source table: plan the window, extract once, check, commit later.

The rows land as Parquet under the warehouse's staging area,
`<warehouse>/_rivc_staging/extract/<source.table>/` (any store: Spark's executors write and read
it, as the rivc process does); the source's view reads that copy.
The cursor (and chunk checkpoints) advance in `commit_pending`, at the end of the run, only
when every node downstream of the source succeeded: state moves after the data is committed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rivc.compiler.specs import SourceTable

from ..connectors.relational import (
    Conn,
    ExtractError,
    Window,
    connection,
    decode,
    deliveries,
    dump_cursor,
    encode,
    load_cursor,
    plan_window,
    probe,
    read_query,
    session_init,
    with_retries,
)
from ..connectors.tableread import DataFile, read_files
from ..connectors.taskwrite import write_parquet
from ..faults import fault
from ..state import NodeResult, StateStore
from ..storage import Store, is_local, join, shares_disk
from .parquet import arrow_columns, dataset, parquet_rows, parquet_schema
from .sinkwriter import transform_source

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession

EXTRACT = "extract"


@dataclass
class Pending:
    cursor: dict[str, Any] | None
    staging: str
    store: Store
    chunked: bool


@dataclass(frozen=True)
class ExtractContext:
    """What an extraction reads from its run. It writes to the state store (the staged copy,
    chunk checkpoints, schemas) and returns the rest as an Extraction."""

    nid: str
    name: str  # "source.table"
    table: SourceTable
    conn: Conn
    tuning: dict[str, int]
    query: str  # the compiled query
    staging: str  # <warehouse>/_rivc_staging/extract/<source.table>
    store: Store  # how to reach it
    state: StateStore
    run_id: str
    full_refresh: bool
    resume_from: str | None  # a killed run this one resumes
    spark: Callable[[], SparkSession]  # started on first use: `parallel: 1` COPY needs none


@dataclass
class Extraction:
    """An extraction's outcome, for the runtime to apply."""

    result: NodeResult
    files: list[str] | None = None  # the staged Parquet, when a sink may take it as it is
    view: Callable[[SparkSession], DataFrame] | None = None  # the relation downstream reads
    pending: Pending | None = None  # committed once everything downstream succeeded


def _errors() -> tuple[type[BaseException], ...]:
    import psycopg
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (ExtractError, PySparkException, Py4JError, psycopg.Error)


def extract(ctx: ExtractContext) -> Extraction:
    """Copy the table's window once into staged Parquet, check it, and say what to commit."""
    nid, table, conn, tuning, base, staging = (
        ctx.nid,
        ctx.table,
        ctx.conn,
        ctx.tuning,
        ctx.query,
        ctx.staging,
    )
    label = f"source {ctx.name}"
    stored = load_cursor(ctx.state.cursor(nid)) if table.mode == "incremental" else None
    if ctx.full_refresh:
        stored = None
    exported_at = datetime.now(UTC).replace(tzinfo=None)

    via = ""

    def attempt() -> tuple[Window, list[str]]:
        nonlocal via
        with connection(conn) as db:
            window = plan_window(db, conn.kind, base, table, stored)
            plan = deliveries(conn.kind, probe(db, conn.kind, base), dict(table.columns), label)
            stage, via = _stager(
                ctx.spark, conn, tuning, base, plan, label, table.parallel, ctx.store
            )
        if window.chunks is not None:
            return window, _extract_chunks(ctx, stage, window)
        data = join(staging, "data")
        stage([window.predicate or ""], data)
        return window, parquet_files([data], ctx.store)

    replay = _replay(ctx)
    if replay is not None:  # a resumed run delivers what the killed one staged, not a superset
        window, files, retries, via = replay[0], replay[1], 0, "the killed run's staged copy"
    else:
        (window, files), retries = with_retries(attempt, tuning, _errors())
        cursor_text = dump_cursor(window.cursor) if window.cursor is not None else None
        ctx.state.record_extract(ctx.run_id, nid, files, cursor_text, window.description)
    fault("after-staging", ctx.name)
    # The checks read the staged Parquet with Arrow: no Spark job, and no JVM at all when
    # nothing downstream needs one.
    as_is = not (table.meta_columns.exported_at or table.meta_columns.row_hash or table.transforms)
    store = ctx.store
    rows = parquet_rows(files, store)
    notes = [f"{window.description} via {via}"]
    if retries:
        notes.append(f"{retries} retr{'y' if retries == 1 else 'ies'}")
    columns = arrow_columns(parquet_schema(files, store))
    if table.meta_columns.exported_at:
        columns["_rivc_exported_at"] = "timestamp"
    if table.meta_columns.row_hash:
        columns["_rivc_row_hash"] = "bigint"
    fail_on_change = table.on_schema_change == "fail"
    before = ctx.state.last_schema(nid)
    schema = ctx.state.schema_change(ctx.run_id, nid, columns, record=not fail_on_change)

    def ended(status: str, error: str | None = None, message: str = "") -> NodeResult:
        return NodeResult(
            nid,
            "source",
            status,
            rows=rows,
            retries=retries,
            schema=schema,
            error=error,
            message=message,
        )

    if schema == "CHANGED":
        diff = _schema_diff(before or {}, columns)
        if fail_on_change:
            return Extraction(
                ended("error", error=f"schema changed and on_schema_change is fail: {diff}")
            )
        notes.append(f"schema changed: {diff}")
    problems, warnings = _quality(files, store, table, rows)
    notes += warnings
    if problems:
        return Extraction(ended("error", error="quality: " + "; ".join(problems)))
    if rows == 0 and table.skip_empty:
        message = "no rows and skip_empty: downstream skipped, cursor not advanced"
        return Extraction(ended("skipped", message=message))
    cursor = window.cursor
    if cursor is not None and table.unique_key and rows:
        cursor = {**cursor, "keys": _boundary_keys(dataset(files, store), table, cursor)}

    def view(spark: SparkSession) -> DataFrame:
        return transform_source(
            _with_meta(staged_copy(spark, files, store), table, exported_at), table.transforms
        )

    return Extraction(
        ended("success", message="; ".join(n for n in notes if n)),
        files if as_is and is_local(staging) else None,
        view,
        Pending(cursor, staging, store, window.chunks is not None),
    )


def staged_copy(spark: SparkSession, files: list[str], store: Store) -> DataFrame:
    """The staged copy as a DataFrame: Spark's own reader on this machine, else rivc's data
    source, whose tasks open the files through the filesystem layer wherever Spark runs."""
    if is_local(files[0]) and shares_disk(spark):
        return spark.read.parquet(*files)
    fs, _ = store.filesystem(files[0])
    sizes = fs.get_file_info([store.filesystem(f)[1] for f in files])
    listed = [DataFile(f, i.size or 0, {}) for f, i in zip(files, sizes, strict=True)]
    return read_files(spark, listed, parquet_schema(files, store), store)


def _replay(ctx: ExtractContext) -> tuple[Window, list[str]] | None:
    """The staged copy of the run this one resumes, if it is still there (chunked tables
    resume from their own chunk checkpoints)."""
    if ctx.resume_from is None or ctx.table.mode == "chunked" or ctx.full_refresh:
        return None
    staged = ctx.state.extract_of(ctx.resume_from, ctx.nid)
    if staged is None or not ctx.store.exist(staged[0]):
        return None
    files, cursor, description = staged
    ctx.state.record_extract(ctx.run_id, ctx.nid, files, cursor, description)
    return Window(None, load_cursor(cursor), description=description), files


def _with_meta(df: DataFrame, table: Any, exported_at: datetime) -> DataFrame:
    """Meta columns over the staged copy: the hash is of the stored values, so it is stable."""
    from pyspark.sql import functions as F

    cols = df.columns
    if table.meta_columns.exported_at:
        df = df.withColumn("_rivc_exported_at", F.lit(exported_at).cast("timestamp"))
    if table.meta_columns.row_hash:
        df = df.withColumn("_rivc_row_hash", F.xxhash64(*[F.col(f"`{c}`") for c in cols]))
    return df


Stage = Callable[[list[str], str], None]  # predicates, the directory URI to fill


def _stager(
    spark: Callable[[], SparkSession],
    conn: Conn,
    tuning: dict[str, int],
    base: str,
    columns: list[Any],
    label: str,
    parallel: int,
    store: Store,
) -> tuple[Stage, str]:
    """How to copy `base` under predicates into a Parquet directory, one query per predicate.

    PostgreSQL with COPY-able column types: COPY streamed into Arrow and written as Parquet,
    by this process when `parallel` is 1 (no Spark job), else by `parallel` Spark tasks at once.
    Otherwise Spark's JDBC reader, its tasks writing the Parquet (rivc.connectors.taskwrite).
    """
    if conn.kind == "postgres":
        from ..connectors.pgcopy import NAME, CopyPartition, CopyReader, PgCopySource, copy_plan

        plan = copy_plan(columns, label)
        if plan is not None:
            public = {
                "host": conn.host,
                "port": conn.port,
                "user": conn.user,
                "database": conn.database,
                "tls": conn.tls.psycopg(),
            }
            options = {
                "conn": json.dumps(public),
                "password": conn.password or "",
                "base": base,
                "plan": plan.dumps(),
                "settings": json.dumps(session_init(conn.kind, tuning).split("; ")),
                "throttle_ms": str(tuning["throttle_ms"]),
                "storage_secret": json.dumps(store.options),  # "secret": Spark redacts it
            }

            def copy_here(predicates: list[str], path: str) -> None:
                store.remove_tree(path)
                reader = CopyReader({**options, "stage": path})
                for i, predicate in enumerate(predicates):
                    for _ in reader.read(CopyPartition(i, predicate)):
                        pass

            def copy_in_spark(predicates: list[str], path: str) -> None:
                store.remove_tree(path)
                session = spark()
                session.dataSource.register(PgCopySource)
                reader = session.read.format(NAME)
                for key, value in options.items():
                    reader = reader.option(key, value)
                reader.option("predicates", json.dumps(predicates)).option(
                    "stage", path
                ).load().collect()

            return (copy_here, "COPY") if parallel <= 1 else (copy_in_spark, "COPY in Spark")

    def jdbc_stage(predicates: list[str], path: str) -> None:
        store.remove_tree(path)
        df = read_query(spark(), conn, tuning, base, predicates, columns, label)
        parent, _, name = path.rpartition("/")
        if not write_parquet(df, parent, store, name):
            _empty_parquet(df, path, store)  # no rows: one file keeps the schema, as Spark's does

    return jdbc_stage, "JDBC"


def _empty_parquet(df: DataFrame, path: str, store: Store) -> None:
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    fs, inner = store.filesystem(join(path, "part-00000.parquet"))
    fs.create_dir(inner.rsplit("/", 1)[0])
    with fs.open_output_stream(inner, compression=None) as out:
        pq.write_table(to_arrow_schema(df.schema, timezone="UTC").empty_table(), out)


def _extract_chunks(ctx: ExtractContext, stage: Stage, window: Window) -> list[str]:
    """Chunks `parallel` at a time; each finished group is checkpointed, so a rerun resumes."""
    nid, table, staging = ctx.nid, ctx.table, ctx.staging
    chunks = window.chunks or []
    plan = hashlib.blake2b(
        repr((table.query or table.table, table.chunk_column, table.chunk_size)).encode(),
        digest_size=8,
    ).hexdigest()
    done = ctx.state.done_chunks(nid, plan)
    if not done:
        ctx.store.remove_tree(staging)  # leftovers of another plan
    todo = [c for c in chunks if c[0] not in done]
    step = max(1, table.parallel)
    for i in range(0, len(todo), step):
        group = todo[i : i + step]
        path = join(staging, f"chunks-{group[0][0]:06d}-{group[-1][0]:06d}")
        try:
            stage([p for _, p in group], path)
        except BaseException:
            ctx.store.remove_tree(path)  # no half-written group left behind
            raise
        ctx.state.chunk_done(nid, plan, [c for c, _ in group], path)
    paths = sorted(set(ctx.state.done_chunks(nid, plan).values()))
    if not paths:
        stage(["1 = 0"], join(staging, "empty"))
        return parquet_files([join(staging, "empty")], ctx.store)
    return parquet_files(paths, ctx.store)


def _quality(files: list[str], store: Store, table: Any, rows: int) -> tuple[list[str], list[str]]:
    """Failures (severity fail) and warnings of the table's quality gates, read with Arrow."""
    import pyarrow.compute as pc

    q = table.quality
    if q.null_ratio_max is None and q.unique_columns is None:
        files = []  # row_count needs no data
    data = dataset(files, store) if files else None
    fails: list[str] = []
    warns: list[str] = []

    def report(severity: str, text: str) -> None:
        (fails if severity == "fail" else warns).append(text)

    if q.row_count is not None:
        lo, hi = q.row_count.min, q.row_count.max
        if (lo is not None and rows < lo) or (hi is not None and rows > hi):
            report(q.row_count.severity, f"row_count {rows} outside [{lo}, {hi}]")
    if q.null_ratio_max is not None and rows and data is not None:
        nulls = dict.fromkeys(q.null_ratio_max.columns, 0)
        for batch in data.to_batches(columns=list(nulls)):
            for col in nulls:
                nulls[col] += batch.column(col).null_count
        for col, limit in q.null_ratio_max.columns.items():
            ratio = nulls[col] / rows
            if ratio > limit:
                report(q.null_ratio_max.severity, f"null ratio of {col} {ratio:.3f} > {limit}")
    if q.unique_columns is not None and rows and data is not None:
        cols = list(q.unique_columns.columns)
        keys = data.to_table(columns=cols)
        distinct = (
            keys.group_by(cols).aggregate([]).num_rows
            if len(cols) > 1
            else len(pc.unique(keys.column(0)))
        )
        if distinct != rows:
            report(
                q.unique_columns.severity,
                f"{rows - distinct} duplicate row(s) on {', '.join(q.unique_columns.columns)}",
            )
    return fails, warns


def _boundary_keys(data: pads.Dataset, table: Any, cursor: dict[str, Any]) -> list[list[Any]]:
    """Keys of the extracted rows at the new cursor value (plus those delivered before at it)."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    value = decode(cursor["value"])
    column = data.schema.field(table.cursor_column)
    if isinstance(value, datetime) and pa.types.is_timestamp(column.type) and column.type.tz:
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    at = data.to_table(
        columns=list(table.unique_key),
        filter=pads.field(table.cursor_column) == pa.scalar(value, type=column.type),
    )
    new = [[encode(_naive(v)) for v in row.values()] for row in at.to_pylist()]
    old = [k for k in cursor.get("keys", []) if k not in new]
    return old + new


def _naive(value: Any) -> Any:
    """Timestamps as naive UTC, as Spark returns them (keys are compared across runs)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def parquet_files(dirs: list[str], store: Store) -> list[str]:
    """The Parquet files of staged directories, in order (whichever writer made them)."""
    return [uri for d in dirs for uri, _ in store.files(d, ".parquet")]


def _schema_diff(before: dict[str, str], columns: dict[str, str]) -> str:
    added = [c for c in columns if c not in before]
    removed = [c for c in before if c not in columns]
    changed = [
        f"{c} {before[c]} -> {t}" for c, t in columns.items() if c in before and before[c] != t
    ]
    parts = [
        f"added {', '.join(added)}" if added else "",
        f"removed {', '.join(removed)}" if removed else "",
        f"changed {', '.join(changed)}" if changed else "",
    ]
    return "; ".join(p for p in parts if p) or "column order"


def commit_pending(
    state: StateStore,
    run_id: str,
    pending: dict[str, Pending],
    downstream: Callable[[str], set[str]],
    results: list[NodeResult],
) -> None:
    """Advance the cursors of extracted sources whose downstream nodes all succeeded; forget
    their staged copies. `pending` keeps the rest (their cursors stay where they were)."""
    status = {r.node: r.status for r in results}
    for nid, p in list(pending.items()):
        below = [n for n in downstream(nid) if n in status]
        if not below or any(status[n] not in ("success", "pass", "warn") for n in below):
            continue  # keep the old cursor (and the chunk checkpoints, to resume)
        if p.cursor is not None:
            state.set_cursor(nid, dump_cursor(p.cursor), run_id)
        if p.chunked:
            state.clear_chunks(nid)
        p.store.remove_tree(p.staging)
        del pending[nid]
