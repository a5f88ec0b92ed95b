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
        publish(rt, node)
        run_hooks(rt, "post_hook", node.config.get("post_hook", ()))
    return result


def publish(rt: Runtime, node: ManifestNode) -> None:
    """A node named in the profile's metastore as dbt-spark names it (lake/metastore.py): a
    stored node's table after each build, and when it is reused (a run killed before naming it
    left the name on the snapshot before); a view model as a view over its parents' names."""
    if node.placed is None or not rt.plan.profile.spark.hive:
        return
    from ..lake.metastore import name_table, name_view

    if node.stored:
        uri = rt.table_uri(node)
        why = name_table(rt.spark, node.placed, uri, rt.plan.store(uri))
    elif node.materialization.relation:
        parents = {}
        for pid in node.depends_on:
            parent = rt.plan.nodes[pid]
            named = parent.kind in ("model", "seed") and parent.materialization.relation
            parents[parent.relation or parent.name] = parent.placed if named else None
        owner = rt.table_uri(node)  # where its table would be: the node's place
        why = name_view(rt.spark, node.placed, rt.plan.sql(node.id), parents, owner)
    else:
        return
    if why:
        rt.on_warning(why)
