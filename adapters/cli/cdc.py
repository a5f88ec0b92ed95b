"""`rivc cdc status|drop`: the replication slots of change-log sources (docs/cdc.md)."""

from __future__ import annotations

import json
import os
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


def _first(runtime: Any, source: str) -> Any:
    return next(t for t in runtime.plan.project.sources.values() if t.source.name == source)


def _conn(runtime: Any, source: str) -> Any:
    from ..connectors.databases import Conn

    first = _first(runtime, source)
    spec = runtime.plan.profile.connections.get(first.source.connection or "")
    if spec is None:
        raise ProjectError(
            f"source {source}: connection {first.source.connection!r} is not in the profile"
        )
    return Conn.resolve(spec, os.environ)


def _slot(runtime: Any, source: str) -> tuple[Any, str, str]:
    from ..run.cdc import slot_names

    config = _first(runtime, source).config
    slot, publication = slot_names(runtime.plan.manifest.project, source, config)
    return _conn(runtime, source), slot, publication


def _binlog_rows(runtime: Any, source: str, nids: list[str]) -> list[dict[str, Any]]:
    """mysql-cdc: each table's held binlog coordinates beside the server's log end."""
    from ..connectors.databases import connection

    with connection(_conn(runtime, source)) as db, db.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    end = None if row is None else f"{row[0]}:{row[1]}"
    rows = []
    for nid in nids:
        held = runtime.plan.landing(nid).position().cdc
        at = None if not held else f"{held['file']}:{held['pos']}"
        gtid = None if not held else held.get("gtid")
        rows.append({"table": nid, "held": at, "gtid": gtid, "log_end": end})
    return rows


@cdc.command("status")
@click.option("--json", "as_json", is_flag=True)
@project_dir_option
@handle_errors
def cdc_status(as_json: bool, project_dir: str | None) -> None:
    """Each change-log source's slot: the position it confirms, how much log the server keeps
    for it, and the position each of its tables holds."""
    from ..connectors.databases import connection
    from ..connectors.pgoutput import lsn_text
    from ..connectors.pgslot import LogicalSlot

    runtime = _runtime(_root(project_dir))
    rows = []
    for source, nids in _sources(runtime).items():
        if _first(runtime, source).connector.name == "mysql-cdc":
            rows += _binlog_rows(runtime, source, nids)
            continue
        conn, slot, publication = _slot(runtime, source)
        with connection(conn) as db:
            log = LogicalSlot(db, slot, publication)
            confirmed, lag = log.confirmed(), log.lag_bytes()
        for nid in nids:
            held = runtime.plan.landing(nid).position().cdc
            rows.append(
                {
                    "table": nid,
                    "slot": slot,
                    "confirmed": None if confirmed is None else lsn_text(confirmed),
                    "held": None if not held else lsn_text(int(held["lsn"])),
                    "lag_bytes": lag,
                }
            )
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
    """Remove SOURCE's replication slot and publication from its database, so that the server
    keeps no log for it. Its landing tables stay; a later run refuses to continue from them
    (the log between is gone) until `rivc run --full-refresh` takes a new snapshot."""
    from ..connectors.databases import connection
    from ..connectors.pgslot import LogicalSlot

    runtime = _runtime(_root(project_dir))
    runtime.state.close()
    known = _sources(runtime)
    if source not in known:
        names = ", ".join(known) or "none"
        raise ProjectError(
            f"{source!r} is not a change-log source of this project (they are: {names})"
        )
    if _first(runtime, source).connector.name == "mysql-cdc":
        raise ProjectError(
            f"{source!r} is a mysql-cdc source: it keeps nothing on the server (the server "
            "purges its binlog by its own expiry settings)"
        )
    conn, slot, publication = _slot(runtime, source)
    with connection(conn) as db:
        db.execute("SET default_transaction_read_only = off")
        LogicalSlot(db, slot, publication).drop()
    click.echo(f"dropped slot {slot} and publication {publication}")
