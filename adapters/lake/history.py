"""Type 2 history (a sink's `mode: scd2`): every version of a key, with the span it was current.

A batch holds unwrap_cdc's changes: each key's image, its sequence_by value as `valid_from`,
and the delete flag. The table holds versions: `valid_from` to `valid_to` (null while current).
The batch's keys' versions are taken apart into the changes they came from (a version is its
start; a version closed where no version of its key starts was closed by a delete), merged with
the batch's changes and laid out again in sequence order, on Spark's executors. So a late or
out-of-order change lands where its sequence puts it, and a batch applied twice (a replay after
a kill) changes nothing: a change already held has the same key and start.

Most batches come in order: every key's first change is later than anything the table holds of
it. Such a batch only ends each touched key's current version and adds versions after it
(`appended`), so the sink reads and rewrites the current versions alone, never the closed
history (the Delta and Iceberg sinks keep the closed versions in files of their own:
`replacing`, `closed_apart`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rivc.compiler.connector import Scd2Columns
from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.transforms import DELETE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def repeated_change(changes: DataFrame, keys: tuple[str, ...], names: Scd2Columns) -> str | None:
    """A key with two changes at the same sequence value, shown as `k=v, ...`; None if none.
    Two changes of one key at one point in the sequence have no order: refused by name."""
    by = (*keys, names.valid_from)
    dupe = changes.groupBy(*by).count().where("count > 1").first()
    return None if dupe is None else ", ".join(f"{k}={dupe[k]!r}" for k in by)


FIRST = "_rivc_first"


def closed_apart(names: Scd2Columns) -> str:
    """The condition that parts a history's rows into files of their own: current versions."""
    return f"`{names.valid_to}` IS NULL"


def replacing(
    changes: DataFrame,
    hits: set[int],
    open_: set[int],
    past: bool,
    read: Callable[[list[int]], DataFrame | None],
    keys: tuple[str, ...],
    names: Scd2Columns,
    where: str,
    one_each: bool,
) -> tuple[DataFrame, set[int]]:
    """The rows that replace some of a history table's files, and which: `hits` are the files
    (by number) that can hold the batch's keys, `open_` those of them that may hold current
    versions (the others hold closed ones only), `read` gives the rows of some files. A batch
    in order (in_order; `past`: the table's statistics show every start of the batch after
    all it holds) reads and rewrites only the open files: the closed versions stay where they
    are. Any other batch (late changes, a replay) lays out again every version of its keys,
    from every file that can hold them. `one_each`: the batch holds one change of each key."""
    closed = hits - open_
    first = firsts(changes, keys, names, one_each)
    current = read(sorted(open_))
    if past:
        ordered, missing = True, 0
    elif current is None:
        ordered, missing = True, 1
    else:
        ordered, missing = in_order(first, current, keys, names)
    if ordered and missing and closed:  # a key without a current version: its history
        held = read(sorted(closed))
        assert held is not None
        them = first if current is None else unopened(first, current, keys, names)
        ordered = in_order(them, held, keys, names)[0]
    if ordered:
        laid = laid_out(changes, keys, names, where, one_each)
        return appended(current, laid, first, keys, names), open_
    return versions(read(sorted(hits)), changes, keys, names, where), hits


def firsts(
    changes: DataFrame, keys: tuple[str, ...], names: Scd2Columns, one_each: bool
) -> DataFrame:
    """Each of the batch's keys with its first change's start (deletes included); `one_each`:
    the batch holds one change of each key."""
    from pyspark.sql import functions as F

    if one_each:
        return changes.select(*keys, F.col(names.valid_from).alias(FIRST))
    return changes.groupBy(*keys).agg(F.min(names.valid_from).alias(FIRST))


def laid_out(
    changes: DataFrame, keys: tuple[str, ...], names: Scd2Columns, where: str, one_each: bool
) -> DataFrame:
    """The batch's changes as versions of their keys, the table not consulted. With one change
    of each key (`one_each`) nothing needs ordering: a change that is not a delete is its key's
    current version."""
    from pyspark.sql import functions as F

    if not one_each:
        return versions(None, changes, keys, names, where)
    if DELETE_COLUMN in changes.columns:
        changes = changes.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN)
    return changes.withColumn(names.is_current, F.lit(True))


