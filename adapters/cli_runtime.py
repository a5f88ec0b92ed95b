"""`rivc run | test | build | show | check | doctor | state | metrics`: the commands that execute
a project or read what executions recorded. They register on the group defined in cli.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rivc.compiler.errors import CompileFailed, EnvironmentFault
from rivc.compiler.redact import redact_text

from .cli import (
    EXIT_FAILED,
    _compile,
    _params,
    _root,
    _vars,
    apply,
    compile_options,
    handle_errors,
    main,
    project_dir_option,
    select_options,
)
from .spark import SPARK_LOG
from .state import STATE_DIR


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.obj and ctx.obj.get("debug"))


def _spark(plan: Any, debug: bool = False) -> Any:
    from pyspark.errors import PySparkException

    from .spark import get_session

    log = None if debug else plan.root / STATE_DIR / SPARK_LOG  # --debug: Spark's output too
    try:
        spark = get_session(
            plan.profile.spark, app_name=f"rivc {plan.manifest['project']}", log=log
        )
    except PySparkException as exc:  # most often: no Java, or a Connect server out of reach
        raise EnvironmentFault(
            f"Spark did not start ({exc.getCondition() or type(exc).__name__}): check that "
            "Java 17 is installed (java on PATH or JAVA_HOME) and the profile's spark: settings"
        ) from exc
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        spark.sparkContext.setLogLevel("ERROR")
    return spark


EXIT_INTERRUPTED = 130  # stopped by Ctrl-C, as shells report SIGINT


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:  # logs and CI: wide enough for the summary table
        console = Console(highlight=False, width=140)
    return console


def _execute(command: str, selection: tuple[str, ...], **kw: Any) -> None:

    from .report import Progress, summary
    from .runner import RunOptions, execute

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
    )
    console = _console()
    progress = Progress(console)
    debug = _debug()
    report = execute(
        root,
        options,
        lambda plan: _spark(plan, debug),  # threads have no click context: decided here
        progress.result,
        progress.start,
        lambda text: click.echo(redact_text(text), err=True),
    )
    summary(console, report)
    spark_log = root / STATE_DIR / SPARK_LOG
    if report.failed and spark_log.exists() and not debug:
        click.echo(f"Spark's own output: {spark_log.relative_to(root)}", err=True)
    sys.exit(EXIT_FAILED if report.failed else EXIT_INTERRUPTED if report.interrupted else 0)


full_refresh = click.option(
    "--full-refresh", is_flag=True, help="Rebuild incremental models from scratch."
)


def runner_command(extra: list[Any]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The options `run`, `test` and `build` share, plus `extra`."""
    return apply(
        [
            main.command(),
            click.argument("selection", nargs=-1),
            *select_options,
            *compile_options,
            click.option(
                "--threads", type=int, default=1, show_default=True, help="Nodes run at once."
            ),
            click.option("--fail-fast", is_flag=True, help="Stop at the first failure."),
            *extra,
            project_dir_option,
            handle_errors,
        ]
    )


@runner_command([full_refresh])
def run(selection: tuple[str, ...], **kw: Any) -> None:
    """Run sources, models and sinks of the selection on Spark, in DAG order."""
    _execute("run", selection, **kw)


@runner_command([])
def test(selection: tuple[str, ...], **kw: Any) -> None:
    """Run generic and singular tests; exit 1 when a test of severity error fails."""
    _execute("test", selection, **kw)


@runner_command([full_refresh])
def build(selection: tuple[str, ...], **kw: Any) -> None:
    """Run and test in DAG order: a failing test skips what depends on its model."""
    _execute("build", selection, **kw)


@main.command()
@click.argument("node")
@click.option("--limit", type=int, default=10, show_default=True)
@project_dir_option
@handle_errors
def show(node: str, limit: int, project_dir: str | None) -> None:
    """Preview rows of a model, source table or sink input."""
    from rich.table import Table

    from .runner import show as show_rows

    debug = _debug()
    data = show_rows(_root(project_dir), node, limit, lambda plan: _spark(plan, debug))
    table = Table(show_edge=False)
    for name in data.column_names:
        table.add_column(name)
    for row in data.to_pylist():
        table.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    _console().print(table)


