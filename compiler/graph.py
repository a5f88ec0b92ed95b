"""The project DAG over networkx: nodes are source tables, models, sinks and tests."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from .errors import GraphError, SourceLocation
from .manifest import Facts
from .specs import NodeId

Kind = Literal["source", "seed", "model", "sink", "test"]


def node_id(kind: Kind, name: str) -> NodeId:
    return NodeId(f"{kind}:{name}")


def ref_id(name: str, seeds: Collection[str]) -> NodeId:
    """The node `ref(name)` names: a seed's or a model's (compile refuses one name for both)."""
    return node_id("seed" if name in seeds else "model", name)


@dataclass(kw_only=True)
class Node:
    """One node of the project as compile knows it; `config` is JSON-ready."""

    id: NodeId
    kind: Kind
    name: str
    path: Path
    depends_on: list[NodeId] = field(default_factory=list)
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    sql: str | None = None  # compiled Spark SQL (models, tests, sink inputs)
    sql_incremental: str | None = None  # incremental models: the is_incremental() variant
    columns: dict[str, str] | None = None  # name -> type ("" when not known)
    checksum: str = ""
    sql_batches: str | None = None  # sinks of new batches: the SQL of one batch
    facts: Facts = None  # sources and sinks: what only their kind has (manifest.py)
    line: int | None = None  # sources, sinks, generic tests: the line of their YAML entry
    # models: each output column's origins (node id, column, copied|transformed|aggregated),
    # and the columns that filter, join or group its rows (compiler/lineage.py)
    lineage: dict[str, list[tuple[NodeId, str, str]]] | None = None
    filters: list[tuple[NodeId, str]] = field(default_factory=list)

    @property
    def relation(self) -> str:
        """The relation a node's SQL names: a source's view, a model's name."""
        return self.facts.relation if self.facts is not None else self.name


class ProjectGraph:
    """A stable view of the DAG: deterministic order, ancestors and descendants with depth."""

    def __init__(self, nodes: Mapping[NodeId, Node]) -> None:
        self.nodes = dict(nodes)
        self._g: nx.DiGraph = nx.DiGraph()
        self._g.add_nodes_from(sorted(self.nodes))
        for node in self.nodes.values():
            for dep in node.depends_on:
                self._g.add_edge(dep, node.id)
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        if nx.is_directed_acyclic_graph(self._g):
            return
        try:
            cycle = nx.find_cycle(self._g)
        except nx.NetworkXNoCycle:
            return
        path = [u for u, _ in cycle] + [cycle[0][0]]
        first = self.nodes[path[0]]
        raise GraphError(f"dependency cycle: {' -> '.join(path)}", SourceLocation(first.path))

    def order(self, subset: Iterable[NodeId] | None = None) -> list[NodeId]:
        """Topological order, ties broken by node id, so output never changes between runs."""
        g = self._g if subset is None else self._g.subgraph(subset)
        return list(nx.lexicographical_topological_sort(g))

    def upstream(self, nid: NodeId, depth: int | None = None) -> set[NodeId]:
        return self._walk(nid, depth, reverse=True)

    def downstream(self, nid: NodeId, depth: int | None = None) -> set[NodeId]:
        return self._walk(nid, depth, reverse=False)

    def _walk(self, nid: NodeId, depth: int | None, reverse: bool) -> set[NodeId]:
        if depth is None:
            return set(nx.ancestors(self._g, nid) if reverse else nx.descendants(self._g, nid))
        g = self._g.reverse(copy=False) if reverse else self._g
        lengths = nx.single_source_shortest_path_length(g, nid, cutoff=depth)
        return {n for n in lengths if n != nid}

    def with_upstream(self, nids: Iterable[NodeId]) -> set[NodeId]:
        """`nids` and everything they depend on, in one traversal."""
        seen = set(nids)
        stack = list(seen)
        while stack:
            for parent in self._g.predecessors(stack.pop()):
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return seen

    def parents(self, nid: NodeId) -> list[NodeId]:
        return sorted(self._g.predecessors(nid))

    def children(self, nid: NodeId) -> list[NodeId]:
        return sorted(self._g.successors(nid))

    def edges(self) -> list[tuple[NodeId, NodeId]]:
        return sorted(self._g.edges())
