"""Type 2 history (a sink's `mode: scd2`): every version of a key, with the span it was current.

A batch holds unwrap_cdc's changes: each key's image, its sequence_by value as `valid_from`,
and the delete flag. The table holds versions: `valid_from` to `valid_to` (null while current).
The batch's keys' versions are taken apart into the changes they came from (a version is its
start; a version closed where no version of its key starts was closed by a delete), merged with
the batch's changes and laid out again in sequence order, on Spark's executors. So a late or
out-of-order change lands where its sequence puts it, and a batch applied twice (a replay after
a kill) changes nothing: a change already held has the same key and start.
"""

from __future__ import annotations

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
    # one event per key and start: the batch's own when the table held it too (a replay)
    one = Window.partitionBy(*keys, start).orderBy("_rivc_src")
    order = Window.partitionBy(*keys).orderBy(start)
    laid = (
        events.withColumn("_rivc_n", F.row_number().over(one))
        .where("_rivc_n = 1")
        .withColumn(end, F.lead(start).over(order))
        .where(~F.col("_rivc_del"))
        .withColumn(current, F.col(end).isNull())
        .select(*(c for c in changes.columns if c != DELETE_COLUMN))
    )
    return laid if kept is None else kept.unionByName(laid, allowMissingColumns=True)
