"""Sinks: what they read, the columns their config names, the types they can hold, their route targets."""

from __future__ import annotations

from ..analysis import rules
from ..analysis.rules import Finding
from ..analysis.workers import ModelResult
from ..connector import SinkConfig, history_of, merge_keys_of
from ..dag.graph import Node, node_id, ref_id
from ..emit.manifest import SinkFacts
from ..errors import (
    GraphError,
    SourceLocation,
    SqlError,
    did_you_mean,
)
from ..loading.project import Located, Project, SinkDef
from ..loading.specs import NodeId
from ..materializations import of_node
from ..rendering import transforms as tf
from ..sql import quote
from .common import content_hash, spec_finding, suggest, transformed


def sink_node(
    sink: SinkDef, project: Project, nodes: dict[NodeId, Node], findings: list[Finding]
) -> Node:
    spec = sink.spec
    path = sink.where.doc.path
    src = spec.from_ or ""
    if src.startswith("source:"):
        upstream = node_id("source", src.removeprefix("source:"))
    else:
        upstream = ref_id(src, project.seeds)
    deps: list[NodeId] = []
    columns: dict[str, str] | None = None
    if upstream not in nodes:
        names = [n.removeprefix("model:") for n in nodes if n.startswith("model:")] + [
            f"source:{n.removeprefix('source:')}" for n in nodes if n.startswith("source:")
        ]
        findings.append(
            rules.unknown_reference(
                GraphError(
                    f"sink {spec.name!r}: from {src!r} names no model or source table"
                    f"{did_you_mean(src, names)}",
                    sink.where.location("from"),
                )
            )
        )
    else:
        deps = [upstream]
        columns = nodes[upstream].columns
        if (
            nodes[upstream].kind == "model"
            and not of_node(nodes[upstream].kind, nodes[upstream].config).relation
        ):
            findings.append(
                rules.unknown_reference(
                    GraphError(
                        f"sink {spec.name!r} reads ephemeral model {src!r}: ephemeral models have no "
                        "relation; materialize it as view, table or incremental",
                        sink.where.location("from"),
                    )
                )
            )
    keys, history = merge_keys_of(sink.config), history_of(sink.config)
    if history is not None and not any(t.type == "unwrap_cdc" for t in spec.transforms):
        findings.append(
            spec_finding(
                "mode scd2 keeps every version of unwrap_cdc's changes: add the transform "
                "{type: unwrap_cdc, deletes: apply, sequence_by: ...}",
                sink.where,
                "config",
                "mode",
            )
        )
        columns = None  # its keys and columns are those of the images it lacks
    columns = transformed(spec.transforms, columns, sink.where, findings, "sink", keys, history)
    if columns is not None:
        check_expectations(spec.quality, columns, sink.where, findings)
        fmt = sink.config.file_format() if isinstance(sink.config, SinkConfig) else None
        for col, kind in columns.items():
            why = sink.connector.unwritable(fmt, kind) if kind else None
            if why is not None:
                findings.append(
                    spec_finding(
                        f"sink {spec.name!r} cannot hold column {col!r} of {src!r}, of type "
                        f"{kind.lower()}: {why}",
                        sink.where,
                        "from",
                    )
                )
        for key, cols in sink.connector.key_columns(sink.config).items():
            for col in cols:
                if col not in columns:
                    findings.append(
                        rules.key_column(
                            SqlError(
                                f"{key} {col!r} is not a column of {src!r}{suggest(col, list(columns))}",
                                sink.where.location("config", key),
                            )
                        )
                    )
    relation = nodes[upstream].relation if deps else ""
    facts = SinkFacts(
        connector=spec.connector,
        from_=src,
        relation=relation,
        config=sink.config.model_dump(mode="json"),  # its secret fields masked (loading/secrets.py)
        trigger=spec.trigger
        if isinstance(spec.trigger, str)
        else spec.trigger.model_dump(mode="json"),
        targets=dict(spec.targets),
    )
    sql = f"SELECT * FROM {quote(relation)}\n" if relation else None
    cfg = {"connector": spec.connector}
    mode = getattr(sink.config, "mode", None)  # every sink that has one: selectable
    if isinstance(mode, str):
        cfg["mode"] = mode
    return Node(
        id=node_id("sink", spec.name),
        kind="sink",
        name=spec.name,
        path=path,
        depends_on=deps,
        tags=spec.tags,
        config=cfg,
        description=spec.description,
        sql=sql,
        columns=columns,
        checksum=content_hash(spec.model_dump(mode="json", by_alias=True)),
        facts=facts,
        line=sink.where.location().line,
    )


def check_expectations(
    quality: tuple[tf.Expectation, ...],
    columns: dict[str, str],
    where: Located,
    findings: list[Finding],
) -> None:
    for i, e in enumerate(quality):
        names = set(e.targets)
        if e.expression:
            names |= tf.referenced_columns(e.expression)
        for col in sorted(names - set(columns)):
            findings.append(
                spec_finding(
                    f"quality {e.check}: column {col!r} is not in the sink's input"
                    f"{suggest(col, list(columns))}",
                    where,
                    "quality",
                    i,
                )
            )


def check_targets(project: Project, findings: list[Finding]) -> None:
    """Route and dead-letter targets: existing sinks without `from`, each written by one sink."""
    writers: dict[str, str] = {}
    for name, sink in sorted(project.sinks.items()):
        for target, why in sink.spec.targets.items():
            key = "dead_letter" if why == "dead_letter" else "transforms"
            other = project.sinks.get(target)
            if other is None:
                findings.append(
                    spec_finding(
                        f"sink {name!r}: {why} target {target!r} is not a sink"
                        f"{did_you_mean(target, list(project.sinks))}",
                        sink.where,
                        key,
                    )
                )
            elif other.spec.from_ is not None or target == name:
                findings.append(
                    spec_finding(
                        f"sink {name!r}: {why} target {target!r} has its own from:; a target sink "
                        "takes its rows from the sink that names it, so leave from: out",
                        sink.where,
                        key,
                    )
                )
            elif target in writers:
                findings.append(
                    spec_finding(
                        f"sink {target!r} is already the target of sink {writers[target]!r}; "
                        "a target takes one writer (batch ids would collide)",
                        sink.where,
                        key,
                    )
                )
            writers.setdefault(target, name)
    for name, sink in sorted(project.sinks.items()):
        if sink.spec.from_ is None and name not in writers:
            findings.append(
                spec_finding(
                    f"sink {name!r} has no from: and no sink routes or dead-letters to it",
                    sink.where,
                    "name",
                )
            )


def star_feeding_sinks(
    project: Project,
    models: dict[str, ModelResult],
    nodes: dict[NodeId, Node],
    findings: list[Finding],
) -> None:
    for sink in project.sinks.values():
        res = models.get(sink.spec.from_ or "")
        if res is not None and res.star is not None:
            findings.append(
                rules.star_into_sink(
                    SqlError(
                        f"SELECT * in model {res.name!r}, which feeds sink {sink.spec.name!r}: an upstream "
                        "column change silently changes the sink's schema; list the columns",
                        SourceLocation(project.models[res.name].path, *res.star),
                    )
                )
            )
