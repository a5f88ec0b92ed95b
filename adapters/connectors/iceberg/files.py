"""Which data files of an Iceberg table a batch written by Spark's tasks replaces, and the
data files for what the tasks wrote: an upsert's files that can hold a batch key, what
replaces them, and a partitions overwrite's files in the partitions the batch writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rivc.compiler.connector import Scd2Columns
from rivc.compiler.rendering.transforms import DELETE_COLUMN
from rivc.compiler.sql import quote

from ...lake.history import replacing
from ...util.storage import Store
from .catalog import footer_data_file, spark_arrow_schema, store_path

# Key types whose Iceberg bounds compare with the values Arrow gives (others: every file counts)
BOUNDED = ("int", "long", "string", "decimal", "date")


def upsert_files(table: Any, df: Any, key: str) -> list[Any] | None:
    """The live data files that can hold one of the batch's `key` values, by each file's lower
    and upper bounds of the key column, matched in Spark's tasks (the keys stay on the
    executors); a file without bounds always can. None when the table has delete files, which
    only pyiceberg's own delete applies."""
    from datetime import date, timedelta

    from pyiceberg.conversions import from_bytes

    from ...lake.deltamerge import KeyProbe

    tasks = list(table.scan().plan_files())
    if any(t.delete_files for t in tasks):
        return None
    if not tasks:
        return []
    field = table.schema().find_field(key)
    kind = str(field.field_type).split("(")[0]
    ranges: list[tuple[int, Any, Any]] = []
    for n, task in enumerate(tasks):
        lo = (task.file.lower_bounds or {}).get(field.field_id)
        hi = (task.file.upper_bounds or {}).get(field.field_id)
        if kind not in BOUNDED or lo is None or hi is None:
            ranges.append((n, None, None))
            continue
        low: Any = from_bytes(field.field_type, lo)
        high: Any = from_bytes(field.field_type, hi)
        if kind == "date":  # days since the epoch
            low, high = date(1970, 1, 1) + timedelta(low), date(1970, 1, 1) + timedelta(high)
        ranges.append((n, low, high))
    hits = df.select(key).mapInArrow(KeyProbe(key, False, ranges), "n int").distinct().collect()
    chosen = {r.n for r in hits}
    return [t.file for n, t in enumerate(tasks) if n in chosen]


def upserted(
    table: Any,
    df: Any,
    found: list[Any],
    keys: tuple[str, ...],
    store: Store,
    history: Scd2Columns | None,
) -> tuple[Any, list[Any]]:
    """What replaces some of `found` (the files that can hold a batch key), and which: their
    rows without the batch's keys, plus the batch's rows that are not deletes, in the table's
    column order (columns the batch lacks read as null through the name mapping). With
    `history` (mode scd2), history.replacing decides: a batch in order ends the current
    versions of its keys in the files that may hold current versions (a file whose every row
    has an end, its null count 0, holds closed ones only; no count: it may hold current ones), any other lays out every version
    of its keys again."""
    from ...plane.tableread import DataFile, read_files

    stored = spark_arrow_schema(table)

    def read(numbers: list[int]) -> Any:
        if not numbers:
            return None
        files = [
            DataFile(store_path(found[n].file_path), found[n].file_size_in_bytes, {})
            for n in numbers
        ]
        return read_files(df.sparkSession, files, stored, store)

    if history is not None:
        end = table.schema().find_field(history.valid_to).field_id
        open_ = {n for n, f in enumerate(found) if (f.null_value_counts or {}).get(end) != 0}
        where = "scd2 into " + ".".join(table.name())
        hits = set(range(len(found)))
        rows, chosen = replacing(df, hits, open_, False, read, keys, history, where, False)
        replaced = [found[n] for n in sorted(chosen)]
    else:
        replaced = found
        rows = df
        if DELETE_COLUMN in df.columns:
            rows = df.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN)
        target = read(list(range(len(found))))
        if target is not None:
            rows = target.join(df.select(*keys), list(keys), "left_anti").unionByName(
                rows, allowMissingColumns=True
            )
    names = table.schema().column_names
    return rows.select(*[quote(n) for n in names if n in rows.columns]), replaced


def data_files(
    table: Any, metadata: Any, paths: list[str], written: list[Any], bucketed: set[int]
) -> list[Any]:
    """The data files for Parquet files Spark wrote, with their statistics from the footers
    (as `add_files` reads them). A partition field computed by an order-preserving transform
    is inferred from the file's bounds, as `add_files` does; a bucket (`bucketed`: their
    positions in the spec) cannot be, and is the value the task wrote the file under."""
    from pyiceberg.io.pyarrow import parquet_files_to_data_files

    if not bucketed:
        return list(parquet_files_to_data_files(table.io, metadata, iter(paths)))
    schema, spec = metadata.schema(), metadata.spec()

    def partition(w: Any) -> Callable[[Any], list[Any]]:
        def values(stats: Any) -> list[Any]:
            out = []
            for i, field in enumerate(spec.fields):
                if i in bucketed:
                    value = w.partition.get(f"_rivc_p{i}")
                    out.append(None if value is None else int(value))
                else:
                    out.append(stats._partition_value(field, schema))
            return out

        return values

    return [
        footer_data_file(table, metadata, path, metadata.default_spec_id, partition(w))
        for path, w in zip(paths, written, strict=True)
    ]


def in_partitions(table: Any, added: list[Any]) -> list[Any]:
    """The table's live data files in the partitions (of the same spec) that `added` is
    written to: what a partitions overwrite replaces. An unpartitioned table is one partition."""
    touched, spec = {tuple(f.partition) for f in added}, table.spec().spec_id  # added: its spec
    return [
        t.file
        for t in table.scan().plan_files()
        if t.file.spec_id == spec and tuple(t.file.partition) in touched
    ]
