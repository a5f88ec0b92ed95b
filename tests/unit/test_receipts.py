"""Receipts: what a stream's batches leave for rivc when Spark cannot open the state store
(a Spark Connect server's Python worker), recorded by rivc as they come (no JVM)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rivc.adapters.connectors.delta.spec import DeltaSinkConfig
from rivc.adapters.delivery.deliver import BatchWriter, collect_receipts
from rivc.adapters.plane.base import SinkContext
from rivc.adapters.state import StateStore
from rivc.adapters.util.storage import Store


def writer(tmp_path: Path, store: Store) -> BatchWriter:
    cfg = DeltaSinkConfig(table_uri="out/d")
    w = BatchWriter(
        "sink:d", "delta", cfg, SinkContext(tmp_path, "p", "d"), "r1", tmp_path / "s.db"
    )
    w.receipts = (str(tmp_path / "ckpt/rivc-receipts"), store)
    return w


def test_receipts_are_recorded_once_and_removed(tmp_path):
    w = writer(tmp_path, Store())
    files = [(str(tmp_path / "out/d/part-0.parquet"), 10, 1234)]
    w.record(
        "batch",
        3,
        run_id="r1",
        rows=10,
        bytes_=1234,
        files=files,
        retries=1,
        replayed=False,
        commits=1,
        commit_ms=5.5,
    )
    w.record("quality", 3, run_id="r1", counts=[("not_null(id)", "warn", 2)])
    w.record(
        "batch",
        4,
        run_id="r1",
        rows=0,
        bytes_=0,
        files=[],
        retries=0,
        replayed=True,
        commits=0,
        commit_ms=0.0,
    )
    assert not (tmp_path / "s.db").exists()  # the worker never opened the state store
    state = StateStore(tmp_path / "state.db")
    assert collect_receipts(state, *w.receipts) == 3
    assert collect_receipts(state, *w.receipts) == 0  # each receipt once
    totals = state.batch_totals("sink:d", "r1")
    assert (totals["batches"], totals["rows"], totals["replayed"], totals["files"]) == (2, 10, 1, 1)
    assert state.quality_totals("sink:d", "r1")[0]["rows"] == 2
    assert list((tmp_path / "ckpt/rivc-receipts").iterdir()) == []


@dataclass(frozen=True)
class Flaky(Store):
    """A store whose first `fails` writes fail, as a store's transient error does."""

    fails: list[int] = None  # type: ignore[assignment]

    def filesystem(self, uri: str) -> Any:
        if self.fails and self.fails[0] > 0:
            self.fails[0] -= 1
            raise OSError("store unavailable")
        return super().filesystem(uri)


def test_a_failed_receipt_is_retried_alone(tmp_path):
    """The batch is committed when its receipt is written: a transient failure retries the
    receipt, not the batch (which would find itself in the table and count as a replay)."""
    w = writer(tmp_path, Flaky(fails=[2]))
    w.record(
        "batch",
        0,
        run_id="r1",
        rows=5,
        bytes_=50,
        files=[],
        retries=0,
        replayed=False,
        commits=1,
        commit_ms=1.0,
    )
    state = StateStore(tmp_path / "state.db")
    assert collect_receipts(state, str(tmp_path / "ckpt/rivc-receipts"), Store()) == 1
    assert state.batch_totals("sink:d", "r1")["rows"] == 5
