"""A merge into a Delta table by key that rewrites only the files that can hold the batch's
keys (their statistics and a probe of the keys say which), in one commit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import Scd2Columns
from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ..plane.base import WriteResult
from ..plane.tableread import DataFile, read_files
from ..plane.taskwrite import met_apart, partition_value
from ..util.storage import Store
from .deltatable import (
    NO_STAMP,
    Stamp,
    add_actions,
    arrow_schema,
    commit,
    open_table,
    table_files,
    table_schema,
    write_batch,
)
from .history import closed_apart, laid_out, replacing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def merge(
    df: DataFrame,
    uri: str,
    store: Store,
    keys: tuple[str, ...],
    schema: Any = None,
    stamp: Stamp = NO_STAMP,
    codec: str = "snappy",
    partition_by: tuple[str, ...] = (),
    configuration: dict[str, str] | None = None,
    history: Scd2Columns | None = None,
) -> WriteResult:
    """Upsert `df` by `keys` on Spark's executors (a new table is created with `partition_by`). The files that can hold a batch key (by
    partition value and the first key's min/max statistics, matched by a join in Spark) are
    read, joined with the batch and rewritten; one commit removes them and adds the new files,
    with the batch id. Files no key can be in are not touched. Rows unwrap_cdc flagged as
    deletes (DELETE_COLUMN) take their key's row out of the table and add none. With `history`
    (mode scd2) the batch's changes become versions of their keys instead (history.py), and
    closed versions go to files apart from current ones, which a batch in order never reads."""
    from pyspark.sql import functions as F

    deletes = DELETE_COLUMN in df.columns
    upserts = df.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN) if deletes else df
    where = f"merge into {uri}"

    starts = () if history is None else (F.min(history.valid_from).alias("first"),)
    counted = df.groupBy(*keys).agg(F.count(F.lit(1)).alias("count"), *starts)
    totals = counted.agg(
        F.sum("count").alias("rows"),
        F.max("count").alias("most"),
        *((F.min("first").alias("first"),) if starts else ()),
    ).first()
    batch_rows = int(totals["rows"] or 0) if totals else 0
    one_each = not totals or (totals["most"] or 0) <= 1
    if history is None and not one_each:
        dupe = counted.where("count > 1").first()
        shown = ", ".join(f"{k}={dupe[k]!r}" for k in keys) if dupe else ""
        raise ConnectorError(f"merge into {uri}: the batch holds key ({shown}) more than once")
    dt = open_table(uri, store.delta)
    if dt is None:
        if history is not None:
            upserts = laid_out(df, keys, history, where, one_each)
        schema = arrow_schema(upserts)
        apart = None if history is None else closed_apart(history)
        return write_batch(
            upserts,
            uri,
            store,
            "append",
            schema,
            partition_by,
            stamp,
            codec,
            configuration=configuration,
            apart=apart,
        )
    if not batch_rows:  # nothing to merge: a consumer's commit still records its places
        if len(stamp.txns) < 2:
            return WriteResult()
        retries, took = commit(uri, store, "append", table_schema(dt), [], stamp=stamp)
        return WriteResult(retries=retries, commits=1, commit_s=took)
    files = table_files(dt, uri)
    stored = table_schema(dt)
    schema = stored if schema is None else schema
    parts = tuple(dt.metadata().partition_columns)
    actions = add_actions(dt).to_pylist()  # in the order of `files`
    hits = _candidates(df, actions, keys, parts)
    apart = None
    if history is not None:
        out, chosen = _history(
            df,
            files,
            actions,
            hits,
            keys,
            history,
            schema,
            stored,
            store,
            where,
            one_each,
            totals["first"] if totals else None,
        )
        apart = closed_apart(history)
    else:
        chosen = hits
        target = _read(df, [files[n] for n in chosen], schema, stored, store)
        if target is None:
            out = upserts
        else:
            out = target.join(df.select(*keys), list(keys), "left_anti").unionByName(
                upserts, allowMissingColumns=True
            )
    out = out.select(*[F.col(n) for n in schema.names if n in out.columns])
    rel = {f.uri: f.uri[len(uri.rstrip("/")) + 1 :] for f in files}
    result = write_batch(
        out,
        uri,
        store,
        "append",
        schema,
        parts,
        stamp,
        codec,
        removes=tuple(rel[files[n].uri] for n in sorted(chosen)),
        apart=apart,
    )
    result.removed = len(chosen)
    result.rows = batch_rows  # rows merged, as a merge reports them (the rewrite is in bytes)
    return result


def _read(
    df: DataFrame, files: list[DataFile], schema: Any, stored: Any, store: Store
) -> DataFrame | None:
    """The rows of `files`, with the columns the batch adds NULL in them; None for no file."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    if not files:
        return None
    target = read_files(df.sparkSession, files, stored, store)
    for f in schema:
        if f.name not in stored.names:
            target = target.withColumn(f.name, F.lit(None).cast(from_arrow_type(f.type)))
    return target


