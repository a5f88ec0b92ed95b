"""Ephemeral models inlined as leading CTEs of the nodes that read them."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from ..dag.graph import Node, ProjectGraph
from ..loading.specs import NodeId
from ..materializations import of_node


def ephemeral_parents(graph: ProjectGraph, nid: NodeId) -> list[Node]:
    """Ephemeral models `nid` reads, directly or through other ephemerals, in dependency order."""
    found: set[NodeId] = set()
    stack = list(graph.parents(nid))
    while stack:
        parent = graph.nodes[stack.pop()]
        if (
            parent.kind == "model"
            and not of_node(parent.kind, parent.config).relation
            and parent.id not in found
        ):
            found.add(parent.id)
            stack += graph.parents(parent.id)
    return [graph.nodes[n] for n in graph.order(found)]


def compiled_sql(graph: ProjectGraph, node: Node, variant: str | None = None) -> str | None:
    """What target/compiled/ holds for a node (or its named `variant`): its SQL with ephemerals
    inlined; an ephemeral model's and a Python model's as they are. None when it has none."""
    sql = node.sql if variant is None else node.variants.get(variant)
    if sql is None:
        return None
    as_is = not of_node(node.kind, node.config).relation or node.config.get("language") == "python"
    return sql if as_is and node.kind == "model" else final_sql(graph, node, sql)


def final_sql(graph: ProjectGraph, node: Node, sql: str) -> str:
    """The node's SQL with ephemeral models inlined as leading CTEs."""
    ephemerals = ephemeral_parents(graph, node.id)
    if not ephemerals:
        return sql
    tree = sqlglot.parse_one(sql, read="spark")
    ctes = [
        exp.CTE(
            this=sqlglot.parse_one(e.sql or "", read="spark"),
            alias=exp.TableAlias(this=exp.to_identifier(e.name, quoted=True)),
        )
        for e in ephemerals
    ]
    existing = tree.args.get("with_")
    tree.set("with_", exp.With(expressions=ctes + (existing.expressions if existing else [])))
    return tree.sql(dialect="spark", pretty=True) + "\n"
