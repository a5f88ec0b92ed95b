"""Sink nodes: take what the sink has not received of its inputs (its places, in its own
tables), transform, check and write it in batches, or run it as a stream."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.emit.manifest import ManifestNode, SinkInput
from rivc.compiler.errors import ConnectorError, StateError
from rivc.compiler.loading.locate import STATE_DIR

from ..ingest.landing import batch_of
from ..plane.base import Can, arrow_columns
from ..run.streaming import Batches, stream_base
from ..state import NodeResult
from ..util.sparkkind import is_connect
from ..util.storage import Store, is_local, join, shares_disk
from .consume import Landed, Step, plan_steps
from .deliver import collect_receipts
from .parquet import parquet_schema
from .sinkwriter import SinkWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
from ..run.runtime import Runtime

CHECKPOINTS = "checkpoints"  # under .rivc/: where earlier versions kept them
CHECKPOINT_AREA = "_rivc_checkpoints"  # under the warehouse: every stream's checkpoint
RECEIPTS = "rivc-receipts"  # in such a stream's checkpoint: its committed batches, for rivc
STAGING_AREA = "_rivc_staging"  # under the warehouse: batches a remote Spark hands to rivc


def run_sink(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    name, connector = node.name, node.sink.connector
    writer = rt.sink_writer(name)
    given = node.sink.input or SinkInput(kind="whole", untracked=True)
    kind = given.kind
    streaming = False
    schema = None
    if kind == "stream":
        df = rt.spark.sql(rt.plan.sql(nid))
        schema = rt.schema_of(nid, df)
        streaming = df.isStreaming
        _stream(rt, df, writer, node)
    else:
        _refuse_behind(rt, writer)
        changing = list(given.changing)
        tracked = list(given.tracked)
        steps = plan_steps(
            name,
            kind,
            changing,
            {t: rt.version(t) for t in tracked},
            {c: _landed(rt, c) for c in changing},
            writer.held(tracked),
            given.untracked or not tracked,
            bool(writer.keys),
        )
        if not steps:
            message = f"{connector}: nothing new to deliver"
            return NodeResult(nid, "sink", "success", rows=0, message=message)
        for step in steps:
            writer.consumed(step.places, step.complete)
            fresh = step.complete  # its places guard replays; no killed run's id reused
            batch_id = _fresh_id(rt, nid, writer) if fresh else rt.batch_id(nid, writer)
            files = _as_is(rt, node, kind, step, writer)
            if files is not None:  # an extracted table, as it is: no Spark needed
                columns = arrow_columns(parquet_schema(files))
                schema = rt.state.schema_change(rt.run_id, nid, columns)
                writer.write_files(files, batch_id)
            else:
                df = _sink_input(rt, nid, node, kind, step, writer)
                schema = rt.schema_of(nid, df)
                writer(df, batch_id)
    totals = rt.state.batch_totals(nid, rt.run_id)
    note = f"{totals['batches']} batch{'es' if totals['batches'] != 1 else ''}"
    if totals["replayed"]:
        note += f", {totals['replayed']} replayed and skipped"
    for target in writer.targets:
        t = rt.state.batch_totals(f"sink:{target}", rt.run_id)
        note += f", {t['rows']} rows to {target}"
    for q in rt.state.quality_totals(nid, rt.run_id):
        note += f", {q['check_name']}: {q['rows']} {q['action']}"
    if totals["commits"]:
        n = totals["commits"]
        note += f", {n} commit{'s' if n != 1 else ''} in {totals['commit_ms']:.0f} ms"
    if streaming and rt.interrupt.is_set():
        note += ", stopped by Ctrl-C"
    return NodeResult(
        nid,
        "sink",
        "success",
        rows=totals["rows"],
        bytes=totals["bytes"],
        files=totals["files"],
        retries=totals["retries"],
        schema=schema,
        message=f"{connector}: {note}",
        commits=totals["commits"],
        commit_ms=totals["commit_ms"],
    )


def _landed(rt: Runtime, nid: str) -> Landed:
    landing = rt.landing(nid)
    dt = landing.table()
    if dt is None:
        return Landed(None)
    at = landing.position(dt)
    ids = sorted({batch_of(f) for f in landing.files(None, at.batch, dt)})
    return Landed(at.batch, tuple(ids), at.base, bool(landing.keys))


def _refuse_behind(rt: Runtime, writer: SinkWriter) -> None:
    """Before a sink writes: a table another project or checkout writes is refused (unless
    the sink says shared); so is one whose log ends before a batch this project recorded
    as committed there, which lost commits (a removed log entry, a restored backup)."""
    for target in (writer.main, *writer.targets.values()):
        sink = target.sink()
        if Can.RECORD_PLACES in sink.can:
            sink.ctx.claim(sink.writer(), "its table")
        recorded = rt.state.committed_batch(target.nid)
        if recorded is None:
            continue
        holds = target.sink().last_batch_id()
        if holds is not None and holds < recorded:
            raise StateError(
                f"{target.nid}: its table holds batches up to {holds}, but this project "
                f"committed batch {recorded} there: commits were removed from its log; "
                f"restore them, or accept the loss with `rivc state reset {target.nid}` "
                "and run again"
            )


def _as_is(
    rt: Runtime, node: ManifestNode, kind: str, step: Step, writer: SinkWriter
) -> list[str] | None:
    """The landed files a sink takes unchanged: a local landing table delivered as it is
    (no transforms, meta columns or checks on the way, no key's older version to drop)."""
    source = node.sink.from_.removeprefix("source:")
    nid = f"source:{source}"
    if not node.sink.from_.startswith("source:") or not rt.plan.is_extracted(nid):
        return None
    table = rt.plan.project.sources[source].table
    meta = table.meta_columns.exported_at or table.meta_columns.row_hash
    if writer.checks_rows or meta or table.transforms or not step.complete:
        return None
    landing = rt.landing(nid)
    if not is_local(landing.uri):
        return None
    if kind == "batches":
        after, upto = step.ranges.get(nid, (0, 0))
        files = landing.files(after, upto)
        if writer.keys and landing.keys and len({batch_of(f) for f in files}) > 1:
            return None  # a merge takes each key's newest version: not the files as they are
    else:
        files = landing.whole_files(step.places.get(nid))
    return [f.uri for f in files] or None


def _sink_input(
    rt: Runtime, nid: str, node: ManifestNode, kind: str, step: Step, writer: SinkWriter
) -> DataFrame:
    """What a step writes: the sink's whole input, or, for new batches, its batch SQL over
    this sink's own views of each changing source's batches in the step."""
    from rivc.compiler.analysis.increments import new_batches_relation

    from ..ingest.extract import source_frame
    from ..run.binding import bind_views

    if kind != "batches" or not step.ranges:
        bind_views(rt, nid)  # the whole input: the landed sources' views too
        return rt.spark.sql(rt.plan.sql(nid))
    for source in node.sink.input.changing if node.sink.input else ():
        landing = rt.landing(source)
        table = rt.plan.project.sources[rt.plan.nodes[source].name].table
        after, upto = step.ranges.get(source, (0, 0))
        # the batches after its place (all of them for a new consumer): every row version
        # once; a merge takes each key's newest version of them
        files, latest = landing.files(after, upto), bool(writer.keys)
        columns = landing.position().columns
        df = source_frame(landing.frame(rt.spark, files, columns, latest), table)
        relation = new_batches_relation(node.name, rt.plan.nodes[source].relation)
        df.createOrReplaceTempView(relation)
    return rt.spark.sql(rt.plan.batch_sql(nid))


def _fresh_id(rt: Runtime, nid: str, writer: SinkWriter) -> int:
    """A new batch id above every one the state store and the sink's tables hold: a batch
    whose places say what it consumed never reuses a killed run's id."""
    last = writer.last_batch_id()
    batch_id = 0 if last is None else last + 1
    rt.state.hand_out(rt.run_id, nid, batch_id)
    return batch_id


def _stream(rt: Runtime, df: DataFrame, writer: SinkWriter, node: ManifestNode) -> None:
    """Run a streaming sink to its trigger's end. Its checkpoint, its place in the stream,
    lives under the warehouse (a lost `.rivc/` does not start it over). On a Spark that
    does not see rivc's disk (Spark Connect) the batches, which the server's Python worker
    writes, leave receipts beside it that rivc records as they come."""
    receipts: tuple[str, Store] | None = None
    if rt.detached:
        raise ConnectorError(
            f"{node.id}: a job run from a copied project keeps no checkpoint between runs, "
            "and a stream would start over; run the job beside the project folder"
        )
    checkpoint = join(rt.plan.warehouse, CHECKPOINT_AREA, node.name)
    store = Store.of(checkpoint, rt.plan.profile.storage)
    _move_old_checkpoint(rt.plan.root / STATE_DIR / CHECKPOINTS / node.name, checkpoint)
    if is_connect(df) and not shares_disk(df):  # foreachBatch runs in the server
        for target in (writer.main, *writer.targets.values()):
            why = target.sink().unreachable_from_server(rt.plan.root)
            if why is not None:
                raise ConnectorError(f"{target.nid}: {why}")
        receipts = (join(checkpoint, RECEIPTS), store)
        writer.record_through(receipts)
        collect_receipts(rt.state, *receipts)  # left by a run that was killed
    writer.base = stream_base(checkpoint, store, writer)
    stream = (
        df.writeStream.foreachBatch(writer)
        .option("checkpointLocation", checkpoint)
        .queryName(f"rivc_{node.name}")
    )
    trigger = node.sink.trigger
    if trigger == "once":
        stream = stream.trigger(once=True)
    elif trigger == "available_now":
        stream = stream.trigger(availableNow=True)
    elif isinstance(trigger, dict):
        stream = stream.trigger(processingTime=trigger["processing_time"])
    restart = rt.plan.project.sinks[node.name].spec.restart
    delay, restarts = restart.backoff_ms / 1000, 0
    while True:
        query = stream.start()
        shown = Batches(node.id, writer.base, rt.on_progress)
        try:
            _await(rt, query, shown, receipts)
            break
        except _stream_failed() as exc:
            # a stream that runs until stopped is started again from its checkpoint: what its
            # tables hold decides what it writes again (nothing twice)
            follows = isinstance(trigger, dict) and not rt.interrupt.is_set()
            if not follows or restarts == restart.max_restarts:
                raise
            if query.recentProgress:  # it committed batches since its last start
                delay, restarts = restart.backoff_ms / 1000, 0
            restarts += 1
            rt.restarts[node.id] = rt.restarts.get(node.id, 0) + 1
            rt.on_warning(
                f"{node.id}: the stream stopped on an error ({_reason(exc, node.name)}); "
                f"starting it again in {delay:g} s (restart {restarts}"
                + (f" of {restart.max_restarts})" if restart.max_restarts is not None else ")")
            )
            if rt.interrupt.wait(delay):  # Ctrl-C while waiting: stopped
                break
            delay = min(delay * 2, restart.max_backoff_ms / 1000)
    shown.report(query.recentProgress)


def _await(rt: Runtime, query: Any, shown: Batches, receipts: tuple[str, Store] | None) -> None:
    """Until the stream ends, or Ctrl-C lets its running batch finish and stops it."""
    try:
        while not query.awaitTermination(1):
            shown.report(query.recentProgress)
            if receipts is not None:
                collect_receipts(rt.state, *receipts)
            if rt.interrupt.is_set():  # Ctrl-C: let the running batch finish, then stop
                while query.isActive and query.status["isTriggerActive"]:
                    time.sleep(0.05)
                query.stop()
                break
    except KeyboardInterrupt:  # a second Ctrl-C: stop now; the checkpoint decides a replay
        query.stop()
        raise
    finally:
        if receipts is not None:
            collect_receipts(rt.state, *receipts)


def _stream_failed() -> type[BaseException]:
    from pyspark.errors import StreamingQueryException

    return StreamingQueryException


def _reason(exc: BaseException, sink: str) -> str:
    """The sink's own error inside Spark's, else Spark's first line."""
    text = str(exc)
    found = re.search(rf"sink {re.escape(sink)}\b[^\n]*", text)
    return (found.group(0) if found else text.strip().splitlines()[0])[:300]


def _move_old_checkpoint(old: Path, checkpoint: str) -> None:
    """Checkpoints of earlier versions lived in .rivc/checkpoints/: moved once to the
    warehouse (on this disk), so the stream goes on where it was."""
    if old.is_dir() and is_local(checkpoint) and not Path(checkpoint).exists():
        Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
        old.rename(checkpoint)
