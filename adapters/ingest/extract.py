"""Running a PostgreSQL/MySQL source table: plan the window, extract it once into the source's
landing table, check it, and commit it there with the position it reached.

The rows are written as Parquet straight into the landing table's new batch directory
(`<warehouse>/_rivc/landing/<source.table>/_rivc_batch=<id>/`, on any store: Spark's executors
write and read it, as the rivc process does), checked with Arrow, and added by one Delta commit
that also records the cursor and its boundary keys (landing.py). A run killed before that commit
leaves files no commit references, and the next run extracts the window again; after it, the
window is landed, whatever happens downstream: each consumer takes it from the landing table.
A chunked extraction commits every group of `parallel` chunks as it finishes, and a killed pass
resumes from the finished chunks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import SourceTable
from rivc.compiler.sql import quote

from ..connectors.database.engine import Conn, ExtractError, connection
from ..connectors.database.relational import deliveries, read_query, with_retries
from ..connectors.database.windows import Cursor, Window, decode, encode, plan_window, scalar
from ..delivery.parquet import dataset, parquet_rows, parquet_schema
from ..delivery.sinkwriter import transform_source
from ..plane.base import arrow_columns, register_data_source
from ..plane.taskwrite import write_parquet
from ..state import NodeResult, StateStore
from ..util.faults import fault
from ..util.storage import Store, join
from .landing import BATCH, Landing, Position, new_batch_id

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True, kw_only=True)
class ExtractContext:
    """What an extraction reads from its run. It writes the landing table, and schema
    records to the state store, and returns the rest as an Extraction."""

    nid: str
    name: str  # "source.table"
    table: SourceTable
    conn: Conn
    tuning: dict[str, int]
    query: str  # the compiled query
    landing: Landing
    state: StateStore
    run_id: str
    full_refresh: bool
    resume_from: str | None  # a killed run this one resumes
    spark: Callable[[], SparkSession]  # started on first use: `parallel: 1` COPY needs none
    validate: bool = False  # --validate: the window counted again in the database


class ValidationFailed(ConnectorError):
    """--validate found another count in the database than was read: nothing of it lands."""


@dataclass
class Extraction:
    """An extraction's outcome, for the runtime to apply."""

    result: NodeResult
    batch: int | None = None  # the source's newest complete batch after it


def _errors() -> tuple[type[BaseException], ...]:
    import psycopg
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (ExtractError, PySparkException, Py4JError, psycopg.Error)