def _history(
    df: DataFrame,
    files: list[DataFile],
    actions: list[dict[str, Any]],
    hits: set[int],
    keys: tuple[str, ...],
    names: Scd2Columns,
    schema: Any,
    stored: Any,
    store: Store,
    where: str,
    one_each: bool,
    first_start: Any,
) -> tuple[DataFrame, set[int]]:
    """The rows that replace the chosen files of a scd2 table, and those files
    (history.replacing), from the add actions' statistics: a file whose every row has an end
    holds closed versions only (statistics missing: it may hold current ones)."""
    open_ = {n for n in hits if actions[n].get(f"null_count.{names.valid_to}") != 0}
    footers: dict[int, Any] = {}  # each file's footer read once, for both columns

    def footer_max(n: int, column: str) -> Any:
        if n not in footers:
            footers[n] = _footer(store, files[n].uri)
        return _range(footers[n], column)[1]

    past = _after_all(first_start, {n: actions[n] for n in hits}, names, footer_max)
    return replacing(
        df,
        hits,
        open_,
        past,
        lambda ns: _read(df, [files[n] for n in ns], schema, stored, store),
        keys,
        names,
        where,
        one_each,
    )


def _after_all(
    start: Any,
    actions: dict[int, dict[str, Any]],
    names: Scd2Columns,
    footer_max: Callable[[int, str], Any],
) -> bool:
    """Whether `start` is later than every start and end in the files `actions` (by number:
    those that can hold the batch's keys; no other file holds a version of them), by their
    Delta statistics, else the maximum in their Parquet footers (`footer_max`: exact for the
    decimals and timestamps rivc's Delta statistics leave out, such as a change log's decimal
    `seq`). False when a file has no maximum of a column that is not all NULL there."""
    import datetime
    import decimal

    if not isinstance(start, int | float | decimal.Decimal | datetime.date):
        return False
    try:
        for n, a in actions.items():
            rows = a.get("num_records")
            if rows == 0:
                continue
            for column in (names.valid_from, names.valid_to):
                if rows is not None and a.get(f"null_count.{column}") == rows:
                    continue  # all NULL: no maximum to compare
                top = a.get(f"max.{column}")
                if top is None:
                    top = footer_max(n, column)
                if top is None or not _utc(top) < _utc(start):
                    return False
    except (TypeError, ValueError):  # values the statistics hold in another form
        return False
    return True


def _candidates(
    df: DataFrame, actions: list[dict[str, Any]], keys: tuple[str, ...], parts: tuple[str, ...]
) -> set[int]:
    """The files (numbers of their add `actions`) that may hold one of the batch's keys: each
    Spark task sorts the first key's values of its rows and looks up every file's [min, max]
    range (or partition value) in them; a file without a range is always a candidate."""

    if not actions:
        return set()
    key = keys[0]
    ranges: list[tuple[int, Any, Any]] = []
    for n, a in enumerate(actions):
        if key in parts:
            value = a.get(f"partition.{key}")
            ranges.append((n, value, value))
        else:
            ranges.append((n, a.get(f"min.{key}"), a.get(f"max.{key}")))
    probe = KeyProbe(key, key in parts, ranges)
    hits = df.select(key).mapInArrow(probe, "n int").distinct().collect()
    return {r.n for r in hits}


@dataclass(frozen=True)
class KeyProbe:
    """What each task runs to find the files its keys can be in."""

    key: str
    as_text: bool  # a partition column: values compare as Delta's log writes them
    ranges: list[tuple[int, Any, Any]]

    def __call__(self, batches: Any) -> Any:
        import bisect

        import pyarrow as pa

        values: set[Any] = set()
        for b in batches:
            column = b.column(0).to_pylist()
            values.update(
                (partition_value(v) if self.as_text else v) for v in column if v is not None
            )
        if not values:
            return
        ordered = sorted(values)
        hit = []
        for n, lo, hi in self.ranges:
            if lo is None or hi is None:
                hit.append(n)
                continue
            i = bisect.bisect_left(ordered, lo)
            if i < len(ordered) and ordered[i] <= hi:
                hit.append(n)
        if hit:
            yield pa.RecordBatch.from_pydict({"n": pa.array(hit, pa.int32())})


