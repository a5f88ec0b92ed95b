"""What the tables say: where each landed source's extraction stands, and what each sink's
tables hold of their inputs. The truth `rivc state show` prints, retention keeps to and
`rivc state rewind` moves (the state store only records runs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .runtime import Runtime


def batch_time(batch: int | None) -> str | None:
    """A landed batch id's time (ids are milliseconds since 1970); None for other ids."""
    if batch is None or batch < 10**12:
        return None
    return datetime.fromtimestamp(batch / 1000, UTC).isoformat(timespec="milliseconds")


def positions(runtime: Runtime) -> list[dict[str, Any]]:
    """Every extracted source table: its landing table's newest complete batch, cursor and
    batches held; a change-log table's distance behind the log after its last run (from the
    record: `rivc cdc status` asks the server)."""
    plan = runtime.plan
    out = []
    for nid in plan.nodes:
        if not plan.is_extracted(nid):
            continue
        landing = plan.landing(nid)
        dt = landing.table()
        at = landing.position(dt)
        held = sorted(
            {int(f.partition["_rivc_batch"] or -1) for f in landing.files(None, at.batch, dt)}
        )
        out.append(
            {
                "source": nid,
                "batch": at.batch,
                "landed_at": batch_time(at.batch),
                "cursor": _cursor(plan, nid, at),
                "batches": len(held),
                "chunks_done": None if at.chunking is None else len(at.chunking["done"]),
                "log_behind": runtime.state.log_behind(nid) if at.cdc else None,
            }
        )
    return out


def _cursor(plan: Any, nid: str, at: Any) -> Any:
    """A landing table's cursor; a change-log table's is the log position it holds every change
    before, as its log describes it."""
    if at.cdc:
        from ..plane.registry import change_log

        info = plan.project.sources[plan.nodes[nid].name].connector
        return change_log(info).position(at.cdc).describe()
    return None if at.cursor is None else at.cursor.value


def consumers(runtime: Runtime, source: str | None = None) -> list[dict[str, Any]]:
    """Every sink that reads tracked inputs (of `source` only, when given): what it and its
    route targets hold of each (None: never took it; a sink that cannot record it is left
    out)."""
    plan = runtime.plan
    out = []
    for nid, node in plan.nodes.items():
        if node.kind != "sink" or not node.sink.input:
            continue
        tracked = [t for t in node.sink.input.tracked if source in (None, t)]
        if not tracked:
            continue
        writer = runtime.sink_writer(node.name)
        routes = [w for t, w in writer.targets.items() if t != writer.dead_letter]
        for target in (writer.main, *routes):  # a dead-letter target holds only failed rows
            held = target.held(tracked)
            if held is None:
                continue
            for name in tracked:
                out.append(
                    {
                        "sink": nid,
                        "table": target.nid,
                        "input": name,
                        "place": held.get(name),
                        "of": batch_time(held.get(name)),
                    }
                )
    return out
