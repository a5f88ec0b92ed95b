"""`rivc source freshness`: how old each source table's newest data is (docs/sources.md)."""

from __future__ import annotations

import json
import sys
import time

import click

from rivc.compiler.loading.locate import TARGET_DIR

from .common import _console, _root, apply, handle_errors, project_dir_option, select_options
from .state import _chosen, _runtime

EXIT_FAILED = 1


@click.group()
def source() -> None:
    """Source tables: how fresh their data is."""


@source.command("freshness")
@click.argument("selection", nargs=-1)
@apply(select_options)
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def freshness(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    as_json: bool,
    project_dir: str | None,
) -> None:
    """Each source table with a `freshness` setting: the age of its newest row (its
    `loaded_at_field`) or of its newest extraction, against `warn_after` and `error_after`.
    Writes target/sources.json; exit 1 when one is past error_after or cannot be measured. No
    JVM."""
    from ..ops.freshness import measure, sources_json
    from ..ops.report import STYLE

    started = time.perf_counter()
    root = _root(project_dir)
    runtime = _runtime(root)
    runtime.state.close()
    chosen = _chosen(root, selection + select, exclude) or list(runtime.plan.nodes)
    results = measure(runtime, chosen)
    data = sources_json(runtime.plan.manifest.project, results, time.perf_counter() - started)
    (root / TARGET_DIR / "sources.json").write_text(json.dumps(data, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif not results:
        click.echo("No source table has a freshness setting.")
    else:
        from rich.table import Table

        table = Table(title="source freshness", title_justify="left", show_edge=False)
        for col in ("source", "status", "newest", "age", "warn after", "error after"):
            table.add_column(col, justify="right" if col == "age" else "left")
        for r in results:
            after = {
                k: f"{v['count']} {v['period']}" for k, v in r.criteria.items() if k != "filter"
            }
            table.add_row(
                r.node.removeprefix("source:"),
                f"[{STYLE.get(r.status.removeprefix('runtime '), 'white')}]{r.status}[/]",
                "-" if r.max_loaded_at is None else r.max_loaded_at.isoformat(timespec="seconds"),
                "-" if r.age_s is None else _age(r.age_s),
                after.get("warn_after", "-"),
                after.get("error_after", "-"),
            )
        _console().print(table)
        for r in results:
            if r.error:
                click.echo(f"{r.node}: {r.error}", err=True)
    sys.exit(EXIT_FAILED if any(r.status in ("error", "runtime error") for r in results) else 0)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
