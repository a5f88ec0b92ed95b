"""The project DAG: nodes are source tables, models, sinks and tests."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..emit.manifest import Facts, Placed
from ..errors import GraphError, SourceLocation
from ..loading.specs import NodeId

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
    # named variants of its SQL beside `sql` (compiler/materializations.py: INCREMENTAL)
    variants: dict[str, str] = field(default_factory=dict)
    columns: dict[str, str] | None = None  # name -> type ("" when not known)
    checksum: str = ""
    sql_batches: str | None = None  # sinks of new batches: the SQL of one batch
    facts: Facts = None  # sources and sinks: what only their kind has (emit/manifest.py)
    line: int | None = None  # sources, sinks, generic tests: the line of their YAML entry
    # models: each output column's origins (node id, column, copied|transformed|aggregated),
    # and the columns that filter, join or group its rows (compiler/analysis/lineage.py)
    lineage: dict[str, list[tuple[NodeId, str, str]]] | None = None
    filters: list[tuple[NodeId, str]] = field(default_factory=list)
    uses: dict[str, str] = field(
        default_factory=dict
    )  # models: vars and macros (rendering/render.py)
    versioned: str | None = None  # a version of a dbt versioned model: that model's name
    placed: Placed | None = None  # models, seeds, data tests: dbt's name (dbt/naming.py)

    @property
    def relation(self) -> str:
        """The relation a node's SQL names: a source's view, a model's name."""
        return self.facts.relation if self.facts is not None else self.name


class ProjectGraph:
    """A stable view of the DAG: deterministic order, ancestors and descendants with depth."""

    def __init__(self, nodes: Mapping[NodeId, Node]) -> None:
        self.nodes = dict(nodes)
        self._parents: dict[NodeId, set[NodeId]] = {n: set() for n in self.nodes}
        self._children: dict[NodeId, set[NodeId]] = {n: set() for n in self.nodes}
        for node in self.nodes.values():
            for dep in node.depends_on:
                self._parents.setdefault(dep, set())
                self._children.setdefault(dep, set()).add(node.id)
                self._parents[node.id].add(dep)
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        if len(self.order()) == len(self._parents):
            return
        path = self._cycle()
        first = self.nodes.get(path[0])
        raise GraphError(
            f"dependency cycle: {' -> '.join(path)}",
            SourceLocation(first.path) if first is not None else None,
        )

    def _cycle(self) -> list[NodeId]:
        """One cycle, as a path that ends where it starts (the graph has one)."""
        done: set[NodeId] = set()
        for start in sorted(self._parents):
            if start in done:
                continue
            path: list[NodeId] = [start]
            on_path = {start}
            todo = [iter(sorted(self._children[start]))]
            while todo:
                child = next(todo[-1], None)
                if child is None:
                    finished = path.pop()
                    done.add(finished)
                    on_path.discard(finished)
                    todo.pop()
                    continue
                if child in on_path:
                    return [*path[path.index(child) :], child]
                if child not in done:
                    path.append(child)
                    on_path.add(child)
                    todo.append(iter(sorted(self._children[child])))
        raise AssertionError("no cycle")  # pragma: no cover

    def order(self, subset: Iterable[NodeId] | None = None) -> list[NodeId]:
        """Topological order, ties broken by node id, so output never changes between runs."""
        chosen = set(self._parents) if subset is None else set(subset)
        waiting = {n: len(self._parents[n] & chosen) for n in chosen}
        ready = [n for n, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            nid = heapq.heappop(ready)
            out.append(nid)
            for child in self._children[nid]:
                if child in waiting:
                    waiting[child] -= 1
                    if waiting[child] == 0:
                        heapq.heappush(ready, child)
        return out

    def upstream(self, nid: NodeId, depth: int | None = None) -> set[NodeId]:
        return self._walk(nid, depth, self._parents)

    def downstream(self, nid: NodeId, depth: int | None = None) -> set[NodeId]:
        return self._walk(nid, depth, self._children)

    @staticmethod
    def _walk(nid: NodeId, depth: int | None, edges: Mapping[NodeId, set[NodeId]]) -> set[NodeId]:
        """What `nid` reaches along `edges`, at most `depth` steps away."""
        seen: set[NodeId] = set()
        level = [nid]
        steps = 0
        while level and (depth is None or steps < depth):
            steps += 1
            level = [n for at in level for n in edges[at] if n not in seen and n != nid]
            seen.update(level)
        return seen

    def with_upstream(self, nids: Iterable[NodeId]) -> set[NodeId]:
        """`nids` and everything they depend on, in one traversal."""
        seen = set(nids)
        stack = list(seen)
        while stack:
            for parent in self._parents[stack.pop()]:
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return seen

    def parents(self, nid: NodeId) -> list[NodeId]:
        return sorted(self._parents[nid])

    def children(self, nid: NodeId) -> list[NodeId]:
        return sorted(self._children[nid])

    def edges(self) -> list[tuple[NodeId, NodeId]]:
        return sorted((p, c) for c, ps in self._parents.items() for p in ps)
