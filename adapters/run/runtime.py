"""What running nodes shares: the compiled Plan, Spark (started on first use), the views
nodes read, landing tables, writer ids and batch ids. The code both `rivc run` and
`target/jobs/<sink>.py` use; execute.py runs a node with the strategy of its kind
(node_source, node_model, node_sink, node_test), each given this context.

It runs a Plan (plan.py): the SQL compiled into target/ with the connector configs and secrets
of the project's specs, which target/rivc_manifest.json leaves out. So a generated job does what the
scheduler does in-process, and needs the project folder beside target/.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import history_of, merge_keys_of
from rivc.compiler.emit.manifest import ManifestNode
from rivc.compiler.loading.specs import RateLimit

from ..delivery.deliver import BatchWriter
from ..delivery.sinkwriter import SinkWriter
from ..ingest.landing import Landing
from ..lake import deltatable
from ..plane.base import SinkContext
from ..spark.progress import SparkProgress
from ..spark.session import fence
from ..state import StateStore
from ..util.faults import carried
from ..util.sparkkind import is_connect
from ..util.storage import environment, join
from .plan import Plan
from .warehouse import writer_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECKPOINTS = "checkpoints"  # under .rivc/: where earlier versions kept them
CHECKPOINT_AREA = "_rivc_checkpoints"  # under the warehouse: every stream's checkpoint
RECEIPTS = "rivc-receipts"  # in such a stream's checkpoint: its committed batches, for rivc
STAGING_AREA = "_rivc_staging"  # under the warehouse: batches a remote Spark hands to rivc
SAMPLE_ROWS = 5  # failing rows a test prints


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
    defer_to: str | None = None  # --defer: the warehouse unselected tables are read from
    validate: bool = False  # --validate: extractions counted again in their database
    # --event-time-start/end as UTC datetimes: the span microbatch models build (None: theirs)
    event_times: tuple[Any, Any] = (None, None)
    interrupt: threading.Event = field(default_factory=threading.Event)  # set by the first Ctrl-C
    deferred: dict[str, Callable[[SparkSession], None]] = field(default_factory=dict)
    on_progress: Callable[[str, str], None] = lambda nid, text: None  # a node's progress line
    on_warning: Callable[[str], None] = lambda text: None
    tracker: SparkProgress = field(default_factory=SparkProgress)  # for live progress lines
    detached: bool = False  # a generated job on a copied project: no state between runs
    unbound: list[str] = field(default_factory=list)  # unselected views, bound when first read
    # a source landed in this run: its whole table's view, made when a node reading it starts
    # (binding.bind_views); a sink that takes only its new batches never makes it
    landed: dict[str, Callable[[], None]] = field(default_factory=dict)
    feeds: set[str] = field(default_factory=set)  # nodes of this run another node of it reads
    running: set[str] = field(default_factory=set)  # the nodes this run executes
    restarts: dict[str, int] = field(default_factory=dict)  # a stream's restarts in this run
    _spark: SparkSession | None = field(default=None, init=False, repr=False)
    lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _writer: str | None = field(default=None, init=False, repr=False)
    _landings: dict[str, Landing] = field(default_factory=dict, init=False, repr=False)

    @property
    def spark(self) -> SparkSession:
        with self.lock:
            if self._spark is None:
                self.tracker.starting = True
                try:
                    spark = self.session()
                finally:
                    self.tracker.starting = False
                if is_connect(spark):
                    fence(spark, self.state, self.run_id, self.on_warning)
                self.tracker.attach(spark)
                self._spark = spark
                for register in self.deferred.values():  # views made before Spark ran
                    register(spark)
                self.deferred.clear()
            self.tracker.here(self._spark)
            return self._spark

    @property
    def started(self) -> bool:
        return self._spark is not None

    def later(self, nid: str) -> bool:
        """Whether `nid`'s view may wait for Spark: Spark does not run yet and a node of this
        run reads it (one that none reads is made now, so that its errors are its own)."""
        return self._spark is None and nid in self.feeds

    def view(self, relation: str, make: Callable[[SparkSession], DataFrame]) -> None:
        """Register a temp view now if Spark runs, else when it starts."""

        def register(spark: SparkSession) -> None:
            make(spark).createOrReplaceTempView(relation)

        with self.lock:
            if self._spark is not None:
                register(self._spark)
            else:
                self.deferred[relation] = register

    @property
    def on_connect(self) -> bool:
        """True on Spark Connect, where there is no SparkContext."""
        return is_connect(self._spark)

    # ------------------------------------------------------------------ relations

    def table_uri(self, node: ManifestNode) -> str:
        return join(self.plan.warehouse, node.name)

    @property
    def writer(self) -> str:
        """This project's writer id (warehouse.writer_id), read once per run: under the lock,
        since sinks on two threads (`--threads`) of a fresh project would each make one."""
        with self.lock:
            if self._writer is None:
                warehouse = self.plan.warehouse
                self._writer = writer_id(warehouse, self.plan.store(warehouse), self.plan.root)
            return self._writer

    def landing(self, nid: str) -> Landing:
        """The landing table of an extracted source, one object per run (it keeps the table it
        read until it commits)."""
        with self.lock:
            if nid not in self._landings:
                self._landings[nid] = self.plan.landing(nid)
            return self._landings[nid]

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
        found = table.transaction_version(self.model_app(node.name))
        return None if found is None else int(found)

    def model_app(self, name: str) -> str:
        return f"rivc:{self.plan.manifest.project}:model:{name}"

    # ------------------------------------------------------------------ nodes

    def schema_of(self, nid: str, df: DataFrame) -> str:
        return self.state.schema_change(self.run_id, nid, columns_of(df))

    def batch_id(self, nid: str, writer: SinkWriter) -> int:
        """The batch id of a sink's batch in this run, recorded before anything is written: the
        one a resumed run had handed out (a sink that committed it skips the replay), else one
        above every id the state store and the sink's tables (routes included) hold."""
        return self.hand_out(nid, writer.last_batch_id())

    def hand_out(self, nid: str, last: int | None) -> int:
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

    def sink_writer(self, name: str) -> SinkWriter:
        """The foreachBatch function of sink `name`, with its route and dead-letter targets
        (their locations were probed before the run's first node: check_sink_locations)."""
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
                connections=self.plan.profile.connections,
                warehouse=self.plan.warehouse,
            )
            return BatchWriter(
                f"sink:{sink}", d.spec.connector, d.config, ctx, self.run_id, self.state.path
            )

        return SinkWriter(
            name,
            writer(name),
            transforms=spec.transforms,
            keys=merge_keys_of(sinks[name].config),
            history=history_of(sinks[name].config),
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
