"""A sink's batch, end to end: transforms, expectations, routes, retries and dead letters.

`SinkWriter` is the foreachBatch function of every sink. For one batch it
1. applies the sink's transforms (the SQL steps of rivc.compiler.rendering.transforms, on the real columns),
   marking rows whose cast failed instead of turning their values into NULL;
2. evaluates the expectations in one pass and acts on them: `fail` stops the batch before anything
   is written, `drop` removes the rows, `dead_letter` moves them, `warn` counts them;
3. writes the dead letters first, then each route's rows, then the rest to the sink itself, each
   destination through a `BatchWriter` (skip a replayed batch, write, then record the commit);
4. retries a failed write with exponential backoff and jitter; when it still fails, the batch goes
   to the dead-letter sink if there is one (or the run stops), and after
   `max_consecutive_failures` batches in a row the sink stops.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import Scd2Columns
from rivc.compiler.errors import ConnectorError, RivcError
from rivc.compiler.loading.specs import RateLimit, SinkRetry
from rivc.compiler.rendering import transforms as tf
from rivc.compiler.rendering.transforms import ERROR_COLUMN, Expectation
from rivc.compiler.sql import literal
from rivc.compiler.sql import quote as q

from ..util.errortext import python_error_inside, rivc_error_inside, transient
from .deliver import BatchWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


ROW_COLUMN = "_rivc_row"  # the row as JSON where it failed, for its dead-letter envelope
TRACKED = (ERROR_COLUMN, ROW_COLUMN)


def apply(df: DataFrame, plan: tf.TransformPlan, track: bool) -> DataFrame:
    """Run a transform plan on `df`. With `track`, a failed cast keeps the row, with the reason in
    _rivc_error and the row before the cast in _rivc_row; without, a failed cast fails the query."""
    if track:
        df = df.selectExpr(
            "*", f"CAST(NULL AS STRING) AS {ERROR_COLUMN}", f"CAST(NULL AS STRING) AS {ROW_COLUMN}"
        )
    for step in plan.steps:
        if step.where is not None:
            df = df.where(f"{ERROR_COLUMN} IS NOT NULL OR ({step.where})" if track else step.where)
            continue
        select = step.select
        if step.casts and not track:
            select = tuple(s.replace("try_cast(", "cast(", 1) for s in select)
        if step.casts and track:
            data = [q(c) for c in df.columns if c not in TRACKED]
            reasons = ", ".join(
                f"CASE WHEN {q(c)} IS NOT NULL AND try_cast({q(c)} AS {t}) IS NULL "
                f"THEN {literal(f'cast of {c} to {t} failed')} END"
                for c, t in step.casts
            )
            df = df.selectExpr(
                *data,
                f"coalesce({ERROR_COLUMN}, nullif(concat_ws('; ', {reasons}), '')) AS {ERROR_COLUMN}",
                f"CASE WHEN {ERROR_COLUMN} IS NULL AND nullif(concat_ws('; ', {reasons}), '') IS NOT "
                f"NULL THEN to_json(struct({', '.join(data)})) ELSE {ROW_COLUMN} END AS {ROW_COLUMN}",
            )
        df = df.selectExpr(*select, *(TRACKED if track else ()))
    return df


def transform_source(df: DataFrame, transforms: tuple[Any, ...]) -> DataFrame:
    if not transforms:
        return df
    columns = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    return apply(df, tf.plan(transforms, columns), track=False)


@dataclass
class Checked:
    """A batch after transforms and expectations."""

    clean: DataFrame  # the rows to write, with the output columns only
    dead: DataFrame | None  # envelopes for the dead-letter sink
    counts: list[tuple[str, str, int]]  # (check, action, failing rows)
    cached: DataFrame  # the flagged batch both derive from, cached until they are written


@dataclass
class SinkWriter:
    """The foreachBatch function of one sink. Holds only picklable values (Spark Connect)."""

    name: str
    main: BatchWriter
    transforms: tuple[Any, ...] = ()
    keys: tuple[str, ...] = ()  # the sink's merge or upsert keys (unwrap_cdc orders by them)
    history: Scd2Columns | None = None  # mode scd2: unwrap_cdc keeps every change
    quality: tuple[Expectation, ...] = ()
    targets: dict[str, BatchWriter] = field(default_factory=dict)
    dead_letter: str | None = None
    retry: SinkRetry = field(default_factory=SinkRetry)
    rate_limit: RateLimit | None = None
    base: int = 0  # streams: added to Spark's batch ids (a new checkpoint starts above the table)
    failures: int = 0  # consecutive batches that failed to write
    tokens: float = 0.0  # rate limit: the token bucket, refilled at events_per_second
    refilled_at: float | None = None
    # the rivc process's store credentials and endpoints (storage.ENV), and the fault suite's
    # RIVC_FAULT: a Spark Connect server's Python worker, which runs this function for a
    # stream, has an environment of its own
    environment: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def checks_rows(self) -> bool:
        return bool(self.transforms or self.quality)

    def record_through(self, receipts: tuple[str, Any]) -> None:
        """Leave receipts at (location, Store) instead of opening the state store, for every
        destination (delivery.collect_receipts records them)."""
        for writer in (self.main, *self.targets.values()):
            writer.receipts = receipts

    def consumed(self, places: dict[str, int], complete: bool) -> None:
        """What the next batch consumes, for every destination to commit with it."""
        for writer in (self.main, *self.targets.values()):
            writer.places, writer.complete = dict(places), complete

    def held(self, inputs: list[str]) -> list[dict[str, int | None] | None]:
        """What the sink and its route targets hold of `inputs` (None: one that cannot record
        it). A dead-letter target is left out: it is written only when rows fail, so its place
        says nothing of what the sink took (it still skips a batch it holds)."""
        writers = (self.main, *(w for t, w in self.targets.items() if t != self.dead_letter))
        return [w.held(inputs) for w in writers]

    def last_batch_id(self) -> int | None:
        """The highest batch id any of this sink's tables (its own, its routes') holds."""
        known = [w.last_batch_id() for w in (self.main, *self.targets.values())]
        return max((k for k in known if k is not None), default=None)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        batch_id += self.base
        os.environ.update(self.environment)  # a no-op in the rivc process itself
        if "RIVC_FAULT" not in self.environment:
            os.environ.pop("RIVC_FAULT", None)
        if not self.checks_rows:
            self._throttle(self._write_all(df, batch_id, None))
            return
        checked = self.check(df, batch_id)
        try:
            self._throttle(self._write_all(checked.clean, batch_id, checked.dead))
        finally:
            checked.cached.unpersist()
        if checked.counts:
            self.main.record("quality", batch_id, run_id=self.main.run_id, counts=checked.counts)

    def write_files(self, files: list[str], batch_id: int) -> None:
        """An extracted table delivered as is (no transforms or expectations)."""
        self._throttle(
            self._attempt(lambda: self.main.write_files(files, batch_id), None, batch_id)
        )

    def _throttle(self, rows: int) -> None:
        """Token bucket: after a batch of `rows`, wait until the average rate is back under
        events_per_second (plus the burst allowance)."""
        limit = self.rate_limit
        if limit is None or not rows:
            return
        eps = limit.events_per_second
        burst = limit.burst_capacity if limit.burst_capacity is not None else eps / 10
        now = time.monotonic()
        if self.refilled_at is None:
            self.tokens, self.refilled_at = burst, now
        self.tokens = min(burst, self.tokens + (now - self.refilled_at) * eps) - rows
        self.refilled_at = now
        if self.tokens < 0:
            time.sleep(-self.tokens / eps)
            self.tokens, self.refilled_at = 0.0, time.monotonic()

    # ------------------------------------------------------------------ checks

    def check(self, df: DataFrame, batch_id: int) -> Checked:
        columns = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        plan = tf.plan(self.transforms, columns, self.keys, self.history)
        names = [q(c) for c in plan.output]
        if not self.quality and not any(step.casts for step in plan.steps):
            # nothing can set a row aside: no Spark job to count what did
            flagged = apply(df, plan, track=False).persist()
            return Checked(flagged.selectExpr(*names), None, [], flagged)
        out = apply(df, plan, track=True)
        ok = f"{ERROR_COLUMN} IS NULL"
        flagged = out.selectExpr(
            "*",
            *(
                f"coalesce({ok} AND ({e.failing(ok)}), false) AS _rivc_q{i}"
                for i, e in enumerate(self.quality)
            ),
        ).persist()
        sums = [f"count_if({ERROR_COLUMN} IS NOT NULL) AS casts"] + [
            f"count_if(_rivc_q{i}) AS q{i}" for i in range(len(self.quality))
        ]
        totals = flagged.selectExpr(*sums).first()
        assert totals is not None
        counts: list[tuple[str, str, int]] = [
            (e.label, e.action, int(totals[f"q{i}"]))
            for i, e in enumerate(self.quality)
            if totals[f"q{i}"]
        ]
        cast_failures = int(totals["casts"])
        if cast_failures:
            counts.append(("cast", "dead_letter", cast_failures))
        failed = [(c, n) for c, a, n in counts if a == "fail"]
        if failed or (cast_failures and not self.dead_letter):
            flagged.unpersist()
            if failed:
                what = ", ".join(f"{c} on {n} row{'s' if n != 1 else ''}" for c, n in failed)
                raise ConnectorError(f"sink {self.name} batch {batch_id}: quality failed: {what}")
            sample = flagged.where(f"{ERROR_COLUMN} IS NOT NULL").first()
            reason = sample[ERROR_COLUMN] if sample else "cast failed"
            raise ConnectorError(
                f"sink {self.name} batch {batch_id}: {cast_failures} row(s) failed a cast "
                f"({reason}); set dead_letter to keep them"
            )
        to_dlq = [i for i, e in enumerate(self.quality) if e.action == "dead_letter"]
        removed = [i for i, e in enumerate(self.quality) if e.action in ("drop", "dead_letter")]
        dead_cond = " OR ".join([f"{ERROR_COLUMN} IS NOT NULL", *(f"_rivc_q{i}" for i in to_dlq)])
        gone_cond = " OR ".join([f"{ERROR_COLUMN} IS NOT NULL", *(f"_rivc_q{i}" for i in removed)])
        clean = flagged.where(f"NOT ({gone_cond})").selectExpr(*names)
        dead = None
        if cast_failures or any(totals[f"q{i}"] for i in to_dlq):
            reasons = ", ".join(
                f"CASE WHEN _rivc_q{i} THEN {literal(self.quality[i].label + ' failed')} END"
                for i in to_dlq
            )
            error = f"coalesce({ERROR_COLUMN}, concat_ws('; ', {reasons or 'NULL'}))"
            dead = flagged.where(dead_cond).selectExpr(
                f"coalesce({ROW_COLUMN}, to_json(struct({', '.join(names)}))) AS row",
                f"{error} AS error",
            )
            dead = envelope(dead, self.name, batch_id, 0)
        return Checked(clean, dead, counts, flagged)

    # ------------------------------------------------------------------ writes

    def _write_all(self, df: DataFrame, batch_id: int, dead: DataFrame | None) -> int:
        """Write the batch (and its dead letters); returns the rows written."""
        route = next((t for t in self.transforms if t.type == "route"), None)
        for writer in (
            (self.main, *(self.targets[t] for t in route.routes.values()))
            if route
            else (self.main,)
        ):
            writer.refuse_unwritable(df.schema)
        if dead is not None:
            self._dead_letters(dead, batch_id)
        if route is None:
            return self._attempt(lambda: self.main(df, batch_id), df, batch_id)
        field_ = q(route.field)
        values = ", ".join(literal(v) for v in route.routes)
        rows = 0
        for value, target in route.routes.items():
            part = df.where(f"CAST({field_} AS STRING) = {literal(value)}")
            writer = self.targets[target]
            rows += self._attempt(lambda w=writer, p=part: w(p, batch_id), part, batch_id)
        rest = df.where(f"{field_} IS NULL OR CAST({field_} AS STRING) NOT IN ({values})")
        writer = self.targets[route.default] if route.default else self.main
        return rows + self._attempt(lambda: writer(rest, batch_id), rest, batch_id)

    def _attempt(self, write: Any, df: DataFrame | None, batch_id: int) -> int:
        """Write with retries; then dead-letter the batch, or raise. Returns the rows written."""
        r = self.retry
        attempts = 0
        retryable: tuple[type[BaseException], ...] = (RivcError, OSError, *_spark_errors())
        while True:
            attempts += 1
            try:
                rows: int = write()
                self.failures = 0
                return rows
            except retryable as exc:
                error = exc
                if attempts >= r.max_attempts or not transient(exc):
                    break
                delay = min(r.backoff_ms * 2 ** (attempts - 1), r.max_backoff_ms) / 1000
                if r.jitter:
                    delay *= random.uniform(0.5, 1.0)
                time.sleep(delay)
        self.failures += 1
        text = str(getattr(error, "message", error)).strip()
        # a refusal raised in a Python task is inside Spark's text, under its traceback
        reason = rivc_error_inside(text) or python_error_inside(text) or text.splitlines()[0]
        reason = reason[:500]
        message = (
            f"sink {self.name} batch {batch_id}: write failed after {attempts} attempt(s): {reason}"
        )
        if self.dead_letter is None or df is None:
            raise ConnectorError(message) from error
        failed = df.selectExpr("to_json(struct(*)) AS row", f"{literal(reason)} AS error")
        self._dead_letters(envelope(failed, self.name, batch_id, attempts), batch_id)
        if self.failures >= r.max_consecutive_failures:
            raise ConnectorError(
                f"{message}; {self.failures} batches failed in a row "
                f"(max_consecutive_failures {r.max_consecutive_failures}): sink stopped"
            ) from error
        return 0

    def _dead_letters(self, dead: DataFrame, batch_id: int) -> None:
        assert self.dead_letter is not None
        writer = self.targets[self.dead_letter]
        try:
            writer(dead, batch_id)
        except Exception as exc:  # nothing may be dropped silently: stop the run
            raise ConnectorError(
                f"sink {self.name} batch {batch_id}: writing dead letters to "
                f"{self.dead_letter} failed, stopping: {str(exc).splitlines()[0][:300]}"
            ) from exc


def envelope(rows: DataFrame, sink: str, batch_id: int, attempts: int) -> DataFrame:
    """(row, error) -> the dead-letter envelope: row as JSON, sink, error, batch id, attempts, time."""
    return rows.selectExpr(
        "row",
        f"{literal(sink)} AS sink",
        "error",
        f"CAST({batch_id} AS BIGINT) AS batch_id",
        f"CAST({attempts} AS INT) AS attempts",
        "current_timestamp() AS failed_at",
    )


def _spark_errors() -> tuple[type[BaseException], ...]:
    from pyspark.errors import PySparkException

    return (PySparkException,)
