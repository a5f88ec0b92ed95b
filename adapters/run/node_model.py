"""Model nodes: the class of each materialization builds or binds a model (materializations.py,
snapshot.py)."""

from __future__ import annotations

from rivc.compiler.manifest import ManifestNode

from ..state import NodeResult
from .hooks import run_hooks
from .materializations import Append, Ephemeral, Merge, Seed, Table, View
from .runtime import Runtime
from .snapshot import Snapshot

Materialization = Ephemeral | View | Table


def materialization(node: ManifestNode) -> Materialization:
    """The class that builds `node`, by its materialization (and incremental strategy)."""
    mat = node.materialized
    if mat == "seed":
        return Seed()
    if mat == "snapshot":
        return Snapshot()
    if mat == "ephemeral":
        return Ephemeral()
    if mat == "view":
        return View()
    if mat == "table":
        return Table()
    return Merge() if node.incremental_strategy == "merge" else Append()


def run_model(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    """A model's or a seed's node, between its pre- and post-hooks (hooks.py)."""
    run_hooks(rt, "pre_hook", node.config.get("pre_hook", ()))
    result = materialization(node).build(rt, nid, node)
    if result.status == "success":
        run_hooks(rt, "post_hook", node.config.get("post_hook", ()))
    return result