@main.command()
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
    from .preflight import check_table, to_json
    from .state import StateStore

    root = _root(project_dir)
    compiled = _compile(root, select + selection, exclude, _params(params), _vars(vars_), None)
    if compiled.errors:
        raise CompileFailed(f.error for f in compiled.errors)
    project = compiled.project
    state = StateStore.for_project(root) if (root / ".rivc" / "state.db").exists() else None
    checks = []
    for nid in compiled.selected:
        node = compiled.graph.nodes[nid]
        if node.kind == "source" and project.sources[node.name].connector.relational:
            checks.append(check_table(project, node.name, node.sql or "", state))
    if fmt == "json":
        click.echo(to_json(checks))
    else:
        if not checks:
            click.echo("No PostgreSQL or MySQL source tables in the selection.")
        for c in checks:
            click.echo(f"{c.table}")
            click.echo(f"  strategy:    {c.strategy}")
            if c.error:
                click.echo(f"  verdict:     FAILED ({redact_text(c.error)})")
                continue
            click.echo(f"  rows (est.): {c.row_estimate:,}")
            click.echo(f"  window:      {c.cursor_range}")
            click.echo(f"  scan:        {c.scan}")
            click.echo(f"  verdict:     {c.verdict}")
            click.echo(f"  recommended: tuning.profile: {c.recommended_profile}")
            for w in c.warnings:
                click.echo(f"  warning:     {w}")
    sys.exit(EXIT_FAILED if any(c.verdict in ("FAILED", "UNSAFE") for c in checks) else 0)


@main.command()
@project_dir_option
@handle_errors
def doctor(project_dir: str | None) -> None:
    """Connect to every connection of the profile and write-probe every sink location."""
    from rivc.compiler.project import load_project

    from .preflight import doctor as run_doctor

    lines = run_doctor(load_project(_root(project_dir)))
    for what, ok, detail in lines:
        click.echo(redact_text(f"[{'OK' if ok else 'FAIL'}] {what}: {detail}"))
    if not lines:
        click.echo("Nothing to check: no connections and no sink locations.")
    sys.exit(0 if all(ok for _, ok, _ in lines) else EXIT_FAILED)


@main.group()
def state() -> None:
    """The state store: cursors, committed batches, written files."""


def _store(project_dir: str | None) -> Any:
    from .state import StateStore

    return StateStore.for_project(_root(project_dir))


def _print_rows(title: str, rows: list[dict[str, Any]], as_json: bool) -> None:
    from rich.table import Table

    if as_json:
        click.echo(json.dumps({title: rows}, indent=2, default=str))
        return
    table = Table(title=title, title_justify="left", show_edge=False)
    for col in rows[0] if rows else ["(none)"]:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    _console().print(table)


@state.command("show")
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def state_show(as_json: bool, project_dir: str | None) -> None:
    """Cursors, the last committed batch of every sink, recent runs."""
    shown = _store(project_dir).show()
    if as_json:
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    for title, rows in shown.items():
        _print_rows(title, rows, as_json=False)


@state.command("files")
@click.argument("selection", nargs=-1)
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def state_files(selection: tuple[str, ...], as_json: bool, project_dir: str | None) -> None:
    """The file manifest: every file a sink wrote, with its run, batch, rows and bytes."""
    store = _store(project_dir)
    nodes = [s if ":" in s else f"sink:{s}" for s in selection] or None
    _print_rows("files", store.files(nodes), as_json)


def _chosen(root: Path, selection: tuple[str, ...], exclude: tuple[str, ...]) -> list[str] | None:
    """Node ids a selection names; None for no selection (everything)."""
    if not selection and not exclude:
        return None
    return list(_compile(root, selection, exclude, {}, {}, None).chosen)


@state.command("reset")
@click.argument("selection", nargs=-1)
@apply(select_options)
@click.option("--yes", is_flag=True, help="Do not ask.")
@project_dir_option
@handle_errors
def state_reset(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    yes: bool,
    project_dir: str | None,
) -> None:
    """Forget cursors, batches and files of the selection (everything without one)."""
    root = _root(project_dir)
    nodes = _chosen(root, selection + select, exclude)
    what = ", ".join(nodes) if nodes else "every node"
    if not yes and not click.confirm(f"Forget the state of {what}?"):
        sys.exit(EXIT_FAILED)
    from .state import new_run_id, run_lock

    with run_lock(root, new_run_id()):
        count = _store(project_dir).reset(nodes)
    click.echo(f"Removed {count} state record(s) of {what}.")


@main.command()
@click.argument("selection", nargs=-1)
@apply(select_options)
@click.option("--last", type=int, default=5, show_default=True, help="Runs to show.")
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def metrics(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    last: int,
    as_json: bool,
    project_dir: str | None,
) -> None:
    """Node results of the last runs: status, rows, files, bytes, duration, peak RSS, schema."""
    root = _root(project_dir)
    nodes = _chosen(root, selection + select, exclude)
    _print_rows("node runs", _store(project_dir).history(nodes, last), as_json)