def extract(ctx: ExtractContext) -> Extraction:
    """Copy the table's window once into the landing table, check it, and commit it with the
    position it reached."""
    nid, table, conn, tuning, base = ctx.nid, ctx.table, ctx.conn, ctx.tuning, ctx.query
    landing = ctx.landing
    label = f"source {ctx.name}"
    at = landing.position()
    if ctx.resume_from is not None and at.run == ctx.resume_from and at.chunking is None:
        # the killed run landed this table: the resumed run delivers that batch, no superset
        message = f"batch {at.batch}, landed by the run this one resumes"
        return Extraction(NodeResult(nid, "source", "success", message=message), at.batch)
    stored = at.cursor if table.mode == "incremental" and not ctx.full_refresh else None
    upgraded = table.mode == "incremental" and not ctx.full_refresh and at.batch is None
    if upgraded:  # a project whose earlier rivc kept the cursor in the state store
        stored = Cursor.from_json(ctx.state.legacy_cursor(nid))
    via = ""
    window_batch = new_batch_id(_last_id(at))  # a retry stages into the same batch again

    def attempt() -> tuple[Window, int, list[str]]:
        nonlocal via
        with connection(conn) as db:
            window = plan_window(db, conn.kind, base, table, stored)
            plan = deliveries(conn.kind, conn.engine.probe(db, base), dict(table.columns), label)
            stage, via = _stager(
                ctx.spark, conn, tuning, base, plan, label, table.parallel, landing.store
            )
        if window.chunks is not None:
            return window, *_extract_chunks(ctx, stage, window, at)
        data = landing.batch_dir(window_batch, "window")
        stage([window.predicate or ""], data)
        return window, window_batch, parquet_files([data], landing.store)

    (window, batch, files), retries = with_retries(attempt, tuning, _errors())
    chunked = window.chunks is not None
    fault("after-staging", ctx.name)
    store = landing.store
    # The checks read the staged Parquet with Arrow: no Spark job, and no JVM at all when
    # nothing downstream needs one.
    rows = parquet_rows(files, store)
    notes = [f"{window.description} via {via}"]
    if upgraded and stored is not None:
        notes.append("from the cursor an earlier rivc kept in .rivc/state.db")
    if retries:
        notes.append(f"{retries} retr{'y' if retries == 1 else 'ies'}")
    found = parquet_schema(files, store)
    extracted = arrow_columns(found)
    columns = dict(extracted)
    if table.meta_columns.exported_at:
        columns["_rivc_exported_at"] = "timestamp"
    if table.meta_columns.row_hash:
        columns["_rivc_row_hash"] = "bigint"
    fail_on_change = table.on_schema_change == "fail"
    ctx.state.schema_change(ctx.run_id, nid, columns, record=not fail_on_change)  # a record
    before = at.columns or None  # the landing table says what the source was
    schema = "NEW" if before is None else "CHANGED" if before != extracted else "SAME"

    def ended(
        status: str, error: str | None = None, message: str = "", landed: int | None = None
    ) -> Extraction:
        if status != "success":
            _abandon(ctx, batch, chunked)
        result = NodeResult(
            nid,
            "source",
            status,
            rows=rows,
            retries=retries,
            schema=schema,
            error=error,
            message=message,
        )
        return Extraction(result, at.batch if landed is None else landed)

    if schema == "CHANGED" and before is not None:
        diff = _schema_diff(before, extracted)
        if fail_on_change:
            return ended("error", error=f"schema changed and on_schema_change is fail: {diff}")
        notes.append(f"schema changed: {diff}")
    if ctx.validate:
        if chunked:
            notes.append(f"validated: each chunk group held the rows it read ({rows} in all)")
        else:
            held = with_retries(lambda: count_window(conn, base, window), tuning, _errors())[0]
            if held != rows:
                return ended("error", error=validation_error(held, rows))
            notes.append(f"validated: the database holds the same {rows} rows")
    problems, warnings = _quality(files, store, table, rows)
    notes += warnings
    if problems:
        return ended("error", error="quality: " + "; ".join(problems))
    if rows == 0 and table.skip_empty:
        return ended(
            "skipped", message="no rows and skip_empty: downstream skipped, nothing landed"
        )
    cursor = window.cursor
    if cursor is not None and table.unique_key and rows:
        cursor = replace(cursor, keys=_boundary_keys(dataset(files, store), table, cursor))
    if (
        table.mode == "incremental"
        and not ctx.full_refresh
        and not rows
        and cursor in (None, at.cursor)
    ):
        _abandon(ctx, batch, chunked)  # nothing new: no empty batch
        return ended("success", message="; ".join([*notes, "no new rows"]))
    position = Position(
        batch=batch,
        cursor=cursor if table.mode == "incremental" else None,
        columns=extracted,
        floor=None if ctx.full_refresh else at.floor,
        run=ctx.run_id,
    )
    if chunked:  # the groups are in; this commit completes the pass
        landing.commit(batch, [], position, found)
    else:
        swap = ctx.full_refresh or _retyped(landing, found, ctx.name, table.mode)
        landing.commit(batch, files, position, found, swap)
    if upgraded:
        ctx.state.forget_legacy_cursor(nid)
    fault("after-landing", ctx.name)
    return ended("success", message="; ".join([f"batch {batch}", *notes]), landed=batch)


def count_chunks(conn: Conn, base: str, predicates: list[str]) -> int:
    """The rows the database holds in a group of chunks (their predicates), counted again."""
    where = " OR ".join(f"({p})" for p in predicates)
    with connection(conn) as db:
        return int(scalar(db, f"SELECT COUNT(*) FROM ({base}) AS _rivc WHERE {where}") or 0)


def count_window(conn: Conn, base: str, window: Window) -> int:
    """The rows the database holds in an extraction's window, counted again."""
    where = f" WHERE {window.predicate}" if window.predicate else ""
    with connection(conn) as db:
        return int(scalar(db, f"SELECT COUNT(*) FROM ({base}) AS _rivc{where}") or 0)


def validation_error(held: int, landed: int, where: str = "this window") -> str:
    return (
        f"validate: the database holds {held} rows in {where}, {landed} were read: rows "
        "changed while they were read (a write inside the window, or a non-deterministic "
        "query); nothing landed"
    )


def _last_id(at: Position) -> int | None:
    ids = [b for b in (at.batch, (at.chunking or {}).get("batch")) if b is not None]
    return max(ids, default=None)


def _abandon(ctx: ExtractContext, batch: int, chunked: bool = True) -> None:
    """Take out a batch that will not land: its staged files, and the groups a chunked pass
    committed (one commit removes them and ends the pass)."""
    landing = ctx.landing
    dt = landing.table() if chunked else None
    held = landing.files(batch - 1, batch, dt) if dt is not None else []
    if dt is not None and held:
        at = landing.position(dt)
        landing.commit(
            batch,
            [],
            replace(at, chunking=None, run=ctx.run_id),
            landing.schema(dt),
            removes=[landing.rel(f.uri) for f in held],
        )
    landing.store.remove_tree(join(landing.uri, f"{BATCH}={batch}"))


