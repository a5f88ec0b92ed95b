"""`rivc state show|files|reset` and `rivc metrics`: what the state store holds."""

from __future__ import annotations

import json
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any

import click

from .common import (
    EXIT_FAILED,
    _compile,
    _console,
    _root,
    apply,
    handle_errors,
    project_dir_option,
    select_options,
)


@click.group()
def state() -> None:
    """Where sources and sinks stand (read from the tables), and the state store's record of
    runs, committed batches and written files."""


def _store(project_dir: str | None) -> Any:
    from ..state import StateStore

    store = StateStore.for_project(_root(project_dir))
    if store.damaged:
        click.echo(store.damaged, err=True)
    return store


# what a table on the console shows of each record (--json: every field)
SHOWN = {"runs": ("run_id", "command", "selection", "started_at", "finished_at", "status")}
_ISO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?([+-]00:00|Z)$")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    m = _ISO_TIME.match(text)
    return f"{m.group(1)} {m.group(2)}" if m else text  # UTC, to the second


def _print_rows(title: str, rows: list[dict[str, Any]], as_json: bool) -> None:
    from rich.table import Table

    if as_json:
        click.echo(json.dumps({title: rows}, indent=2, default=str))
        return
    table = Table(title=title, title_justify="left", show_edge=False)
    names = list(rows[0]) if rows else ["(none)"]
    names = [n for n in names if n in SHOWN.get(title, names)]
    for col in names:
        # ids are never cut (a piped console is 140 wide); long values fold onto more lines
        table.add_column(col, overflow="fold", no_wrap=col.endswith("id"))
    for row in rows:
        table.add_row(*(_cell(row[n]) for n in names))
    _console().print(table)


def _runtime(root: Path) -> Any:
    """A runtime over the project as compiled now, for reading its tables (no Spark)."""
    from ..run.runtime import Runtime
    from ..run.scheduler import RunOptions, compile_for_run
    from ..state import StateStore

    _, plan = compile_for_run(root, RunOptions())

    store = StateStore.for_project(root)
    if store.damaged:
        click.echo(store.damaged, err=True)
    return Runtime(_no_spark, plan, "state", store)


@state.command("show")
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def state_show(as_json: bool, project_dir: str | None) -> None:
    """Where each extracted source stands and what each sink holds of its inputs (read from
    the tables), then the state store's record: committed batches, recent runs."""
    from ..run.tables import consumers, positions

    root = _root(project_dir)
    runtime = _runtime(root)
    shown = {"sources": positions(runtime), "sinks": consumers(runtime)}
    shown.update(runtime.state.show())
    runtime.state.close()
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
    from ..state import new_run_id, run_lock

    with run_lock(root, new_run_id()):
        count = _store(project_dir).reset(nodes)
    click.echo(f"Removed {count} state record(s) of {what}.")


@state.command("rewind")
@click.argument("sink")
@click.option(
    "--to",
    "to",
    required=True,
    help="The first batch to take again: a batch id (rivc state show), a time "
    "(2026-11-20T10:00, UTC), or `start` for every batch the landing table holds.",
)
@click.option("--input", "inputs", multiple=True, help="Only this input (default: every one).")
@project_dir_option
@handle_errors
def state_rewind(sink: str, to: str, inputs: tuple[str, ...], project_dir: str | None) -> None:
    """Move a sink's place in its inputs back, so that its next run takes those batches again
    (an append sink then holds them twice: rebuild it, or mean it). The place is committed in
    the sink's own tables (under the run lock)."""
    from ..run.rewind import rewind
    from ..state import new_run_id, run_lock

    root = _root(project_dir)
    with run_lock(root, new_run_id()):
        runtime = _runtime(root)
        try:
            for line in rewind(runtime, sink, to, inputs):
                click.echo(line)
        finally:
            runtime.state.close()


