"""Model nodes: the class of each materialization builds or binds a model. The materialization
table (rivc.compiler.materializations) names the class; materializations.py and snapshot.py
hold them."""

from __future__ import annotations

import importlib

from rivc.compiler.emit.manifest import ManifestNode

from ..run.runtime import Runtime
from ..state import NodeResult
from .hooks import run_hooks
from .materializations import Materialization


def builder(node: ManifestNode) -> Materialization:
    """The class that builds `node`, as its materialization's entry names it."""
    mat = node.materialization
    strategy = node.incremental_strategy if mat.strategies else None
    module, _, name = mat.runtime_of(strategy).partition(":")
    made: Materialization = getattr(importlib.import_module(module), name)()
    return made


def run_model(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    """A model's or a seed's node, between its pre- and post-hooks (hooks.py)."""
    run_hooks(rt, "pre_hook", node.config.get("pre_hook", ()))
    result = builder(node).build(rt, nid, node)
    if result.status == "success":
        run_hooks(rt, "post_hook", node.config.get("post_hook", ()))
    return result