def in_order(
    first: DataFrame, held: DataFrame, keys: tuple[str, ...], names: Scd2Columns
) -> tuple[bool, int]:
    """Whether every key of the batch (`first`) starts after all that `held` (table rows)
    holds of it, and how many of the batch's keys `held` has no current version of (a new key,
    or one a delete closed: its closed versions may be elsewhere). A null key is never in
    order (the full layout decides it)."""
    from pyspark.sql import functions as F

    start, end = F.col(names.valid_from), F.col(names.valid_to)
    latest = held.groupBy(*keys).agg(
        F.max(F.coalesce(end, start)).alias("_rivc_latest"),
        F.max(end.isNull().cast("int")).alias("_rivc_open"),
    )
    null_key = " OR ".join(f"`{k}` IS NULL" for k in keys)
    row = (
        first.join(latest, list(keys), "left")
        .selectExpr(
            f"count_if(_rivc_latest >= {FIRST} OR {null_key}) AS late",
            "count_if(coalesce(_rivc_open, 0) = 0) AS unopened",
        )
        .first()
    )
    assert row is not None
    return int(row["late"]) == 0, int(row["unopened"])


def unopened(
    first: DataFrame, held: DataFrame, keys: tuple[str, ...], names: Scd2Columns
) -> DataFrame:
    """The batch's keys `held` has no current version of, with their first start."""
    current = held.where(f"`{names.valid_to}` IS NULL").select(*keys)
    return first.join(current, list(keys), "left_anti")


def appended(
    current: DataFrame | None,
    laid: DataFrame,
    first: DataFrame,
    keys: tuple[str, ...],
    names: Scd2Columns,
) -> DataFrame:
    """For a batch in order (in_order): `current` (the rows that replace it, closed versions
    among them kept as they are) with each touched key's current version ended at the key's
    first change, and the batch's versions (`laid`, laid_out) after it."""
    from pyspark.sql import functions as F

    if current is None:
        return laid
    end, flag = names.valid_to, names.is_current
    ended = (
        current.join(first, list(keys), "left")
        .withColumn(
            end,
            F.when(F.col(end).isNull() & F.col(FIRST).isNotNull(), F.col(FIRST)).otherwise(
                F.col(end)
            ),
        )
        .withColumn(flag, F.col(end).isNull())
        .drop(FIRST)
    )
    return ended.unionByName(laid, allowMissingColumns=True)


def versions(
    target: DataFrame | None,
    changes: DataFrame,
    keys: tuple[str, ...],
    names: Scd2Columns,
    where: str,
) -> DataFrame:
    """The rows that replace `target` (the table's rows that may hold the batch's keys; None for
    a new table): its rows of other keys as they are, and every version of the batch's keys laid
    out again with the batch's changes. `changes` carries the scd2 columns (the end and the
    current flag null) and, with unwrap_cdc's deletes: apply, the delete flag."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    repeated = repeated_change(changes, keys, names)
    if repeated:
        raise ConnectorError(f"{where}: the batch holds two changes of key ({repeated}) at once")
    start, end, current = names.valid_from, names.valid_to, names.is_current
    columns = [c for c in changes.columns if c not in (DELETE_COLUMN, end, current)]
    deleted = F.col(DELETE_COLUMN) if DELETE_COLUMN in changes.columns else F.lit(False)
    events = changes.select(*columns, deleted.alias("_rivc_del"), F.lit(0).alias("_rivc_src"))
    kept = None
    if target is not None:
        batch_keys = changes.select(*keys).distinct()
        kept = target.join(batch_keys, list(keys), "left_anti")
        held = target.join(batch_keys, list(keys), "left_semi")
        starts = held.select(
            *(F.col(k).alias(f"_rivc_k{i}") for i, k in enumerate(keys)),
            F.col(start).alias("_rivc_start"),
        )
        closed = held.where(F.col(end).isNotNull()).join(
            starts,
            [F.col(k) == F.col(f"_rivc_k{i}") for i, k in enumerate(keys)]
            + [F.col(end) == F.col("_rivc_start")],
            "left_anti",
        )
        types = dict(changes.dtypes)
        removed = closed.select(
            *(
                F.col(end).alias(c)
                if c == start
                else F.col(c)
                if c in keys
                else F.lit(None).cast(types[c]).alias(c)
                for c in columns
            ),
            F.lit(True).alias("_rivc_del"),
            F.lit(1).alias("_rivc_src"),
        )
        events = events.unionByName(
            held.select(*columns, F.lit(False).alias("_rivc_del"), F.lit(1).alias("_rivc_src")),
            allowMissingColumns=True,
        ).unionByName(removed)
    if target is not None:  # one event per key and start: the batch's own (a replay)
        one = Window.partitionBy(*keys, start).orderBy("_rivc_src")
        events = events.withColumn("_rivc_n", F.row_number().over(one)).where("_rivc_n = 1")
    order = Window.partitionBy(*keys).orderBy(start)
    laid = (
        events.withColumn(end, F.lead(start).over(order))
        .where(~F.col("_rivc_del"))
        .withColumn(current, F.col(end).isNull())
        .select(*(c for c in changes.columns if c != DELETE_COLUMN))
    )
    return laid if kept is None else kept.unionByName(laid, allowMissingColumns=True)
