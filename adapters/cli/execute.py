"""`rivc run | test | build | show | check | doctor`: the commands that execute a project on
Spark or reach its databases."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rivc.compiler.errors import CompileFailed, EnvironmentFault
from rivc.compiler.loading.locate import SPARK_LOG, STATE_DIR
from rivc.compiler.loading.secrets import redact_text

from ..util.sparkkind import is_connect
from .common import (
    EXIT_FAILED,
    _compile,
    _console,
    _params,
    _root,
    _vars,
    apply,
    compile_options,
    handle_errors,
    project_dir_option,
    select_options,
    state_option,
)


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.obj and ctx.obj.get("debug"))


def _spark(plan: Any, debug: bool = False, shared: bool = False) -> Any:
    from pyspark.errors import PySparkException

    from ..spark.server import for_run
    from ..spark.session import get_session
    from ..util.storage import mark_same_disk

    log = None if debug else plan.root / STATE_DIR / SPARK_LOG  # --debug: Spark's output too
    spec = plan.profile.spark
    warm = for_run(plan.root, spec, lambda text: click.echo(text, err=True), shared)
    if warm is not None:  # the project's warm server (rivc server start) stands in for it
        spec = spec.model_copy(update={"remote": warm, "master": None})
    try:
        spark = get_session(
            spec,
            app_name=f"rivc {plan.manifest.project}",
            log=log,
            state_dir=plan.root / STATE_DIR,
        )
    except PySparkException as exc:  # most often: no Java, or a Connect server out of reach
        raise EnvironmentFault(
            f"Spark did not start ({exc.getCondition() or type(exc).__name__}): check that "
            "Java 17 is installed (java on PATH or JAVA_HOME) and the profile's spark: settings"
        ) from exc
    if not is_connect(spark):
        spark.sparkContext.setLogLevel("ERROR")
        return spark
    if warm is not None or (spec.remote or os.environ.get("SPARK_REMOTE", "")).startswith("local"):
        mark_same_disk(spark)  # a server on this machine: the local data paths apply
    if warm is not None and shared:
        for table in spark.catalog.listTables():  # a shared session: the last run's views go
            if table.isTemporary:
                spark.catalog.dropTempView(table.name)
    return spark


EXIT_INTERRUPTED = 130  # stopped by Ctrl-C, as shells report SIGINT


def _execute(command: str, selection: tuple[str, ...], **kw: Any) -> None:
    from ..run.scheduler import RunOptions

    root = _root(kw.pop("project_dir"))
    options = RunOptions(
        command,  # type: ignore[arg-type]
        kw["select"] + selection,
        kw["exclude"],
        _params(kw["params"]),
        _vars(kw["vars_"]),
        kw.get("full_refresh", False),
        kw["threads"],
        kw["fail_fast"],
        kw["state"],
        kw["defer"],
        kw.get("validate", False),
        kw.get("event_time_start"),
        kw.get("event_time_end"),
    )
    _run(root, options)


def _run(root: Path, options: Any) -> None:
    from ..ops.report import Progress, summary
    from ..run.scheduler import execute
    from ..spark.progress import SparkProgress

    console = _console()
    tracker = SparkProgress()
    progress = Progress(console, tracker.describe)
    debug = _debug()
    try:
        report = execute(
            root,
            options,
            lambda plan: _spark(plan, debug, shared=True),  # threads have no click context
            progress.result,
            progress.start,
            lambda text: click.echo(redact_text(text), err=True),
            progress.note,
            tracker,
        )
    finally:
        progress.close()
    summary(console, report)
    spark_log = root / STATE_DIR / SPARK_LOG
    if report.failed and spark_log.exists() and not debug:
        click.echo(f"Spark's own output: {spark_log.relative_to(root)}", err=True)
    sys.exit(EXIT_FAILED if report.failed else EXIT_INTERRUPTED if report.interrupted else 0)


full_refresh = click.option(
    "--full-refresh", is_flag=True, help="Rebuild incremental models from scratch."
)
event_times = [
    click.option(
        "--event-time-start",
        help="Microbatch models build their batches from this date or time (ISO 8601, UTC).",
    ),
    click.option(
        "--event-time-end",
        help="... up to this date or time (default: now).",
    ),
]
validate = click.option(
    "--validate",
    is_flag=True,
    help="Count each extraction's window again in its database; a difference fails it.",
)


def runner_command(extra: list[Any]) -> Callable[[Callable[..., None]], click.Command]:
    """The options `run`, `test` and `build` share, plus `extra`."""
    return apply(
        [
            click.command(),
            click.argument("selection", nargs=-1),
            *select_options,
            state_option,
            *compile_options,
            click.option(
                "--threads",
                type=click.IntRange(min=1),
                help="Nodes run at once (default: the profile's threads:, else 1).",
            ),
            click.option("--fail-fast", is_flag=True, help="Stop at the first failure."),
            click.option(
                "--defer",
                is_flag=True,
                help="Read unselected tables this warehouse lacks from the --state run's.",
            ),
            *extra,
            project_dir_option,
            handle_errors,
        ]
    )


@runner_command([full_refresh, validate, *event_times])
def run(selection: tuple[str, ...], **kw: Any) -> None:
    """Run sources, models and sinks of the selection on Spark, in DAG order."""
    _execute("run", selection, **kw)


@runner_command([])
def test(selection: tuple[str, ...], **kw: Any) -> None:
    """Run generic and singular tests; exit 1 when a test of severity error fails."""
    _execute("test", selection, **kw)


@runner_command([full_refresh])
def seed(selection: tuple[str, ...], **kw: Any) -> None:
    """Load the seeds of the selection (seeds/*.csv) into their warehouse tables."""
    _execute("seed", selection, **kw)


@runner_command([full_refresh])
def snapshot(selection: tuple[str, ...], **kw: Any) -> None:
    """Run the snapshots of the selection (snapshots/*.sql): history of their queries' rows."""
    _execute("snapshot", selection, **kw)


@runner_command([full_refresh, validate, *event_times])
def build(selection: tuple[str, ...], **kw: Any) -> None:
    """Run and test in DAG order: a failing test skips what depends on its model."""
    _execute("build", selection, **kw)


RETRIED = ("error", "fail", "skipped")  # what `rivc retry` runs again


@click.command()
@project_dir_option
@handle_errors
def retry(project_dir: str | None) -> None:
    """Run the nodes that failed or were skipped in the last run again, with its command and
    options (target/run_results.json), as `dbt retry` does."""
    from dataclasses import replace

    from rivc.compiler.dag.selector import RESULTS
    from rivc.compiler.emit import run_results
    from rivc.compiler.errors import ProjectError

    from ..run.scheduler import RunOptions

    root = _root(project_dir)
    try:
        last = run_results.read(root / RESULTS)
    except FileNotFoundError:
        raise ProjectError(f"nothing to retry: there was no run ({RESULTS} is missing)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProjectError(f"{RESULTS} cannot be read: {exc}") from None
    found = {r["status"] for r in last["results"] if r["kind"] != "operation"}
    chosen = tuple(f"result:{status}" for status in RETRIED if status in found)
    if not chosen:
        click.echo(f"nothing to retry: every node of the last `rivc {last['command']}` succeeded")
        return
    args = last["args"]
    known = {k: v for k, v in args.items() if k in RunOptions.__dataclass_fields__}
    options = replace(RunOptions(**known), select=chosen, exclude=())
    _run(root, options)


@click.command()
@click.argument("node")
@click.option("--limit", type=int, default=10, show_default=True)
@project_dir_option
@handle_errors
def show(node: str, limit: int, project_dir: str | None) -> None:
    """Preview rows of a model, source table or sink input."""
    from rich.table import Table

    from ..run.preview import show as show_rows

    debug = _debug()
    data = show_rows(_root(project_dir), node, limit, lambda plan: _spark(plan, debug))
    table = Table(show_edge=False)
    columns = []
    for name in data.column_names:
        table.add_column(name)
        columns.append(_cells(data.column(name)))
    for row in zip(*columns, strict=True):
        table.add_row(*row)
    _console().print(table)


def _cells(column: Any) -> list[str]:
    """A column as display text; Arrow's own text where it has one (times without the
    time-zone database pyarrow would otherwise load through pandas)."""
    import pyarrow as pa

    try:
        values = column.cast(pa.string()).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = [None if v is None else str(v) for v in column.to_pylist()]
    return ["NULL" if v is None else v for v in values]


@click.command()
@click.argument("selection", nargs=-1)
@apply(select_options + compile_options)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@project_dir_option
@handle_errors
def check(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    params: tuple[str, ...],
    vars_: str | None,
    fmt: str,
    project_dir: str | None,
) -> None:
    """Preflight: EXPLAIN every selected database extraction; verdict and advice. Exit 1 if
    a check failed or a verdict is UNSAFE."""
    from ..ingest.landing import Landing
    from ..ops.preflight import check_log, check_table, to_json
    from ..run.warehouse import landing_uri
    from ..util.storage import Store, resolve

    root = _root(project_dir)
    compiled = _compile(root, select + selection, exclude, _params(params), _vars(vars_), None)
    if compiled.errors:
        raise CompileFailed(f.error for f in compiled.errors)
    project = compiled.project
    warehouse = resolve(project.profile.warehouse, root)
    checks = []
    for nid in compiled.selected:
        node = compiled.graph.nodes[nid]
        if node.kind == "source" and project.sources[node.name].connector.relational:
            uri = landing_uri(warehouse, node.name)
            landed = Landing(uri, Store.of(uri, dict(project.profile.storage)), "log")
            cursor = landed.position().cursor
            checks.append(check_table(project, node.name, node.sql or "", cursor))
        elif node.kind == "source" and project.sources[node.name].connector.log:
            checks.append(check_log(project, node.name))
    if fmt == "json":
        click.echo(to_json(checks))
    else:
        if not checks:
            click.echo("No PostgreSQL or MySQL source tables (or change logs) in the selection.")
        for c in checks:
            click.echo(f"{c.table}")
            click.echo(f"  strategy:    {c.strategy}")
            if c.error:
                click.echo(f"  verdict:     FAILED ({redact_text(c.error)})")
                continue
            if c.mode == "log":
                click.echo(f"  verdict:     {c.verdict}")
                continue
            click.echo(f"  rows (est.): {c.row_estimate:,}")
            click.echo(f"  window:      {c.cursor_range}")
            click.echo(f"  scan:        {c.scan}")
            click.echo(f"  verdict:     {c.verdict}")
            click.echo(f"  recommended: tuning.profile: {c.recommended_profile}")
            for w in c.warnings:
                click.echo(f"  warning:     {w}")
    sys.exit(EXIT_FAILED if any(c.verdict in ("FAILED", "UNSAFE") for c in checks) else 0)


@click.command()
@project_dir_option
@handle_errors
def doctor(project_dir: str | None) -> None:
    """Connect to every connection of the profile and write-probe every sink location."""
    from rivc.compiler.loading.project import load_project, project_secrets
    from rivc.compiler.loading.secrets import Scrubber

    from ..ops.preflight import doctor as run_doctor

    project = load_project(_root(project_dir))
    scrub = Scrubber(project_secrets(project, os.environ))
    lines = run_doctor(project)
    for what, ok, detail in lines:
        click.echo(scrub(f"[{'OK' if ok else 'FAIL'}] {what}: {detail}"))
    if not lines:
        click.echo("Nothing to check: no connections and no sink locations.")
    sys.exit(0 if all(ok for _, ok, _ in lines) else EXIT_FAILED)


@click.group()
def server() -> None:
    """A warm local Spark for this project: runs and previews connect to it while it runs."""


def _profile_spark(project_dir: str | None) -> tuple[Path, Any]:
    from rivc.compiler.loading.profiles import load_profile
    from rivc.compiler.loading.project import load_project_spec

    root = _root(project_dir)
    spec, _ = load_project_spec(root, os.environ)
    profile, _, _ = load_profile(root, spec.profile, os.environ)
    return root, profile.spark


@server.command("start")
@project_dir_option
@handle_errors
def server_start(project_dir: str | None) -> None:
    """Start (or restart) the project's Spark Connect server on 127.0.0.1, with a token."""
    from ..spark import server as warm

    root, spark = _profile_spark(project_dir)
    started = time.perf_counter()
    s = warm.start(root, spark)
    up = time.perf_counter() - started
    warmed = warm.warm_up(root, s)
    click.echo(
        f"warm Spark server running (pid {s.pid}, 127.0.0.1:{s.port}) in {up:.1f}s, its Delta "
        f"merge path loaded in {warmed:.1f}s; rivc run, test, build and show use it until "
        "rivc server stop"
    )


@server.command("stop")
@project_dir_option
@handle_errors
def server_stop(project_dir: str | None) -> None:
    """Stop the project's warm Spark server."""
    from ..spark import server as warm

    stopped = warm.stop(_root(project_dir))
    click.echo("warm Spark server stopped" if stopped else "no warm Spark server was running")


@server.command("status")
@project_dir_option
@handle_errors
def server_status(project_dir: str | None) -> None:
    """Whether the project's warm Spark server runs, and whether runs can use it as it is."""
    from ..spark import server as warm

    root, spark = _profile_spark(project_dir)
    s = warm.read(root)
    if s is None or not s.alive():
        click.echo("no warm Spark server (rivc server start)")
        sys.exit(EXIT_FAILED)
    up = time.time() - s.started_at
    if not warm.local(spark):
        state = "unused: the profile's Spark is not local"
    elif s.fingerprint != warm.fingerprint(spark):
        state = "the configuration changed: the next run restarts it"
    else:
        from ..state import running

        busy = running(root)
        state = f"serving {busy}" if busy else "idle: runs use it"
    click.echo(f"warm Spark server: pid {s.pid}, 127.0.0.1:{s.port}, up {up:.0f}s, {state}")
