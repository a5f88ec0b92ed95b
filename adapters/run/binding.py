"""Relations a selection reads but does not run: each node kind's `bind` makes its relation
available to the selected nodes (node_source.bind, node_model's materializations)."""

from __future__ import annotations

from ..ingest import node_source
from ..models.node_model import builder
from .runtime import Runtime


def bind(rt: Runtime, nid: str) -> None:
    """Make an unselected upstream node's relation available without running it."""
    node = rt.plan.nodes[nid]
    if node.kind == "source":
        node_source.bind(rt, nid)
    elif node.kind in ("model", "seed"):
        builder(node).bind(rt, node)


def bind_views(rt: Runtime, nid: str) -> None:
    """Bind the unselected views `nid` reads, now that what they read has run."""
    with rt.lock:
        needed = set(rt.plan.upstream(nid))
        for view in [v for v in rt.unbound if v in needed]:
            bind(rt, view)
            rt.unbound.remove(view)