def _retyped(landing: Landing, found: Any, name: str, mode: str) -> bool:
    """Whether a column's type differs from the landing table's. A snapshot's batch then
    replaces the table (its older batches are never read again); a log's older batches hold
    the old types, so it has to be extracted again from the start."""
    dt = landing.table()
    if dt is None:
        return False
    have = arrow_columns(landing.schema(dt))
    now = arrow_columns(found)
    changed = [f"{c} {have[c]} -> {t}" for c, t in now.items() if c in have and have[c] != t]
    if not changed:
        return False
    if mode != "incremental":
        return True
    raise ConnectorError(
        f"source {name}: column types changed ({', '.join(changed)}) and its landing table "
        "holds batches of the old types; run `rivc run --full-refresh --select "
        f"source:{name}+` to extract the table again"
    )


def source_frame(df: DataFrame, table: SourceTable) -> DataFrame:
    """A landed source's rows as models and sinks read them: its meta columns (a batch's
    `_rivc_exported_at` is when it was extracted, its batch id's time; the hash is of the
    stored values, so it is stable) and its transforms, without the batch column."""
    from pyspark.sql import functions as F

    cols = [c for c in df.columns if c != BATCH]
    if table.meta_columns.exported_at:
        df = df.withColumn("_rivc_exported_at", F.timestamp_millis(F.col(BATCH)))
    if table.meta_columns.row_hash:
        df = df.withColumn("_rivc_row_hash", F.xxhash64(*[F.col(quote(c)) for c in cols]))
    return transform_source(df.drop(BATCH), table.transforms)


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
    if conn.engine.copy:  # PostgreSQL's COPY, where it can carry every column
        from ..connectors.postgres.copy import (
            NAME,
            CopyPartition,
            CopyReader,
            PgCopySource,
            copy_plan,
        )

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
                "settings": json.dumps(conn.engine.session_init(tuning).split("; ")),
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
                register_data_source(session, PgCopySource)
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


def _extract_chunks(
    ctx: ExtractContext, stage: Stage, window: Window, at: Position
) -> tuple[int, list[str]]:
    """Chunks `parallel` at a time into one batch. Each finished group is committed to the
    landing table with the pass's progress, so a killed pass resumes from its finished chunks;
    a pass of another plan (query, column or chunk size changed) starts over."""
    table, landing = ctx.table, ctx.landing
    chunks = window.chunks or []
    plan = hashlib.blake2b(
        repr((table.query or table.table, table.chunk_column, table.chunk_size)).encode(),
        digest_size=8,
    ).hexdigest()
    going = at.chunking
    resumed = going is not None and going["plan"] == plan and not ctx.full_refresh
    if going is not None and not resumed:
        _abandon(ctx, int(going["batch"]))
        at = landing.position()
    batch = int(going["batch"]) if resumed and going is not None else new_batch_id(_last_id(at))
    done = set(going["done"]) if resumed and going is not None else set()
    todo = [c for c in chunks if c[0] not in done] or ([] if done else [(-1, "1 = 0")])  # empty
    step = max(1, table.parallel)
    first = not done
    for i in range(0, len(todo), step):
        group = todo[i : i + step]
        name = "empty" if group[0][0] < 0 else f"chunks-{group[0][0]:06d}-{group[-1][0]:06d}"
        path = landing.batch_dir(batch, name)
        try:
            stage([p for _, p in group], path)
        except BaseException:
            landing.store.remove_tree(path)  # no half-written group left behind
            raise
        files = parquet_files([path], landing.store)
        if ctx.validate:  # counted again before the group lands
            held = count_chunks(ctx.conn, ctx.query, [p for _, p in group])
            read = parquet_rows(files, landing.store)
            if held != read:
                landing.store.remove_tree(path)
                raise ValidationFailed(validation_error(held, read, f"chunks {name[7:]}"))
        done |= {c for c, _ in group}
        found = parquet_schema(files, landing.store)
        progress = {"batch": batch, "plan": plan, "done": sorted(done)}
        swap = first and (ctx.full_refresh or _retyped(landing, found, ctx.name, "chunked"))
        position = replace(at, cursor=None, chunking=progress, run=ctx.run_id)
        if swap:  # the pass replaces the table: there is no older complete batch then
            position = Position(chunking=progress, run=ctx.run_id)
        landing.commit(batch, files, position, found, swap)
        first = False
        fault("between-chunks", ctx.name)
    return batch, [f.uri for f in landing.files(batch - 1, batch)]


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


def _boundary_keys(data: pads.Dataset, table: Any, cursor: Cursor) -> tuple[tuple[Any, ...], ...]:
    """Keys of the extracted rows at the new cursor value (plus those delivered before at it)."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    value = decode(cursor.value)
    column = data.schema.field(table.cursor_column)
    if isinstance(value, datetime) and pa.types.is_timestamp(column.type) and column.type.tz:
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    at = data.to_table(
        columns=list(table.unique_key),
        filter=pads.field(table.cursor_column) == pa.scalar(value, type=column.type),
    )
    new = tuple(tuple(encode(_naive(v)) for v in row.values()) for row in at.to_pylist())
    old = tuple(k for k in cursor.keys if k not in new)
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