@click.command()
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
    """Node results of the last runs: status, rows, bytes, duration, peak memory (--json: every
    recorded field)."""
    root = _root(project_dir)
    nodes = _chosen(root, selection + select, exclude)
    rows = _store(project_dir).history(nodes, last)
    if as_json:
        _print_rows("node runs", rows, as_json=True)
        return
    from rich.table import Table

    from ..ops.report import STYLE, human_bytes

    table = Table(title="node runs", title_justify="left", show_edge=False)
    logs = any(r.get("log_behind") is not None for r in rows)  # change-log sources ran
    numbers = ("rows", "bytes", "time", "memory", "log behind")
    for col in ("finished", "node", "status", *numbers[: 5 if logs else 4]):
        table.add_column(col, justify="right" if col in numbers else "left")
    for r in rows:
        status = r["status"] + (f", {r['retries']} retries" if r.get("retries") else "")
        table.add_row(
            str(r.get("finished_at") or "")[5:19].replace("T", " "),  # MM-DD HH:MM:SS
            r["node"],
            f"[{STYLE.get(r['status'], 'white')}]{status}[/]",
            "-" if r.get("rows") is None else f"{r['rows']:,}",
            human_bytes(r.get("bytes")),
            "-" if r.get("duration_s") is None else f"{r['duration_s']:.1f}s",
            "-" if r.get("peak_rss_mb") is None else f"{r['peak_rss_mb']:,.0f} MB",
            *([human_bytes(r.get("log_behind"))] if logs else []),
        )
    _console().print(table)


@click.command()
@click.argument("selection", nargs=-1)
@apply(select_options)
@click.option(
    "--retain-hours",
    type=click.IntRange(min=0),
    default=168,
    show_default=True,
    help="Keep files that a version younger than this references (readers and writers of "
    "older versions need them).",
)
@click.option("--dry-run", is_flag=True, help="List what VACUUM would delete; change nothing.")
@project_dir_option
@handle_errors
def maintain(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    retain_hours: int,
    dry_run: bool,
    project_dir: str | None,
) -> None:
    """Fold or remove the landed batches every consumer took that are older than the
    project's landing_retention; compact and VACUUM the Delta tables of landed sources, models
    and sinks; compact Iceberg sinks, expire their old snapshots and delete their unreferenced
    files (under the run lock)."""
    from rivc.compiler.loading.specs import parse_duration

    from ..ingest.retention import retain
    from ..lake import deltatable
    from ..lake.metastore import name_table
    from ..plane.base import Can, SinkContext
    from ..plane.registry import sink_for
    from ..run.runtime import Runtime
    from ..run.scheduler import RunOptions, compile_for_run
    from ..run.tables import consumers
    from ..state import StateStore, new_run_id, run_lock
    from ..util.storage import join
    from .execute import _spark

    root = _root(project_dir)
    with run_lock(root, new_run_id()):  # no rivc run of this project writes meanwhile
        compiled, plan = compile_for_run(
            root, RunOptions(select=select + selection, exclude=exclude)
        )
        tables: list[tuple[str, str, Any]] = []
        sinks: list[str] = []
        keep = parse_duration(plan.project.spec.landing_retention)
        named = plan.profile.spark.hive and not dry_run  # stored nodes named in a metastore
        spark = (lambda: _spark(plan)) if named else _no_spark
        runtime = Runtime(spark, plan, "maintain", StateStore.for_project(root))
        for nid in compiled.chosen:
            node = plan.nodes[nid]
            if plan.is_extracted(nid):
                landing = plan.landing(nid)
                if not dry_run:
                    held = [c["place"] for c in consumers(runtime, nid)]
                    kept = retain(landing, node.name, held, keep)
                    if kept.batches:
                        how = f"folded into batch {kept.into}" if kept.into else "removed"
                        click.echo(f"{nid}: {kept.batches} landed batches {how}")
                tables.append((nid, landing.uri, landing.store))
            elif node.stored:
                uri = join(plan.warehouse, node.name)
                tables.append((nid, uri, plan.store(uri)))
            elif node.kind == "sink":
                sinks.append(nid)
        for nid, uri, store in tables:
            placed = plan.nodes[nid].placed if named and plan.nodes[nid].stored else None
            renamed = None
            if placed:  # the name on the current files before any VACUUM (a killed run's)
                renamed = partial(name_table, runtime.spark, placed, uri, store)
                renamed()
            done = deltatable.maintain(uri, store, retain_hours, dry_run, compacted=renamed)
            click.echo(f"{nid}: {deltatable.maintained(done, dry_run)}")
        for nid in sinks:  # after the tables: a retention Delta refuses stops before these
            name = plan.nodes[nid].name
            sink = plan.project.sinks[name]
            ctx = SinkContext(root, plan.manifest.project, name, plan.profile.storage)
            target = sink_for(sink.spec.connector, sink.config, ctx)
            line = target.maintain(retain_hours, dry_run) if Can.MAINTAIN in target.can else None
            if line is not None:
                click.echo(f"{nid}: {line}")
        runtime.state.close()


def _no_spark() -> Any:
    raise AssertionError("reading and maintaining the tables needs no Spark")