def replace_window(
    df: DataFrame,
    uri: str,
    store: Store,
    column: str,
    window: tuple[Any, Any],
    schema: Any,
    stamp: Stamp = NO_STAMP,
) -> WriteResult:
    """The table's rows whose `column` falls in [start, end) replaced by `df`'s rows in it (dbt's
    microbatch: a batch's rows outside its window, from a parent read whole, are left out, as
    dbt-duckdb's insert does), in one commit: the files whose range of `column` meets the
    window are read, their other rows kept and written again beside the batch, the batch's rows
    in files of their own; the rest are not touched. A file's range is its Delta statistics,
    else its Parquet footer's (rivc keeps no timestamp statistics in the log: docs/types.md),
    else it is read. Run twice, it gives the same table. `rows` of the result: the batch's rows
    in the window."""
    from pyspark.sql import functions as F

    dt = open_table(uri, store.delta)
    if dt is None:
        raise ConnectorError(f"{uri}: no table to replace a window of")
    start, end = window
    files = table_files(dt, uri)
    stored = table_schema(dt)
    parts = tuple(dt.metadata().partition_columns)
    chosen = []
    for n, a in enumerate(add_actions(dt).to_pylist()):
        if a.get("num_records") == 0:
            continue
        if column in parts:
            low = high = a.get(f"partition.{column}")
        else:
            low, high = a.get(f"min.{column}"), a.get(f"max.{column}")
            if low is None or high is None:
                low, high = _footer_range(store, files[n].uri, column)
        try:
            outside = (
                low is not None and high is not None and (_utc(high) < start or _utc(low) >= end)
            )
        except TypeError:  # a value the statistics hold in another form: read the file
            outside = False
        if not outside:
            chosen.append(n)
    at = F.col(column)
    inside = (at >= F.lit(start)) & (at < F.lit(end))
    out = df.where(inside)  # a row the batch holds outside its window is not its to write
    kept = _read(df, [files[n] for n in chosen], schema, stored, store)
    if kept is not None:
        out = kept.where(~inside | at.isNull()).unionByName(out, allowMissingColumns=True)
    out = out.select(*[F.col(n) for n in schema.names if n in out.columns])
    rel = {f.uri: f.uri[len(uri.rstrip("/")) + 1 :] for f in files}
    result = write_batch(
        out,
        uri,
        store,
        "append",
        schema,
        parts,
        stamp,
        removes=tuple(rel[files[n].uri] for n in chosen),
        apart=_window_sql(column, start, end),
    )
    result.rows = sum(r or 0 for path, r, _ in result.files if met_apart(path))
    return result


def _window_sql(column: str, start: Any, end: Any) -> str:
    """`column` in [start, end) as Spark SQL, false for NULL (`apart`'s condition: the batch's
    rows go to files of their own, and a NULL row to one side, never to neither)."""
    from rivc.compiler.microbatch import literal
    from rivc.compiler.sql import quote

    c = quote(column)
    return f"COALESCE({c} >= {literal(start)} AND {c} < {literal(end)}, FALSE)"


def _footer_range(store: Store, uri: str, column: str) -> tuple[Any, Any]:
    """A Parquet file's [min, max] of `column` from its footer (_range)."""
    return _range(_footer(store, uri), column)


def _footer(store: Store, uri: str) -> Any:
    """A Parquet file's footer (its metadata)."""
    import pyarrow.parquet as pq

    fs, path = store.filesystem(uri)
    with fs.open_input_file(path) as handle:
        return pq.ParquetFile(handle).metadata


def _range(meta: Any, column: str) -> tuple[Any, Any]:
    """[min, max] of `column` in a footer; (None, None) when a row group has no range for it."""
    low = high = None
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            col = group.column(c)
            if col.path_in_schema != column:
                continue
            st = col.statistics
            if st is None or not st.has_min_max:
                if st is not None and st.null_count == group.num_rows:
                    break  # nothing but NULLs: no range to add
                return None, None
            low = st.min if low is None else min(low, st.min)
            high = st.max if high is None else max(high, st.max)
    return low, high


def _utc(value: Any) -> Any:
    """A statistic's value comparable with a window's bounds (aware datetimes): a date its
    midnight, a naive timestamp as UTC, a partition value's text parsed."""
    import datetime

    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.UTC)
    return value
