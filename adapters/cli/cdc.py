"""`rivc cdc status|drop`: where change-log sources stand in their logs (docs/cdc.md). Each
source's log (its connector's ChangeLog, adapters/ingest/changelog.py) says what it shows and
what dropping means."""

from __future__ import annotations

import json
from typing import Any

import click

from rivc.compiler.errors import ProjectError

from .common import _root, handle_errors, project_dir_option
from .state import _print_rows, _runtime


@click.group()
def cdc() -> None:
    """Change-log sources (postgres-cdc, mysql-cdc): where they are in the log."""


def _sources(runtime: Any) -> dict[str, list[str]]:
    """Each change-log source: its tables' node ids."""
    out: dict[str, list[str]] = {}
    for fqn, table in sorted(runtime.plan.project.sources.items()):
        if table.connector.log:
            out.setdefault(table.source.name, []).append(f"source:{fqn}")
    return out


@cdc.command("status")
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def cdc_status(as_json: bool, project_dir: str | None) -> None:
    """Each change-log source's log: the position each of its tables holds, beside what the
    server keeps (a slot's confirmed position and its log; a binlog's end)."""
    from ..ingest.changelog import held_position, source_log

    runtime = _runtime(_root(project_dir))
    rows = []
    for name, nids in _sources(runtime).items():
        log, source = source_log(runtime.plan, name)
        held = {nid: held_position(log, runtime.plan.landing(nid)) for nid in nids}
        rows += log.status(source, held)
    runtime.state.close()
    if as_json:
        click.echo(json.dumps({"cdc": rows}, indent=2))
    else:
        _print_rows("cdc", rows, as_json=False)


@cdc.command("drop")
@click.argument("source")
@project_dir_option
@handle_errors
def cdc_drop(source: str, project_dir: str | None) -> None:
    """Remove what SOURCE's database keeps for it (postgres-cdc: its replication slot and
    publication), so that the server keeps no log for it. Its landing tables stay; a later run
    refuses to continue from them (the log between is gone) until `rivc run --full-refresh`
    takes a new snapshot."""
    from ..ingest.changelog import source_log

    runtime = _runtime(_root(project_dir))
    runtime.state.close()
    known = _sources(runtime)
    if source not in known:
        names = ", ".join(known) or "none"
        raise ProjectError(
            f"{source!r} is not a change-log source of this project (they are: {names})"
        )
    log, found = source_log(runtime.plan, source)
    click.echo(log.drop(found))
