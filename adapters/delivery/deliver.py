"""Delivering one batch to one sink: skip a replay, write (Spark's executors, adopted files, or
a stream of record batches), then record the commit in the state store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import SinkConfig
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.locate import STATE_DIR
from rivc.compiler.registry import connector

from ..plane.base import RETRY_DELAYS, Can, SinkContext, WriteResult
from ..plane.registry import sink_for
from ..state import StateStore
from ..util.faults import fault
from ..util.storage import Store, is_local, join, shares_disk
from .parquet import dataset, dataset_head, staged, staged_at

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame

STAGING = "staging"  # batches on their way from Spark to a connector


class BatchWriter:
    """The foreachBatch function of a sink: skip a replayed batch, write, then record the commit.

    It holds only picklable values, so Spark Connect can run it in a server-side Python worker.
    """

    def __init__(
        self, nid: str, connector: str, config: Any, ctx: SinkContext, run_id: str, state: Path
    ) -> None:
        self.nid, self.connector, self.config, self.ctx = nid, connector, config, ctx
        self.run_id, self.state_path = run_id, state
        # Where Spark cannot open the state store (a stream's batches written by a Spark
        # Connect server that does not see rivc's disk): the receipts' location, which rivc
        # records from (collect_receipts)
        self.receipts: tuple[str, Store] | None = None
        # What the batch being written consumed (input -> batch), committed with it. When
        # they describe the whole input, a target that holds them already skips the batch;
        # else a replayed batch id is what it skips.
        self.places: dict[str, int] = {}
        self.complete = False

    def sink(self) -> Any:
        return sink_for(self.connector, self.config, replace(self.ctx, places=self.places))

    def held(self, inputs: list[str]) -> dict[str, int | None] | None:
        """What the target holds of each input; None when it cannot record it."""
        sink = self.sink()
        return sink.places(inputs) if Can.RECORD_PLACES in sink.can else None

    def record(self, kind: str, batch_id: int, **fields: Any) -> None:
        """Record a committed batch (`batch`) or its quality counts (`quality`) in the state
        store, or leave a receipt of it for rivc to record."""
        if self.receipts is not None:
            body = {"kind": kind, "sink": self.nid, "batch_id": batch_id, **fields}
            # the batch is committed: retrying the receipt alone, not the batch (a retried
            # batch would find itself in the table and be recorded as a replay, without rows)
            for delay in (*RETRY_DELAYS, None):
                try:
                    self._receipt(kind, batch_id, body)
                    return
                except OSError:
                    if delay is None:
                        raise
                    time.sleep(delay)
        state = StateStore(self.state_path)
        try:
            if kind == "batch":
                state.commit_batch(self.nid, batch_id, **fields)
            else:
                state.record_quality(self.nid, batch_id, **fields)
        finally:
            state.close()

    def _receipt(self, kind: str, batch_id: int, body: dict[str, Any]) -> None:
        assert self.receipts is not None
        where, store = self.receipts
        name = f"{batch_id:012d}-{kind}-{self.nid.replace(':', '-')}.json"
        fs, path = store.filesystem(join(where, name))
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)  # a local disk needs it
        if not is_local(where):  # an object appears whole when its upload completes
            with fs.open_output_stream(path, compression=None) as out:
                out.write(json.dumps(body).encode())
            return
        with fs.open_output_stream(path + ".tmp", compression=None) as out:
            out.write(json.dumps(body).encode())
        fs.move(path + ".tmp", path)  # whole or absent

    def last_batch_id(self) -> int | None:
        """The highest batch id of this sink that the state store or the table itself holds:
        new batches start above it, whatever was reset or lost (a table never skips new data)."""
        state = StateStore(self.state_path)
        try:
            known = [state.last_batch_id(self.nid)]
        finally:
            state.close()
        known.append(self.sink().last_batch_id())
        return max((k for k in known if k is not None), default=None)

    def refuse_unwritable(self, schema: Any) -> None:
        """Compile refuses the column types it knows the sink cannot hold; this, the rest,
        before any write or retry."""
        fmt = self.config.file_format() if isinstance(self.config, SinkConfig) else None
        info = connector("sink", self.connector)
        for f in schema.fields:
            why = info.unwritable(fmt, f.dataType.simpleString()) if info else None
            if why is not None:
                raise ConnectorError(
                    f"{self.nid} cannot hold column {f.name!r}, of type "
                    f"{f.dataType.simpleString()}: {why}"
                )

    def __call__(self, df: DataFrame, batch_id: int) -> int:
        def data(max_rows: int | None) -> AbstractContextManager[pads.Dataset]:
            limited = df.limit(max_rows) if max_rows is not None else df
            if not shares_disk(df):  # the executors cannot reach the project folder
                return staged_at(
                    limited, self.ctx.staging, Store.of(self.ctx.staging, self.ctx.storage)
                )
            where = self.ctx.root / STATE_DIR / STAGING / f"{self.ctx.sink}-{batch_id}"
            return staged(limited, where)

        return self._deliver(batch_id, data, df)

    def write_files(self, files: list[str], batch_id: int) -> int:
        """A batch that is already Parquet on disk (an extracted table)."""

        @contextmanager
        def data(max_rows: int | None) -> Iterator[pads.Dataset]:
            whole = dataset(files)
            yield whole if max_rows is None else dataset_head(whole, max_rows)

        return self._deliver(batch_id, data, files=files)

    def _deliver(
        self,
        batch_id: int,
        data: Callable[[int | None], AbstractContextManager[pads.Dataset]],
        df: DataFrame | None = None,
        files: list[str] | None = None,
    ) -> int:
        """Skip a replayed batch; else let Spark's executors write it if the sink can take
        that, or stream it to the sink; record it only after the sink committed. Returns the
        rows written."""
        sink = self.sink()
        if self.complete and self.places:
            held = sink.places(list(self.places)) if Can.RECORD_PLACES in sink.can else None
            replayed = held is not None and all(
                held.get(k) is not None and held[k] >= v for k, v in self.places.items()
            )
        else:
            replayed = sink.committed(batch_id)
        result = WriteResult() if replayed else None
        whole = sink.max_rows is None  # a sink that shows the first rows takes them itself
        if result is None and df is not None and whole and Can.WRITE_FROM_SPARK in sink.can:
            result = sink.write_spark(df, batch_id)
        if result is None and files is not None and whole and Can.ADOPT_FILES in sink.can:
            result = sink.adopt(files, batch_id)
        if result is None:
            with data(sink.max_rows) as batch:
                result = sink.write(batch, batch_id)
        fault("after-commit", self.ctx.sink)
        # State advances only now, after the sink's own commit.
        self.record(
            "batch",
            batch_id,
            run_id=self.run_id,
            rows=result.rows,
            bytes_=result.bytes,
            files=result.files,
            retries=result.retries,
            replayed=replayed,
            commits=result.commits,
            commit_ms=result.commit_s * 1000,
        )
        return result.rows


def collect_receipts(state: StateStore, where: str, store: Store) -> int:
    """Record the receipts a stream's batches left at `where` (BatchWriter.record), oldest
    batch first, and delete each once recorded; returns how many. Recording twice is harmless
    (a batch's row is replaced), so a receipt left by a killed rivc is recorded by the next."""
    import pyarrow.fs as pafs

    fs, base = store.filesystem(where)
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    done = 0
    for info in sorted(infos, key=lambda i: i.base_name):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        with fs.open_input_stream(info.path, compression=None) as handle:
            body = json.loads(handle.read())
        kind, sink, batch_id = body.pop("kind"), body.pop("sink"), body.pop("batch_id")
        if kind == "batch":
            body["files"] = [tuple(f) for f in body["files"]]
            state.commit_batch(sink, batch_id, **body)
        else:
            body["counts"] = [tuple(c) for c in body["counts"]]
            state.record_quality(sink, batch_id, **body)
        fs.delete_file(info.path)
        done += 1
    return done
