"""Compiled project -> {path under target/: text}: manifest, graph, compiled Spark SQL."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from ..analysis.inline import compiled_sql
from ..dag.graph import Node
from ..driver import CompiledProject
from ..version import VERSION
from .dbt_manifest import DBT_FILE, dbt_manifest
from .manifest import MANIFEST_FILE, Manifest, ManifestNode, SinkFacts


def compiled_path(node: Node, variant: str | None = None) -> str:
    python = node.config.get("language") == "python"
    suffix = f".{variant}.sql" if variant else ".py" if python else ".sql"
    name = node.config.get("alias") if node.kind == "test" else None  # a long one's, as dbt's
    name = str(name or node.name)
    if len(name) >= 64:
        name = f"{name[:30]}_{hashlib.md5(name.encode()).hexdigest()}"
    return f"compiled/{node.kind}/{name}{suffix}"


def artifacts(compiled: CompiledProject) -> dict[str, str]:
    """Every file compile writes under target/, as text."""
    files: dict[str, str] = {}
    graph = compiled.graph
    nodes: dict[str, ManifestNode] = {}
    for nid in graph.order():
        node = graph.nodes[nid]
        main: str | None = None
        variants: dict[str, str] = {}
        sql = compiled_sql(graph, node)
        if sql is not None:  # target/ describes the whole project, whatever the selection
            main = compiled_path(node)
            files[main] = sql
            for name in sorted(node.variants):
                text = compiled_sql(graph, node, name)
                if text is not None:
                    variants[name] = compiled_path(node, name)
                    files[variants[name]] = text
        facts = node.facts
        if isinstance(facts, SinkFacts) and node.sql_batches is not None:
            facts = replace(facts, compiled_batches_path=f"compiled/sink/{node.name}.batches.sql")
            files[facts.compiled_batches_path or ""] = node.sql_batches
        nodes[nid] = ManifestNode(
            id=nid,
            kind=node.kind,
            name=node.name,
            path=node.path.as_posix(),
            description=node.description,
            tags=tuple(node.tags),
            config=node.config,
            depends_on=tuple(graph.parents(nid)),
            checksum=node.checksum,
            columns=node.columns,
            compiled_path=main,
            compiled_variants=variants,
            facts=facts,
            line=node.line,
            lineage=None
            if node.lineage is None
            else {c: [(str(n), col, how) for n, col, how in o] for c, o in node.lineage.items()},
            filters=tuple(node.filters),
            uses=node.uses,
            placed=node.placed,
            versioned=node.versioned,
        )
        if node.kind == "sink":
            files[f"jobs/{node.name}.py"] = sink_job(compiled, node)
    manifest = Manifest(
        VERSION,
        compiled.project.name,
        compiled.project.spec.profile,
        {k: _jsonable(v) for k, v in compiled.params.items()},
        tuple(compiled.selected),
        nodes,
        hooks=compiled.hooks,
    )
    files[MANIFEST_FILE] = manifest.dumps()
    files[DBT_FILE] = dbt_manifest(manifest, files, _raw_code(compiled))
    files["graph.json"] = (
        json.dumps(
            {
                "nodes": [{"id": n, "kind": graph.nodes[n].kind} for n in graph.order()],
                "edges": [list(e) for e in graph.edges()],
            },
            indent=2,
        )
        + "\n"
    )
    return files


def _raw_code(compiled: CompiledProject) -> dict[str, str]:
    """Each model's and singular test's text as written, by node id."""
    project = compiled.project
    out: dict[str, str] = {}
    for nid, node in compiled.graph.nodes.items():
        found = (
            project.models.get(node.name) or project.python_models.get(node.name)
            if node.kind == "model"
            else project.tests.get(node.name)
            if node.kind == "test"
            else None
        )
        if found is not None:
            out[nid] = found.text
    return out


def sink_job(compiled: CompiledProject, node: Node) -> str:
    """`target/jobs/<sink>.py`: a standalone PySpark program that runs one sink, for spark-submit."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rivc.templates", "jobs"),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["repr"] = repr
    upstream = [
        compiled.graph.nodes[n]
        for n in compiled.graph.order(compiled.graph.with_upstream([node.id]))
    ]
    return env.get_template("sink_job.py.j2").render(
        sink=node.name,
        source=node.facts.from_ if isinstance(node.facts, SinkFacts) else "",
        connector=node.facts.connector if isinstance(node.facts, SinkFacts) else "",
        upstream=[n.id for n in upstream if n.id != node.id],
        version=VERSION,
    )


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)
