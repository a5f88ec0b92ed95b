"""What each sink consumes (docs/running.md, "What each node reads").

A sink's input is one of:
- `batches`: the new batches of landed incremental sources, passed through row-wise views; its
  batch SQL reads them under per-sink names (increments.new_batches_relation);
- `whole`: the whole relation, delivered when one of its `tracked` inputs (landed sources,
  stored models) has a newer version than the sink holds, or on every run when it reads an
  `untracked` one (datagen, files, delta and iceberg sources);
- `stream`: a Spark stream, whose checkpoint keeps the sink's place.
"""

from __future__ import annotations

from dataclasses import replace

from ..analysis.increments import batch_sql, changes, new_batches_relation
from ..analysis.inline import final_sql
from ..analysis.rules import Finding
from ..connector import sink_mode
from ..dag.graph import Node, ProjectGraph
from ..emit.manifest import SinkFacts, SinkInput
from ..loading.project import Project
from ..loading.specs import NodeId
from ..materializations import of_node
from ..rendering.render import source_relation
from .common import spec_finding


def source_role(project: Project, node: Node) -> str:
    """`log` (a landed incremental table: it grows by batches), `snapshot` (a landed table of
    another mode: each batch is the whole table), `stream`, or `untracked` (read whole)."""
    table = project.sources[node.name]
    if table.connector.log:  # every change, batch after batch
        return "log"
    if table.connector.relational:
        return "log" if table.table.mode == "incremental" else "snapshot"
    if table.connector.category == "stream" or getattr(table.config, "stream", None) is True:
        return "stream"
    return "untracked"


def sink_inputs(project: Project, graph: ProjectGraph, findings: list[Finding]) -> None:
    """Set every sink's `input` in its facts (and, for new batches, its `sql_batches`).
    A stream whose place is held on the broker (an MQTT session, a NATS durable consumer)
    feeds one sink: two would share that place, and each take or acknowledge the other's rows."""
    held: dict[str, str] = {}
    for node in sorted(graph.nodes.values(), key=lambda n: n.id):
        if node.kind != "sink" or not node.depends_on:
            continue
        assert isinstance(node.facts, SinkFacts)
        given, node.sql_batches = _sink_input(project, graph, node, findings)
        node.facts = replace(node.facts, input=given)
        for nid in sorted(graph.upstream(node.id)):
            up = graph.nodes[nid]
            if up.kind != "source" or not project.sources[up.name].connector.single_consumer:
                continue
            first = held.setdefault(up.name, node.name)
            if first != node.name:
                findings.append(
                    spec_finding(
                        f"sink {node.name!r} reads stream source {up.name!r}, which sink "
                        f"{first!r} reads too: the broker holds one place for it (an MQTT session, "
                        "a NATS durable consumer); deliver it with one sink (to a Delta table, "
                        "say) and read that table, or declare a second table of the stream",
                        project.sinks[node.name].where,
                        "from",
                    )
                )


def _sink_input(
    project: Project, graph: ProjectGraph, sink: Node, findings: list[Finding]
) -> tuple[SinkInput, str | None]:
    """What `sink` consumes, and the SQL of one batch when it consumes new batches."""
    start = sink.depends_on[0]
    views: list[NodeId] = []
    leaves: dict[NodeId, str] = {}
    stack, seen = [start], {start}
    while stack:
        nid = stack.pop()
        node = graph.nodes[nid]
        if node.kind == "source":
            leaves[nid] = source_role(project, node)
            continue
        mat = of_node(node.kind, node.config)
        if mat.stored:  # its versions are committed: the sink takes each new one whole
            leaves[nid] = "model"
            continue
        if mat.relation:  # a view: new batches may pass through it
            views.append(nid)
        for parent in graph.parents(nid):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    changing = tuple(sorted(n for n, r in leaves.items() if r == "log"))
    info = SinkInput(
        kind="whole",
        changing=changing,
        tracked=tuple(sorted(n for n, r in leaves.items() if r in ("log", "snapshot", "model"))),
        untracked=any(r == "untracked" for r in leaves.values()),
    )
    if any(r == "stream" for r in leaves.values()):
        return replace(info, kind="stream"), None
    passing = {source_relation(*graph.nodes[n].name.split(".", 1)) for n in changing}
    sources = set(passing)
    broken: dict[str, tuple[str, str]] = {}  # view -> (the view that stopped batches, why)
    for nid in graph.order(views):
        view = graph.nodes[nid]
        sql = final_sql(graph, view, view.sql or "")
        reads_broken = [b for b in broken if changes(sql, {b})[0]]
        moving, why = changes(sql, passing)
        if reads_broken:
            broken[view.name] = broken[reads_broken[0]]
        elif moving and why is not None:
            broken[view.name] = (view.name, why)
        elif moving:
            passing.add(view.name)
    relation = sink.relation
    if relation in passing:
        chain = [
            (graph.nodes[n].name, final_sql(graph, graph.nodes[n], graph.nodes[n].sql or ""))
            for n in graph.order(views)
            if graph.nodes[n].name in passing
        ]
        renamed = {s: new_batches_relation(sink.name, s) for s in sources}
        return replace(info, kind="batches"), batch_sql(relation, chain, renamed)
    if relation in broken:
        stopper, why = broken[relation]
        info = replace(info, through=stopper, why=why)
        spec = project.sinks[sink.name]
        if sink_mode(spec.config) == "append":
            findings.append(
                spec_finding(
                    f"sink {sink.name!r} appends what view {stopper!r} reads from incremental "
                    f"sources, but new batches cannot pass through it ({why}): every run "
                    "would append its whole result again; use mode overwrite, or merge by "
                    "a key",
                    spec.where,
                    "from",
                )
            )
    return info, None
