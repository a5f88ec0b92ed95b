"""What the change-log driver (changelog.py) does with a log's landing table: a batch's
envelope files written as the changes come, the landed history's newest image of each key, the
sequence value after it, and deletes in the envelope's own shape (a truncate, a row a new
snapshot no longer finds)."""

from __future__ import annotations

import re
from typing import Any

from rivc.compiler.errors import ConnectorError

from .extract import parquet_files
from .landing import BATCH, Landing

ROWS_PER_FILE = 100_000


class BatchParts:
    """A batch's Parquet files under the landing table, written as its changes come."""

    def __init__(self, landing: Landing, batch: int, schema: Any, rows_per_file: int) -> None:
        self.landing, self.store = landing, landing.store
        self.schema = schema
        self.rows_per_file = rows_per_file
        self.begin(batch)

    def begin(self, batch: int) -> None:
        """Write batch `batch` from now on (the one before is landed)."""
        self.out = self.landing.batch_dir(batch, "changes")
        self.rows = 0
        self.count = 0
        self.store.remove_tree(self.out)  # a killed run's files of the same batch
        fs, path = self.store.filesystem(self.out)
        fs.create_dir(path)

    def write(self, table: Any) -> None:
        import pyarrow.parquet as pq

        fs = self.store.filesystem(self.out)[0]
        for i in range(0, len(table), self.rows_per_file):
            part = f"{self.out}/part-{self.count:05d}.parquet"
            with fs.open_output_stream(self.store.filesystem(part)[1]) as sink:
                pq.write_table(table.slice(i, self.rows_per_file), sink, compression="snappy")
            self.count += 1
        self.rows += len(table)

    def files(self) -> list[str]:
        return parquet_files([self.out], self.store) if self.count else []

    def discard(self) -> None:
        self.store.remove_tree(self.out)


def check_shape(
    held: dict[str, str] | None, now: dict[str, str], label: str, name: str
) -> list[str]:
    """The table's columns now (`now`, the envelope's Spark types) against what the landed
    changes hold (`held`): a column dropped or renamed, or delivered as another type, is
    refused by name. Returns the columns added (their older versions hold NULL)."""
    if not held or "after" not in held:
        return []
    was, types = _fields(held["after"]), _fields(now["after"])
    for column, kind in was.items():
        if column not in types:
            change = "was dropped or renamed"
        elif types[column] != kind:
            change = f"changed type ({kind} -> {types[column]})"
        else:
            continue
        raise ConnectorError(
            f"{label}: column {column} {change} in the source table; a table's changes can "
            "only add columns: take a new snapshot with "
            f"`rivc run --full-refresh --select source:{name}`"
        )
    return [column for column in types if column not in was]


def _fields(struct: str) -> dict[str, str]:
    """A Spark `struct<a:int,b:decimal(10,2)>` type's fields and their types."""
    body, out, depth, start = struct[len("struct<") : -1], {}, 0, 0
    for i, ch in enumerate(body + ","):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            field, _, kind = body[start:i].partition(":")
            out[field.strip()] = kind.strip()
            start = i + 1
    return out


def history(landing: Landing) -> list[str]:
    """The landed changes' files."""
    return [f.uri for f in landing.files(None, landing.position().batch)]


def dataset(landing: Landing, files: list[str]) -> Any:
    """The changes of `files` as one dataset, in the columns of the newest batch's file: a
    table's shape only gains columns (check_shape), and older files read them as NULL."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    fs, _ = landing.store.filesystem(files[0])
    paths = [landing.store.filesystem(f)[1] for f in files]
    newest = max(paths, key=_batch_of)
    with fs.open_input_file(newest) as handle:
        schema = pq.read_schema(handle)
    return ds.dataset(paths, filesystem=fs, schema=schema)


def _batch_of(path: str) -> int:
    found = re.search(rf"{BATCH}=(\d+)/", path)
    assert found is not None, path  # every landed file is under its batch's folder
    return int(found.group(1))


def next_seq(landing: Landing, files: list[str]) -> int:
    """The sequence value after every change in `files` (0 when there are none): a new
    snapshot's rows take it, so a scd2 sink's versions stay in order."""
    import pyarrow.compute as pc

    if not files:
        return 0
    landed = pc.max(dataset(landing, files).to_table(columns=["seq"]).column("seq")).as_py()
    return 0 if landed is None else int(landed) + 1


def newest(
    landing: Landing,
    files: list[str],
    names: list[str],
    only: set[tuple[Any, ...]] | None = None,
) -> dict[tuple[Any, ...], Any]:
    """Each key (the values of `names`; those in `only` when given) with its newest image in
    the changes of `files`, for the keys not deleted there."""
    if not files or not names or only is not None and not only:
        return {}
    found: dict[tuple[Any, ...], tuple[Any, str, Any]] = {}
    columns = ["op", "before", "after", "seq"]
    for row in dataset(landing, files).to_table(columns=columns).to_pylist():
        image = row["after"] if row["op"] != "d" else row["before"]
        key = tuple(image[k] for k in names)
        if only is not None and key not in only:
            continue
        if key not in found or row["seq"] >= found[key][0]:
            found[key] = (row["seq"], row["op"], row["after"])
    return {key: image for key, (_, op, image) in found.items() if op != "d"}


def deletes(gone: list[Any], seq: int, schema: Any) -> Any:
    """A delete at `seq` for each of `gone`'s images, in the envelope's `schema`: the rows a
    truncate took, or rows the landed history holds and a new snapshot does not, so that
    consumers that merge end equal to the table."""
    from decimal import Decimal

    import pyarrow as pa

    n = len(gone)
    columns = {
        "op": pa.array(["d"] * n, pa.string()),
        "before": pa.array(gone, schema.field("before").type),
        "seq": pa.array([Decimal(seq)] * n, schema.field("seq").type),
    }
    return pa.table(
        {f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in schema}, schema=schema
    )
