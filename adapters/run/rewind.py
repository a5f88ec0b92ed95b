"""`rivc state rewind`: move a sink's place in its inputs back, in its own tables, so that its
next run takes those batches again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from rivc.compiler.errors import SelectionError, StateError

from ..delivery.consume import WHOLE
from .runtime import Runtime
from .tables import batch_time


def place_before(to: str) -> int:
    """The place from which a consumer takes batch `to` and every later one: `start`, a batch
    id, or a time (ISO 8601, UTC unless it says otherwise; landed batch ids are times)."""
    if to == "start":
        return WHOLE
    if to.isdigit():
        return int(to) - 1
    try:
        when = datetime.fromisoformat(to)
    except ValueError:
        raise StateError(
            f"--to {to!r}: give a batch id (rivc state show), a time such as 2026-11-20T10:00, "
            "or start"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000) - 1


def rewind(runtime: Runtime, sink: str, to: str, inputs: Sequence[str]) -> list[str]:
    """Commit the new places in every destination of `sink` that keeps them; returns what it
    did, one line per destination and input."""
    plan = runtime.plan
    nid = sink if sink.startswith("sink:") else f"sink:{sink}"
    node = plan.nodes.get(nid)
    if node is None or node.kind != "sink":
        raise SelectionError(f"rewind takes a sink, got {sink!r}")
    tracked = list(node.sink.input.tracked if node.sink.input else ())
    for name in inputs:
        if name not in tracked:
            raise SelectionError(
                f"{nid} keeps no place in {name!r}; its inputs: {', '.join(tracked) or 'none'}"
            )
    chosen = list(inputs) or tracked
    if not chosen:
        raise StateError(f"{nid} reads no landed source or stored model: it takes its whole input")
    place = place_before(to)
    writer = runtime.sink_writer(node.name)
    lines = []
    for target in (writer.main, *writer.targets.values()):
        held = target.held(chosen)
        if held is None:
            lines.append(f"{target.nid}: keeps no place (it takes its whole input every run)")
            continue
        last = target.last_batch_id()
        target.places = dict.fromkeys(chosen, place)
        target.sink().record_places(0 if last is None else last + 1)
        for name in chosen:
            shown = "its first batch" if place == WHOLE else f"batch {place + 1}"
            when = batch_time(place + 1) if place != WHOLE else None
            was = held.get(name)
            lines.append(
                f"{target.nid}: {name} from {shown}{f' ({when})' if when else ''} on "
                f"(it held {'nothing' if was is None else was})"
            )
    return lines
