"""Relations a selection reads but does not run: each node kind's `bind` makes its relation
available to the selected nodes (node_source.bind, node_model's materializations)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from ..ingest import node_source
from ..models.node_model import builder
from .runtime import Runtime

if TYPE_CHECKING:
    from rivc.compiler.emit.manifest import ManifestNode


def bind(rt: Runtime, nid: str) -> None:
    """Make an unselected upstream node's relation available without running it."""
    node = rt.plan.nodes[nid]
    if node.kind == "source":
        node_source.bind(rt, nid)
    elif node.kind in ("model", "seed"):
        builder(node).bind(rt, node)


def taken_by_batches(node: ManifestNode) -> tuple[str, ...]:
    """The sources a sink reads only as new batches (its own views of them): their whole
    tables' views wait until the sink asks for them (node_sink's whole input)."""
    given = node.sink.input if node.kind == "sink" else None
    return given.changing if given is not None and given.kind == "batches" else ()


def bind_views(rt: Runtime, nid: str, skip: Collection[str] = ()) -> None:
    """Bind the views `nid` reads, now that what they read has run: the sources this run landed
    (but those in `skip`), then the unselected views (which may read them)."""
    with rt.lock:
        needed = set(rt.plan.upstream(nid))
        for source in [s for s in rt.landed if s in needed and s not in skip]:
            rt.landed.pop(source)()
        for view in [v for v in rt.unbound if v in needed]:
            bind(rt, view)
            rt.unbound.remove(view)
