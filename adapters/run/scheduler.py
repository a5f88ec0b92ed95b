"""`rivc run | test | build`: compile, then execute the selection on Spark in DAG order.

Independent branches run concurrently (`--threads`, each thread in its own FAIR pool). A failed
node marks everything downstream of it skipped; the others go on unless `--fail-fast`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rivc.compiler.emit import run_results
from rivc.compiler.emit.dbt_manifest import unique_id
from rivc.compiler.emit.run_results import RESULTS_FILE
from rivc.compiler.errors import ProjectError
from rivc.compiler.loading.locate import TARGET_DIR
from rivc.compiler.materializations import of_node

from ..models.hooks import operations
from ..spark.progress import SparkProgress
from ..state import NodeResult, StateStore, new_run_id, now, run_lock
from .binding import bind
from .execute import execute as execute_node
from .plan import Plan
from .runtime import Runtime
from .streaming import FAILED, follow, graceful_interrupt, log_stream

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Command = Literal["run", "test", "build", "seed", "snapshot"]
KINDS: dict[str, set[str]] = {
    "run": {"source", "model", "sink"},  # snapshots are models `run` leaves alone, as dbt's does
    "test": {"test"},
    "build": {"source", "seed", "model", "sink", "test"},
    "seed": {"seed"},
    "snapshot": {"model"},  # the snapshots only
}


def runs(command: str, kind: str, config: dict[str, object]) -> bool:
    """Whether `command` runs a node of `kind` with `config`."""
    snapshot = of_node(kind, config).command == "snapshot"
    if command == "snapshot":
        return snapshot
    return kind in KINDS[command] and not (command == "run" and snapshot)


@dataclass(frozen=True)
class RunOptions:
    command: Command = "run"
    select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    params: dict[str, str] = field(default_factory=dict)
    vars: dict[str, Any] = field(default_factory=dict)
    full_refresh: bool = False
    threads: int | None = None  # --threads, else the profile's threads:, else 1
    fail_fast: bool = False
    state: str | None = None  # --state: an earlier target/
    defer: bool = False  # --defer: unselected tables this warehouse lacks are read from --state's
    validate: bool = False  # --validate: each extraction's window counted again in its database
    # --event-time-start/--event-time-end: the span microbatch models build (ISO 8601)
    event_time_start: str | None = None
    event_time_end: str | None = None


@dataclass
class RunReport:
    run_id: str
    command: str
    results: list[NodeResult]
    elapsed_s: float
    started_at: str
    interrupted: bool = False  # stopped by Ctrl-C
    options: RunOptions = field(default_factory=RunOptions)
    warehouse: str = ""  # where its tables are: what a later `--defer --state` reads

    @property
    def failed(self) -> bool:
        return any(r.status in FAILED for r in self.results)

    def dumps(self, plan: Plan) -> str:
        """target/run_results.json: in dbt's format, with rivc's facts (compiler/emit/run_results.py)."""
        project = plan.manifest.project
        nodes = plan.nodes
        return run_results.dumps(
            project=project,
            ids={nid: unique_id(project, node) for nid, node in nodes.items()},
            relations={
                nid: node.placed.relation_name
                for nid, node in nodes.items()
                if node.placed is not None and node.kind != "test"
            },
            command=self.command,
            run={
                "run_id": self.run_id,
                "started_at": self.started_at,
                "elapsed_s": round(self.elapsed_s, 3),
                "status": "error"
                if self.failed
                else "interrupted"
                if self.interrupted
                else "success",
                "warehouse": self.warehouse,
            },
            options=asdict(self.options),  # what `rivc retry` runs again with
            results=[asdict(r) for r in self.results],
            elapsed_s=self.elapsed_s,
        )


def compile_for_run(
    root: Path, options: RunOptions, on_warning: Callable[[str], None] = lambda text: None
) -> tuple[Any, Plan]:
    """Compile the selection, write target/ (the whole project) and return the compiled project
    with the Plan of this run, built from what was just compiled: nothing is read back."""
    from rivc.compiler import CompileOptions

    from ..ops.target import compile_to_target

    copts = CompileOptions(
        options.select, options.exclude, options.params, options.vars, state=options.state
    )
    compiled, files = compile_to_target(root, copts, on_warning)
    return compiled, Plan.from_compiled(root, compiled.project, files)


def execute(
    root: Path,
    options: RunOptions,
    spark_factory: Callable[[Plan], SparkSession],
    on_result: Callable[[int, int, NodeResult], None] = lambda i, n, r: None,
    on_start: Callable[[str], None] = lambda nid: None,
    on_warning: Callable[[str], None] = lambda text: None,
    on_progress: Callable[[str, str], None] = lambda nid, text: None,
    tracker: SparkProgress | None = None,
) -> RunReport:
    """Compile, take the run lock, run the chosen nodes and record every result."""
    started, started_at = time.perf_counter(), now()
    run_id = new_run_id()
    state = StateStore.for_project(root)
    if state.damaged:
        on_warning(state.damaged)
    try:
        # The lock comes first: a refused run writes nothing, and the running one executes the
        # SQL it compiled, held in memory (Plan), whatever is compiled into target/ meanwhile.
        with run_lock(root, run_id):
            compiled, plan = compile_for_run(root, options, on_warning)
            graph = compiled.graph
            todo = [
                n
                for n in compiled.chosen
                if runs(options.command, graph.nodes[n].kind, graph.nodes[n].config)
            ]
            check_sink_locations(plan, todo)
            defer_to = _deferred_warehouse(options)
            resumed = state.start_run(
                run_id,
                options.command,
                " ".join(options.select) or "*",
                fingerprint(options, plan),
            )
            if resumed:
                on_warning(f"resuming run {resumed}, which did not finish")
            warehouse = plan.warehouse
            runtime = Runtime(
                lambda: spark_factory(plan),
                plan,
                run_id,
                state,
                options.full_refresh,
                resume_from=resumed,
                on_progress=on_progress,
                on_warning=lambda text: on_warning(plan.scrub(text)),
                tracker=tracker or SparkProgress(),
                defer_to=defer_to,
                validate=options.validate,
                event_times=_event_times(options),
            )
            if options.command in ("run", "build"):  # what the selection reads from a database
                chosen = set(todo)
                todo = [n for n in compiled.selected if n in chosen or plan.is_extracted(n)]
            running = set(todo)
            runtime.feeds = {p for n in todo for p in graph.nodes[n].depends_on if p in running}
            runtime.running = running
            results: list[NodeResult] = []
            before: list[NodeResult] = []  # dbt's on-run-start and on-run-end (hooks.py)
            after: list[NodeResult] = []
            hooks = plan.manifest.hooks if todo else {}
            interrupted = runtime.interrupt
            endpoint = _serve_metrics(runtime, todo, on_warning)
            try:
                needed = compiled.graph.with_upstream(todo)  # `rivc seed`: the seeds alone
                bind_upstream(runtime, [n for n in compiled.selected if n in needed], todo)
                with graceful_interrupt(runtime.interrupt):
                    before = operations(runtime, "on_run_start", hooks.get("on_run_start", ()))
                    if any(r.status == "error" for r in before):
                        why = "on-run-start failed"
                        results = [
                            NodeResult(n, graph.nodes[n].kind, "skipped", message=why) for n in todo
                        ]
                    else:
                        results = _schedule(
                            runtime, compiled.graph, todo, options, on_result, on_start
                        )
                        stream = log_stream(plan, graph, todo)
                        if stream is not None:  # change logs followed until Ctrl-C

                            def run_pass(nodes: list[str]) -> list[NodeResult]:
                                quiet = lambda *_: None  # noqa: E731
                                return _schedule(runtime, graph, nodes, options, quiet, quiet)

                            results = follow(runtime, results, *stream, run_pass)
                    after = operations(runtime, "on_run_end", hooks.get("on_run_end", ()))
            finally:
                if endpoint is not None:
                    endpoint.shutdown()
                    endpoint.server_close()
                ended = before + results + after
                status = "error" if any(r.status in FAILED for r in ended) else "success"
                status = "interrupted" if interrupted.is_set() and status == "success" else status
                state.finish_run(run_id, status if len(results) == len(todo) else "error")
    finally:
        state.close()
    report = RunReport(
        run_id,
        options.command,
        [*before, *results, *after],
        time.perf_counter() - started,
        started_at,
        interrupted.is_set(),
        options,
        warehouse,
    )
    (root / TARGET_DIR / RESULTS_FILE).write_text(report.dumps(plan))
    from ..ops import lineage_out, metrics_out, notify

    metrics_out.export(plan.profile.metrics, root, plan.project.spec.name, report, on_warning)
    lineage_out.export(plan.profile.openlineage, root, plan.manifest, report, on_warning)
    notify.export(plan.profile.notify, plan.project.spec.name, report, on_warning)
    return report


def _serve_metrics(runtime: Runtime, todo: list[str], warn: Callable[[str], None]) -> Any:
    """The profile's scrape endpoint for this run: each selected sink's totals so far."""
    from ..ops import metrics_out
    from ..plane.registry import lag

    sinks = [n for n in todo if n.startswith("sink:")]
    plan, state, run_id = runtime.plan, runtime.state, runtime.run_id
    project = plan.project.spec.name
    streams = {
        n: plan.project.sources[plan.nodes[n].name]
        for n in todo
        if n.startswith("source:") and plan.project.sources[plan.nodes[n].name].connector.lag
    }

    def waiting(nid: str) -> int | None:
        source = streams[nid]
        try:
            return lag(source.connector, source.config, project, plan.nodes[nid].name)
        except Exception:  # noqa: BLE001  (an unreachable broker: no sample, the scrape goes on)
            return None

    def text() -> str:
        totals = {
            n: {**state.batch_totals(n, run_id), "restarts": runtime.restarts.get(n, 0)}
            for n in sinks
        }
        return metrics_out.live_text(project, run_id, totals, {n: waiting(n) for n in streams})

    return metrics_out.serve(plan.profile.metrics, text, warn)


def _event_times(options: RunOptions) -> tuple[Any, Any]:
    """--event-time-start and --event-time-end as times (compiler/microbatch.py)."""
    from rivc.compiler.microbatch import as_time

    try:
        start, end = (
            None if v is None else as_time(v, flag)
            for v, flag in (
                (options.event_time_start, "--event-time-start"),
                (options.event_time_end, "--event-time-end"),
            )
        )
    except ValueError as exc:
        raise ProjectError(str(exc)) from None
    if start is not None and end is not None and not start < end:
        raise ProjectError("--event-time-start must be before --event-time-end")
    return start, end


def _deferred_warehouse(options: RunOptions) -> str | None:
    """With --defer: the warehouse of the run whose target/ --state is (its run_results.json
    names it)."""
    if not options.defer:
        return None
    if options.state is None:
        raise ProjectError("--defer reads unselected parents from --state's run: give --state DIR")
    path = Path(options.state) / RESULTS_FILE
    try:
        warehouse = run_results.read(path).get("warehouse")
    except (OSError, ValueError, KeyError, TypeError):
        warehouse = None
    if not warehouse:
        raise ProjectError(
            f"--defer: {path} does not name the warehouse of a run: give the target/ of a run "
            "(`rivc run` or `build`) of this rivc as --state"
        )
    return str(warehouse)


def check_sink_locations(plan: Plan, todo: list[str]) -> None:
    """Before the first node: every sink that will run, its route targets and its dead-letter
    sink can write where they write (on this machine's disk; object stores answer at their
    first write, and `rivc doctor` probes them). An extraction and hours of models should not
    run into a directory a sink cannot write."""
    from ..ops.preflight import probe_sink

    sinks = plan.project.sinks
    for nid in todo:
        if not nid.startswith("sink:"):
            continue
        spec = sinks[nid.removeprefix("sink:")].spec
        if not spec.health_check:  # the user's word: its writes fail (and retry) instead
            continue
        for sink in (sinks[spec.name], *(sinks[t] for t in spec.targets)):
            error = probe_sink(sink.connector, sink.config, plan.root)
            if error:
                where = sink.where.location("config")
                raise ProjectError(
                    f"sink {sink.spec.name}: cannot write its location: {error}", where
                )


def bind_upstream(runtime: Runtime, needed: list[str], todo: list[str]) -> None:
    """Make what the selection reads but does not run available: source tables and stored
    models now; views when a node that reads them starts, after what they read has run (an
    extraction of this run, a model it rebuilds)."""
    for nid in needed:
        node = runtime.plan.nodes[nid]
        if nid in todo or node.kind == "test":
            continue
        if node.kind == "model" and node.materialization.relation and not node.stored:
            runtime.unbound.append(nid)
        else:
            bind(runtime, nid)


def _schedule(
    runtime: Runtime,
    graph: Any,
    todo: list[str],
    options: RunOptions,
    on_result: Callable[[int, int, NodeResult], None],
    on_start: Callable[[str], None],
) -> list[NodeResult]:
    """Run `todo` in dependency order, up to `threads` at a time."""
    threads = max(1, options.threads or runtime.plan.profile.threads or 1)
    pending = set(todo)
    parents = {n: {p for p in graph.upstream(n) if p in pending} for n in todo}
    # build: a node waits for the tests of what it reads, and a failed test skips it (dbt's way);
    # a model waits for its unit tests, which read no table, and is skipped when one fails
    for test in (n for n in todo if graph.nodes[n].kind == "test"):
        if graph.nodes[test].config.get("test") == "unit":
            model = f"model:{graph.nodes[test].config['model']}"
            if model in pending:
                parents[model].add(test)
            continue
        reads = graph.upstream(test)
        for tested in graph.nodes[test].depends_on:
            for child in graph.downstream(tested) - reads:
                if child in pending and graph.nodes[child].kind != "test":
                    parents[child].add(test)
    done: dict[str, NodeResult] = {}
    order = {n: i for i, n in enumerate(todo)}
    lock = threading.Lock()
    stop = False

    def run(nid: str) -> NodeResult:
        if threads > 1 and runtime.started and not runtime.on_connect:  # Connect: no pools
            pool = f"rivc-{threading.get_ident() % 1000}"
            runtime.spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
        runtime.tracker.enter(nid)
        on_start(nid)
        return execute_node(runtime, nid)

    def finish(result: NodeResult) -> None:
        with lock:
            done[result.node] = result
            on_result(len(done), len(todo), result)

    if threads > 1:
        _import_for_workers()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        running: dict[Future[NodeResult], str] = {}
        while len(done) < len(todo):
            for nid in sorted(pending, key=order.__getitem__):
                if len(running) >= threads:
                    break
                if nid in running.values() or any(p not in done for p in parents[nid]):
                    continue
                bad = [p for p in parents[nid] if done[p].status in FAILED | {"skipped"}]
                if bad or stop or runtime.interrupt.is_set():
                    pending.discard(nid)
                    why = (
                        f"upstream {bad[0]} did not succeed"
                        if bad
                        else ("--fail-fast" if stop else "interrupted (Ctrl-C)")
                    )
                    finish(NodeResult(nid, graph.nodes[nid].kind, "skipped", message=why))
                    runtime.state.record(runtime.run_id, done[nid])
                    continue
                running[pool.submit(run, nid)] = nid
            if not running:
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                nid = running.pop(fut)
                pending.discard(nid)
                result = fut.result()
                finish(result)
                if result.status in FAILED and options.fail_fast:
                    stop = True
    return [done[n] for n in todo]


def fingerprint(options: RunOptions, plan: Plan) -> str:
    """What decides whether a run repeats a killed one: the command, the selection, the
    parameters and the compiled project (manifest and SQL)."""
    import hashlib

    manifest = plan.manifest.dumps()
    text = json.dumps(
        [
            options.command,
            options.select,
            options.exclude,
            options.full_refresh,
            manifest,
            sorted(plan.compiled.items()),
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _import_for_workers() -> None:
    """Import what nodes import lazily before worker threads start: two threads importing
    pyspark.sql at the same moment see a partially initialized module."""
    import importlib

    for module in (
        "pyspark.sql",
        "pyspark.sql.functions",
        "pyarrow.parquet",
        "pyarrow.dataset",
        "deltalake",
        "rivc.adapters.ingest.extract",
        "rivc.adapters.delivery.sinkwriter",
    ):
        importlib.import_module(module)
