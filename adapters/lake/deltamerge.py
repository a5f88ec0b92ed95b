"""A merge into a Delta table by key that rewrites only the files that can hold the batch's
keys (their statistics and a probe of the keys say which), in one commit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import Scd2Columns
from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ..plane.base import WriteResult
from ..plane.tableread import DataFile, read_files
from ..plane.taskwrite import partition_value
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
from .history import versions

if TYPE_CHECKING:
    from deltalake import DeltaTable
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
    (mode scd2) the batch's changes become versions of their keys instead (history.py)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    deletes = DELETE_COLUMN in df.columns
    upserts = df.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN) if deletes else df
    where = f"merge into {uri}"

    counted = df.groupBy(*keys).count()
    totals = counted.agg(F.sum("count").alias("rows"), F.max("count").alias("most")).first()
    batch_rows = int(totals["rows"] or 0) if totals else 0
    if history is None and totals and (totals["most"] or 0) > 1:
        dupe = counted.where("count > 1").first()
        shown = ", ".join(f"{k}={dupe[k]!r}" for k in keys) if dupe else ""
        raise ConnectorError(f"merge into {uri}: the batch holds key ({shown}) more than once")
    dt = open_table(uri, store.delta)
    if dt is None:
        if history is not None:
            upserts = versions(None, df, keys, history, where)
        schema = arrow_schema(upserts)
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
    candidates = _candidates(df, dt, files, keys, parts)
    target = read_files(df.sparkSession, candidates, stored, store) if candidates else None
    if target is not None:  # the columns the batch adds: NULL in the rows already there
        for f in schema:
            if f.name not in stored.names:
                target = target.withColumn(f.name, F.lit(None).cast(from_arrow_type(f.type)))
    if history is not None:
        out = versions(target, df, keys, history, where)
    elif target is None:
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
        removes=tuple(rel[f.uri] for f in candidates),
    )
    result.removed = len(candidates)
    result.rows = batch_rows  # rows merged, as a merge reports them (the rewrite is in bytes)
    return result


def _candidates(
    df: DataFrame,
    dt: DeltaTable,
    files: list[DataFile],
    keys: tuple[str, ...],
    parts: tuple[str, ...],
) -> list[DataFile]:
    """The files that may hold one of the batch's keys: each Spark task sorts the first key's
    values of its rows and looks up every file's [min, max] range (or partition value) in them;
    a file without a range is always a candidate."""

    if not files:
        return []
    key = keys[0]
    actions = add_actions(dt).to_pylist()
    ranges: list[tuple[int, Any, Any]] = []
    for n, a in enumerate(actions):
        if key in parts:
            value = a.get(f"partition.{key}")
            ranges.append((n, value, value))
        else:
            ranges.append((n, a.get(f"min.{key}"), a.get(f"max.{key}")))
    probe = KeyProbe(key, key in parts, ranges)
    hits = df.select(key).mapInArrow(probe, "n int").distinct().collect()
    chosen = {r.n for r in hits}
    return [f for n, f in enumerate(files) if n in chosen]


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
