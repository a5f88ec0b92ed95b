"""Executing compiled nodes on Spark: the code both `rivc run` and `target/jobs/<sink>.py` call.

It runs a Plan (plan.py): the SQL compiled into target/ with the connector configs and secrets
of the project's specs, which target/manifest.json leaves out. So a generated job does what the
scheduler does in-process, and needs the project folder beside target/.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rivc.compiler.connector_specs import merge_keys_of
from rivc.compiler.errors import ConnectorError, EnvironmentFault, RivcError, StateError
from rivc.compiler.locate import STATE_DIR
from rivc.compiler.manifest import ManifestNode
from rivc.compiler.specs import RateLimit

from ..plane import deltamerge, deltatable
from ..plane.base import SinkContext, SourceContext, WriteResult
from ..plane.registry import read_source
from ..state import NodeResult, StateStore
from ..util.errortext import model_error, python_error_inside, rivc_error_inside, spark_message
from ..util.faults import carried, fault
from ..util.sparkkind import is_connect
from ..util.storage import Store, environment, is_local, join, shares_disk
from .consume import Landed, Step, plan_steps
from .delivery import BatchWriter, collect_receipts
from .landing import Landing, batch_of
from .parquet import arrow_columns, parquet_schema
from .plan import Plan
from .sinkwriter import SinkWriter, health_check, transform_source
from .sparkprogress import SparkProgress
from .streaming import Batches, stream_base
from .warehouse import writer_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECKPOINTS = "checkpoints"  # under .rivc/: where earlier versions kept them
CHECKPOINT_AREA = "_rivc_checkpoints"  # under the warehouse: every stream's checkpoint
RECEIPTS = "rivc-receipts"  # in such a stream's checkpoint: its committed batches, for rivc
STAGING_AREA = "_rivc_staging"  # under the warehouse: batches a remote Spark hands to rivc
SAMPLE_ROWS = 5  # failing rows a test prints


def peak_rss_mb(spark: SparkSession | None) -> float:
    """Peak resident memory of this process plus, for local Spark, its JVM."""
    total = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if spark is None or is_connect(spark):
        return round(total, 1)  # the server's memory is not ours to read
    try:
        pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
    except (AttributeError, OSError, ValueError):
        pass  # spark-submit started the JVM: only this Python process is counted
    return round(total, 1)


def columns_of(df: DataFrame) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


@dataclass
class Runtime:
    """What running nodes shares. Spark starts on first use, so a run whose nodes need no Spark
    (an extracted table delivered as it is) starts no JVM."""

    session: Callable[[], SparkSession]
    plan: Plan
    run_id: str
    state: StateStore
    full_refresh: bool = False
    resume_from: str | None = None  # a killed run this one resumes (state.start_run)
    interrupt: threading.Event = field(default_factory=threading.Event)  # set by the first Ctrl-C
    deferred: dict[str, Callable[[SparkSession], None]] = field(default_factory=dict)
    on_progress: Callable[[str, str], None] = lambda nid, text: None  # a node's progress line
    on_warning: Callable[[str], None] = lambda text: None
    tracker: SparkProgress = field(default_factory=SparkProgress)  # for live progress lines
    detached: bool = False  # a generated job on a copied project: no state between runs
    unbound: list[str] = field(default_factory=list)  # unselected views, bound when first read
    _spark: SparkSession | None = field(default=None, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _writer: str | None = field(default=None, init=False, repr=False)
    _landings: dict[str, Landing] = field(default_factory=dict, init=False, repr=False)

    @property
    def spark(self) -> SparkSession:
        with self._lock:
            if self._spark is None:
                self.tracker.starting = True
                try:
                    spark = self.session()
                finally:
                    self.tracker.starting = False
                if is_connect(spark):
                    self._fence(spark)
                self.tracker.attach(spark)
                self._spark = spark
                for register in self.deferred.values():  # views made before Spark ran
                    register(spark)
                self.deferred.clear()
            self.tracker.here(self._spark)
            return self._spark

    def _fence(self, spark: SparkSession) -> None:
        """On Spark Connect, a killed rivc leaves its operations running in the server. Stop
        those of every killed run before this one writes, then record this run's session."""
        from .spark import interrupt_session

        for run_id, session in self.state.killed_sessions(self.run_id):
            stopped = interrupt_session(spark, session)
            if stopped:
                self.on_warning(
                    f"run {run_id} was killed: stopped {stopped} of its Spark operation"
                    f"{'s' if stopped != 1 else ''} still running on the server"
                )
            self.state.set_spark_session(run_id, None)
        self.state.set_spark_session(self.run_id, spark.session_id)  # type: ignore[attr-defined]

    @property
    def started(self) -> bool:
        return self._spark is not None

    def view(self, relation: str, make: Callable[[SparkSession], DataFrame]) -> None:
        """Register a temp view now if Spark runs, else when it starts."""

        def register(spark: SparkSession) -> None:
            make(spark).createOrReplaceTempView(relation)

        with self._lock:
            if self._spark is not None:
                register(self._spark)
            else:
                self.deferred[relation] = register

    @property
    def on_connect(self) -> bool:
        """True on Spark Connect, where there is no SparkContext."""
        return is_connect(self._spark)

    # ------------------------------------------------------------------ relations

    def bind(self, nid: str) -> None:
        """Make an unselected upstream node's relation available without running it."""
        node = self.plan.nodes[nid]
        if node.kind == "source" and self.plan.is_extracted(nid):
            landing = self.landing(nid)
            batch = landing.position().batch
            if batch is not None:  # the source as extracted so far
                self._landed_view(nid, batch)
            else:  # never extracted: the database's table as it is now
                self._source_df(node).createOrReplaceTempView(node.relation)
        elif node.kind == "source":
            self._source_df(node).createOrReplaceTempView(node.relation)
        elif node.kind == "model":
            mat = node.materialized
            if mat == "view":
                self.spark.sql(self.plan.sql(nid)).createOrReplaceTempView(node.name)
            elif mat in ("table", "incremental"):
                uri = self.table_uri(node)
                store = self.plan.store(uri)
                if deltatable.open_table(uri, store.delta) is None:
                    raise StateError(
                        f"model {node.name!r} has not been built yet; "
                        f"run `rivc run --select +{node.name}` first"
                    )
                deltatable.read(self.spark, uri, store).createOrReplaceTempView(node.name)

    def table_uri(self, node: ManifestNode) -> str:
        return join(self.plan.warehouse, node.name)

    @property
    def writer(self) -> str:
        """This project's writer id (warehouse.writer_id), read once per run."""
        if self._writer is None:
            warehouse = self.plan.warehouse
            self._writer = writer_id(warehouse, self.plan.store(warehouse), self.plan.root)
        return self._writer

    def landing(self, nid: str) -> Landing:
        """The landing table of an extracted source, one object per run (it keeps the table it
        read until it commits)."""
        with self._lock:
            if nid not in self._landings:
                self._landings[nid] = self.plan.landing(nid)
            return self._landings[nid]

    def _landed_view(self, nid: str, batch: int | None) -> None:
        """`source()` of an extracted table: its landing table as of `batch`."""
        from .extract import source_frame

        node = self.plan.nodes[nid]
        table = self.plan.project.sources[node.name].table
        landing = self.landing(nid)
        columns = landing.position().columns

        def make(spark: SparkSession) -> DataFrame:
            return source_frame(landing.whole(spark, batch, columns), table)

        self.view(node.relation, make)

    def version(self, nid: str) -> int | None:
        """The newest version of a tracked input: a landed source's newest complete batch, a
        stored model's batch id."""
        node = self.plan.nodes[nid]
        if node.kind == "source":
            return self.landing(nid).position().batch
        uri = self.table_uri(node)
        table = deltatable.open_table(uri, self.plan.store(uri).delta)
        if table is None:
            return None
        found = table.transaction_version(self._model_app(node.name))
        return None if found is None else int(found)

    def _model_app(self, name: str) -> str:
        return f"rivc:{self.plan.manifest.project}:model:{name}"

    def bind_views(self, nid: str) -> None:
        """Bind the unselected views `nid` reads, now that what they read has run."""
        with self._lock:
            needed = set(self.plan.upstream(nid))
            for view in [v for v in self.unbound if v in needed]:
                self.bind(view)
                self.unbound.remove(view)

    def _source_df(self, node: ManifestNode) -> DataFrame:
        source = self.plan.project.sources[node.name]
        return transform_source(self._read_source(node), source.table.transforms)

    def _read_source(self, node: ManifestNode) -> DataFrame:
        """A source table as its connector reads it (rivc.compiler.registry names the reader)."""
        source = self.plan.project.sources[node.name]
        relational = source.connector.relational
        ctx = SourceContext(
            node.name,
            self.plan.manifest.project,
            self.plan.root,
            source.config,
            dict(source.table.columns),
            self.plan.sql(f"source:{node.name}") if relational else None,
            self.plan.profile.connections.get(source.source.connection or ""),
            source.source.tuning.resolved() if relational else {},
            self.plan.profile.storage,
        )
        return read_source(self.spark, source.connector, ctx)

    # ------------------------------------------------------------------ nodes

    def _unexpected(self, nid: str, exc: BaseException) -> str:
        """One line for an error rivc did not expect; its traceback goes to .rivc/errors.log."""
        import traceback

        log = self.plan.root / STATE_DIR / ERRORS_LOG
        with log.open("a") as out:
            out.write(f"--- {self.run_id} {nid}\n{''.join(traceback.format_exception(exc))}")
        return (
            f"{type(exc).__name__}: {_one_line(exc)} (unexpected: please report it with the "
            f"traceback in {STATE_DIR}/{ERRORS_LOG})"
        )

    def execute(self, nid: str) -> NodeResult:
        """Run one node and record its result; user and connector errors become an error result."""
        node = self.plan.nodes[nid]
        started = time.perf_counter()
        caught: tuple[type[BaseException], ...] = (RivcError, *_spark_errors())
        try:
            self.bind_views(nid)
            fn = {
                "source": self._run_source,
                "model": self._run_model,
                "sink": self._run_sink,
                "test": self._run_test,
            }[node.kind]
            result: NodeResult = fn(nid, node)
        except EnvironmentFault:
            raise  # no node can run: the command stops with one line
        except caught as exc:
            error = None
            if node.kind == "test" and node.line:  # a generic test: its SQL is rivc's
                error = f"{node.path}:{node.line}: error: {spark_message(exc)}"
            elif node.kind in ("model", "test") and node.compiled_path:
                error = model_error(exc, self.plan.sql(nid), node.path)
            elif node.line:  # a source or a sink: at its YAML entry
                error = f"{node.path}:{node.line}: error: {_one_line(exc)}"
            result = NodeResult(nid, node.kind, "error", error=error or _one_line(exc))
        except Exception as exc:  # noqa: BLE001  (a bug of rivc's: this node fails, not the run)
            result = NodeResult(nid, node.kind, "error", error=self._unexpected(nid, exc))
        result = NodeResult(
            **{
                **result.__dict__,
                "duration_s": time.perf_counter() - started,
                "peak_rss_mb": peak_rss_mb(self._spark),
            }
        )
        self.state.record(self.run_id, result)
        if node.kind == "sink":
            fault("between-sinks", node.name)
        return result

    def _schema(self, nid: str, df: DataFrame) -> str:
        return self.state.schema_change(self.run_id, nid, columns_of(df))

    def _run_source(self, nid: str, node: ManifestNode) -> NodeResult:
        source = self.plan.project.sources[node.name]
        if source.connector.relational:
            from ..connectors.relational import Conn
            from .extract import ExtractContext, extract

            spec = self.plan.profile.connections.get(source.source.connection or "")
            if spec is None:
                raise ConnectorError(
                    f"source {node.name}: connection {source.source.connection!r} is not in "
                    "the profile"
                )
            done = extract(
                ExtractContext(
                    nid,
                    node.name,
                    source.table,
                    Conn.resolve(spec, os.environ),
                    source.source.tuning.resolved(),
                    self.plan.sql(nid),
                    self.landing(nid),
                    self.state,
                    self.run_id,
                    self.full_refresh,
                    self.resume_from,
                    lambda: self.spark,
                )
            )
            if done.result.status == "success" and done.batch is not None:
                self._landed_view(nid, done.batch)
            return done.result
        df = self._source_df(node)
        df.createOrReplaceTempView(node.relation)
        return NodeResult(nid, "source", "success", schema=self._schema(nid, df))

    def _run_model(self, nid: str, node: ManifestNode) -> NodeResult:
        name, mat = node.name, node.materialized
        if mat == "ephemeral":
            return NodeResult(nid, "model", "success", message="ephemeral: inlined")
        if mat == "view":
            df = self.spark.sql(self.plan.sql(nid))
            df.createOrReplaceTempView(name)
            return NodeResult(nid, "model", "success", schema=self._schema(nid, df), message="view")
        uri = self.table_uri(node)
        store = self.plan.store(uri)
        table = deltatable.open_table(uri, store.delta)
        incremental = mat == "incremental" and not self.full_refresh and table is not None
        if incremental:
            deltatable.read(self.spark, uri, store).createOrReplaceTempView(name)  # {{ this }}
            df = self.spark.sql(self.plan.sql(nid, incremental=True))
        else:
            df = self.spark.sql(self.plan.sql(nid))
        if df.isStreaming:
            raise ConnectorError(
                f"model {name!r} reads a stream: materialize it as a view and deliver it with a sink"
            )
        schema = self._schema(nid, df)
        config = node.model_config
        app_id = self._model_app(name)
        last = None if table is None else table.transaction_version(app_id)
        batch_id = self._hand_out(nid, None if last is None else int(last))
        if last is not None and int(last) >= batch_id:  # a resumed run: this batch is in
            how = "already committed by the killed run"
            result = WriteResult()
        elif not incremental:
            result = deltatable.write_batch(
                df,
                uri,
                store,
                "replace",
                deltatable.arrow_schema(df),
                config.partition_by,
                deltatable.Stamp.batch(app_id, batch_id),
            )
            how = "table"
        else:
            assert table is not None
            parts = tuple(table.metadata().partition_columns)
            if config.partition_by and tuple(config.partition_by) != parts:
                raise ConnectorError(
                    f"model {name!r}: partition_by {list(config.partition_by)} differs from its "
                    f"table's {list(parts)}; run with --full-refresh to rebuild it"
                )
            df, target = deltatable.reconcile(df, table, config.on_schema_change, f"model {name!r}")
            gone = [n for n in deltatable.table_schema(table).names if n not in target.names]
            if gone:  # sync_all_columns: the model no longer has them
                deltatable.drop_columns(self.spark, uri, store, gone)
                parts = tuple(p for p in parts if p not in gone)
            strategy = node.incremental_strategy
            if strategy == "merge":
                stamp = deltatable.Stamp.batch(app_id, batch_id)
                result = deltamerge.merge(df, uri, store, node.unique_key, target, stamp)
                how = f"incremental merge, {result.removed} files rewritten"
            else:
                result = deltatable.write_batch(
                    df,
                    uri,
                    store,
                    "append",
                    target,
                    parts,
                    deltatable.Stamp.batch(app_id, batch_id),
                )
                how = "incremental append"
        fault("after-commit", name)
        deltatable.read(self.spark, uri, store).createOrReplaceTempView(name)
        return NodeResult(
            nid,
            "model",
            "success",
            rows=result.rows,
            bytes=result.bytes,
            files=len(result.files),
            retries=result.retries,
            schema=schema,
            message=how,
            commits=result.commits,
            commit_ms=result.commit_s * 1000,
        )

    def _run_sink(self, nid: str, node: ManifestNode) -> NodeResult:
        name, connector = node.name, node.connector
        writer = self.sink_writer(name)
        given = node.input or {}
        kind = given.get("kind", "whole")
        streaming = False
        schema = None
        if kind == "stream":
            df = self.spark.sql(self.plan.sql(nid))
            schema = self._schema(nid, df)
            streaming = df.isStreaming
            self._stream(df, writer, node)
        else:
            self._refuse_behind(writer)
            changing = list(given.get("changing", ()))
            tracked = list(given.get("tracked", ()))
            steps = plan_steps(
                name,
                kind,
                changing,
                {t: self.version(t) for t in tracked},
                {c: self._landed(c) for c in changing},
                writer.held(tracked),
                bool(given.get("untracked", True)) or not tracked,
                bool(writer.keys),
            )
            if not steps:
                message = f"{connector}: nothing new to deliver"
                return NodeResult(nid, "sink", "success", rows=0, message=message)
            for step in steps:
                writer.consumed(step.places, step.complete)
                fresh = step.complete  # its places guard replays; no killed run's id reused
                batch_id = self._fresh_id(nid, writer) if fresh else self.batch_id(nid, writer)
                files = self._as_is(node, kind, step, writer)
                if files is not None:  # an extracted table, as it is: no Spark needed
                    columns = arrow_columns(parquet_schema(files))
                    schema = self.state.schema_change(self.run_id, nid, columns)
                    writer.write_files(files, batch_id)
                else:
                    df = self._sink_input(nid, node, kind, step, writer)
                    schema = self._schema(nid, df)
                    writer(df, batch_id)
        totals = self.state.batch_totals(nid, self.run_id)
        note = f"{totals['batches']} batch{'es' if totals['batches'] != 1 else ''}"
        if totals["replayed"]:
            note += f", {totals['replayed']} replayed and skipped"
        for target in writer.targets:
            t = self.state.batch_totals(f"sink:{target}", self.run_id)
            note += f", {t['rows']} rows to {target}"
        for q in self.state.quality_totals(nid, self.run_id):
            note += f", {q['check_name']}: {q['rows']} {q['action']}"
        if totals["commits"]:
            n = totals["commits"]
            note += f", {n} commit{'s' if n != 1 else ''} in {totals['commit_ms']:.0f} ms"
        if streaming and self.interrupt.is_set():
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

    def _landed(self, nid: str) -> Landed:
        landing = self.landing(nid)
        dt = landing.table()
        if dt is None:
            return Landed(None)
        at = landing.position(dt)
        ids = sorted({batch_of(f) for f in landing.files(None, at.batch, dt)})
        return Landed(at.batch, tuple(ids), at.base, bool(landing.keys))

    def _refuse_behind(self, writer: SinkWriter) -> None:
        """Before a sink writes: a table another project or checkout writes is refused (unless
        the sink says shared); so is one whose log ends before a batch this project recorded
        as committed there, which lost commits (a removed log entry, a restored backup)."""
        for target in (writer.main, *writer.targets.values()):
            sink = target.sink()
            sink.ctx.claim(sink.writer(), "its table")
            recorded = self.state.committed_batch(target.nid)
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
        self, node: ManifestNode, kind: str, step: Step, writer: SinkWriter
    ) -> list[str] | None:
        """The landed files a sink takes unchanged: a local landing table delivered as it is
        (no transforms, meta columns or checks on the way, no key's older version to drop)."""
        source = (node.from_ or "").removeprefix("source:")
        nid = f"source:{source}"
        if not (node.from_ or "").startswith("source:") or not self.plan.is_extracted(nid):
            return None
        table = self.plan.project.sources[source].table
        meta = table.meta_columns.exported_at or table.meta_columns.row_hash
        if writer.checks_rows or meta or table.transforms or not step.complete:
            return None
        landing = self.landing(nid)
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
        self, nid: str, node: ManifestNode, kind: str, step: Step, writer: SinkWriter
    ) -> DataFrame:
        """What a step writes: the sink's whole input, or, for new batches, its batch SQL over
        this sink's own views of each changing source's batches in the step."""
        from rivc.compiler.increments import new_batches_relation

        from .extract import source_frame

        if kind != "batches" or not step.ranges:
            return self.spark.sql(self.plan.sql(nid))
        for source in (node.input or {}).get("changing", ()):
            landing = self.landing(source)
            table = self.plan.project.sources[self.plan.nodes[source].name].table
            after, upto = step.ranges.get(source, (0, 0))
            # the batches after its place (all of them for a new consumer): every row version
            # once; a merge takes each key's newest version of them
            files, latest = landing.files(after, upto), bool(writer.keys)
            columns = landing.position().columns
            df = source_frame(landing.frame(self.spark, files, columns, latest), table)
            relation = new_batches_relation(node.name, self.plan.nodes[source].relation)
            df.createOrReplaceTempView(relation)
        return self.spark.sql(self.plan.batch_sql(nid))

    def _fresh_id(self, nid: str, writer: SinkWriter) -> int:
        """A new batch id above every one the state store and the sink's tables hold: a batch
        whose places say what it consumed never reuses a killed run's id."""
        last = writer.last_batch_id()
        batch_id = 0 if last is None else last + 1
        self.state.hand_out(self.run_id, nid, batch_id)
        return batch_id

    def batch_id(self, nid: str, writer: SinkWriter) -> int:
        """The batch id of a sink's batch in this run, recorded before anything is written: the
        one a resumed run had handed out (a sink that committed it skips the replay), else one
        above every id the state store and the sink's tables (routes included) hold."""
        return self._hand_out(nid, writer.last_batch_id())

    def _hand_out(self, nid: str, last: int | None) -> int:
        """The batch id a node writes in this run, recorded before anything is written: the one a
        resumed run had handed out, else one above `last` (the highest its target holds)."""
        if self.resume_from is not None:
            prior = self.state.handed_out(self.resume_from, nid)
            if prior is not None:
                self.state.hand_out(self.run_id, nid, prior)
                return prior
        batch_id = 0 if last is None else last + 1
        self.state.hand_out(self.run_id, nid, batch_id)
        return batch_id

    def sink_writer(self, name: str, check: bool = True) -> SinkWriter:
        """The foreachBatch function of sink `name`, with its route and dead-letter targets;
        each location is health-checked first (`check`)."""
        sinks = self.plan.project.sinks
        spec = sinks[name].spec

        def writer(sink: str) -> BatchWriter:
            d = sinks[sink]
            ctx = SinkContext(
                self.plan.root,
                self.plan.manifest.project,
                sink,
                self.plan.profile.storage,
                join(self.plan.warehouse, STAGING_AREA),
                self.writer,
                d.spec.shared,
            )
            if spec.health_check and check:
                health_check(ctx, d.connector, d.config)
            return BatchWriter(
                f"sink:{sink}", d.spec.connector, d.config, ctx, self.run_id, self.state.path
            )

        return SinkWriter(
            name,
            writer(name),
            transforms=spec.transforms,
            keys=merge_keys_of(sinks[name].config),
            quality=spec.quality,
            targets={t: writer(t) for t in spec.targets},
            dead_letter=next((t for t, why in spec.targets.items() if why == "dead_letter"), None),
            retry=spec.retry,
            rate_limit=spec.rate_limit or self._upstream_rate_limit(f"sink:{name}"),
            environment={**environment(), **carried()},
        )

    def _upstream_rate_limit(self, nid: str) -> RateLimit | None:
        """The strictest rate limit of the source tables a sink reads."""
        limits = [
            self.plan.project.sources[self.plan.nodes[n].name].table.rate_limit
            for n in self.plan.upstream(nid)
            if self.plan.nodes[n].kind == "source"
        ]
        given = [r for r in limits if r is not None]
        return min(given, key=lambda r: r.events_per_second) if given else None

    def _stream(self, df: DataFrame, writer: SinkWriter, node: ManifestNode) -> None:
        """Run a streaming sink to its trigger's end. Its checkpoint, its place in the stream,
        lives under the warehouse (a lost `.rivc/` does not start it over). On a Spark that
        does not see rivc's disk the batches, which the server's Python worker writes, leave
        receipts beside it that rivc records as they come."""
        receipts: tuple[str, Store] | None = None
        if self.detached:
            raise ConnectorError(
                f"{node.id}: a job run from a copied project keeps no checkpoint between runs, "
                "and a stream would start over; run the job beside the project folder"
            )
        checkpoint = join(self.plan.warehouse, CHECKPOINT_AREA, node.name)
        store = Store.of(checkpoint, self.plan.profile.storage)
        _move_old_checkpoint(self.plan.root / STATE_DIR / CHECKPOINTS / node.name, checkpoint)
        if not shares_disk(df):
            for target in (writer.main, *writer.targets.values()):
                why = target.sink().unreachable_from_server(self.plan.root)
                if why is not None:
                    raise ConnectorError(f"{target.nid}: {why}")
            receipts = (join(checkpoint, RECEIPTS), store)
            writer.record_through(receipts)
            collect_receipts(self.state, *receipts)  # left by a run that was killed
        writer.base = stream_base(checkpoint, store, writer)
        stream = (
            df.writeStream.foreachBatch(writer)
            .option("checkpointLocation", checkpoint)
            .queryName(f"rivc_{node.name}")
        )
        trigger = node.trigger
        if trigger == "once":
            stream = stream.trigger(once=True)
        elif trigger == "available_now":
            stream = stream.trigger(availableNow=True)
        elif isinstance(trigger, dict):
            stream = stream.trigger(processingTime=trigger["processing_time"])
        query = stream.start()
        shown = Batches(node.id, writer.base, self.on_progress)
        try:
            while not query.awaitTermination(1):
                shown.report(query.recentProgress)
                if receipts is not None:
                    collect_receipts(self.state, *receipts)
                if self.interrupt.is_set():  # Ctrl-C: let the running batch finish, then stop
                    while query.isActive and query.status["isTriggerActive"]:
                        time.sleep(0.05)
                    query.stop()
                    break
        except KeyboardInterrupt:  # a second Ctrl-C: stop now; the checkpoint decides a replay
            query.stop()
            raise
        finally:
            if receipts is not None:
                collect_receipts(self.state, *receipts)
        shown.report(query.recentProgress)

    def _run_test(self, nid: str, node: ManifestNode) -> NodeResult:
        df = self.spark.sql(self.plan.sql(nid))
        failures = df.count()
        if not failures:
            return NodeResult(nid, "test", "pass", rows=0)
        sample = [r.asDict() for r in df.limit(SAMPLE_ROWS).collect()]
        shown = "; ".join(json.dumps(r, default=str) for r in sample)
        severity = node.severity
        return NodeResult(
            nid,
            "test",
            "fail" if severity == "error" else "warn",
            rows=failures,
            error=f"{failures} failing row{'s' if failures != 1 else ''}: {shown}",
        )


def _move_old_checkpoint(old: Path, checkpoint: str) -> None:
    """Checkpoints of earlier versions lived in .rivc/checkpoints/: moved once to the
    warehouse (on this disk), so the stream goes on where it was."""
    if old.is_dir() and is_local(checkpoint) and not Path(checkpoint).exists():
        Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
        old.rename(checkpoint)


ERRORS_LOG = "errors.log"


def _spark_errors() -> tuple[type[BaseException], ...]:
    from pyspark.errors import PySparkException

    return (PySparkException,)


def _one_line(exc: BaseException) -> str:
    """The error in one line; for a stream that failed in a batch, rivc's own error inside it
    rather than Spark's wrapper."""
    text = (exc.message if isinstance(exc, RivcError) else str(exc)).strip()
    inner = rivc_error_inside(text) or python_error_inside(text)
    if inner:
        return inner
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]
