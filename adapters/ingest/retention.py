"""Retention of landed batches (`rivc maintain`): the batches that every consumer took and that
are older than the project's `landing_retention` leave the landing table, so that it does not
grow without end, while `source()` and every consumer's next batch stay what they were.

- a snapshot's complete batches older than its newest go (readers take the newest only);
- a keyed log's oldest batches are folded into one, the newest version of each key up to the
  lowest place a consumer holds: `source()` (each key's newest version) reads the same rows, and
  a consumer's next batches are the same ones;
- a log without a key keeps every batch: the log is the table.

Each is one Delta commit, under the run lock; a kill before it (`mid-retention`, once the
folded file is written) leaves the table as it was, and a file no commit references, which the
next vacuum removes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rivc.compiler.sql import StandardQuotes, quote

from ..delivery.consume import WHOLE
from ..plane.tableread import DataFile
from ..util.faults import fault
from ..util.storage import join
from .landing import BATCH, Landing, batch_of

DUCKDB = StandardQuotes()  # the files of a landing table are folded in DuckDB


@dataclass(frozen=True)
class Retained:
    batches: int  # landed batches folded or removed
    into: int | None = None  # the batch a log's old batches were folded into


def retain(landing: Landing, name: str, places: Sequence[int | None], keep_s: int) -> Retained:
    """Apply retention to one landing table; `places`: what each of its consumers holds (None
    for one that never took it, which starts from the first batch that is left)."""
    dt = landing.table()
    if dt is None:
        return Retained(0)
    at = landing.position(dt)
    if at.batch is None:
        return Retained(0)
    cutoff = int(time.time() * 1000) - keep_s * 1000
    files = landing.files(None, at.batch, dt)
    ids = sorted({batch_of(f) for f in files})
    if landing.role == "snapshot":
        old = {b for b in ids if b < at.batch and b <= cutoff}
        if not old:
            return Retained(0)
        gone = [landing.rel(f.uri) for f in files if batch_of(f) in old]
        fault("mid-retention", name)
        landing.commit(at.batch, [], at, landing.schema(dt), removes=gone)
        return Retained(len(old))
    if not landing.keys:
        return Retained(0)
    taken = [p for p in places if p is not None and p != WHOLE]
    limit = min([*taken, at.batch])
    fold = [b for b in ids if b <= limit and b <= cutoff]
    if len(fold) < 2:
        return Retained(0)
    into = fold[-1]
    folding = [f for f in files if batch_of(f) in set(fold)]
    folded = _fold(landing, folding, into)
    fault("mid-retention", name)
    try:
        landing.commit(
            into,
            folded,
            replace(at, floor=into),
            landing.schema(dt),
            removes=[landing.rel(f.uri) for f in folding],
        )
    except BaseException:
        landing.store.remove_tree(folded[0].rsplit("/", 1)[0])
        raise
    return Retained(len(fold), into)


def _fold(landing: Landing, files: list[DataFile], into: int) -> list[str]:
    """Each key's newest version among `files` (newest batch first, then the highest cursor),
    written as one Parquet file into batch `into`; DuckDB sorts and spills, so memory does not
    grow with the table."""
    import duckdb
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    dt = landing.table()
    assert dt is not None
    stored = landing.schema(dt)
    fs, root = landing.store.filesystem(landing.uri)
    data = pads.dataset(
        [landing.store.filesystem(f.uri)[1] for f in files],
        schema=pa.schema([*stored, pa.field(BATCH, pa.int64())]),
        filesystem=fs,
        format="parquet",
        partitioning=pads.partitioning(pa.schema([(BATCH, pa.int64())]), flavor="hive"),
        partition_base_dir=root,
    )
    keys = ", ".join(quote(k, DUCKDB) for k in landing.keys)
    order = f"{quote(BATCH, DUCKDB)} DESC" + (
        f", {quote(landing.order, DUCKDB)} DESC NULLS LAST" if landing.order else ""
    )
    names = ", ".join(quote(n, DUCKDB) for n in stored.names)
    con = duckdb.connect()
    try:
        con.register("landed", data)
        reader = con.sql(
            f"SELECT {names} FROM (SELECT *, row_number() OVER (PARTITION BY {keys} "
            f"ORDER BY {order}) AS _rivc_n FROM landed) WHERE _rivc_n = 1"
        ).to_arrow_reader(65_536)
        target = join(landing.batch_dir(into, f"fold-{uuid.uuid4().hex[:12]}"), "part-0.parquet")
        path = landing.store.filesystem(target)[1]
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path, compression=None) as out:
            with pq.ParquetWriter(out, stored, compression="snappy") as writer:
                for batch in reader:
                    writer.write_batch(batch.cast(stored))
    finally:
        con.close()
    return [target]
