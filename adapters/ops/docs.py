"""`rivc docs generate`: a static site of the compiled project in one HTML file (no server, no
build step): every node with its SQL, columns and types, descriptions, tests, its place in the
DAG and each column's lineage, and a search. The data is embedded as JSON; docs_site.js draws
it in the browser."""

from __future__ import annotations

import html
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from rivc.compiler.analysis.inline import compiled_sql


def payload(compiled: Any) -> dict[str, Any]:
    """What the page shows, as JSON: one entry per node, in DAG order."""
    graph, project = compiled.graph, compiled.project
    described: dict[str, dict[str, str]] = {}  # model -> column -> description
    for name, (props, _) in project.properties.items():
        described[f"model:{name}"] = {c.name: c.description for c in props.columns}
    tested: dict[str, list[str]] = {}
    for nid in graph.order():
        node = graph.nodes[nid]
        if node.kind == "test":
            for parent in graph.parents(nid):
                tested.setdefault(parent, []).append(nid)
    nodes = []
    for nid in graph.order():
        node = graph.nodes[nid]
        columns = node.columns or {}
        notes = described.get(nid, {})
        nodes.append(
            {
                "id": nid,
                "kind": node.kind,
                "name": node.name,
                "path": node.path.as_posix(),
                "description": node.description,
                "tags": list(node.tags),
                "materialized": node.config.get("materialized", ""),
                "column": node.config.get("column"),  # a test's column
                "columns": [
                    {"name": c, "type": t, "description": notes.get(c, "")}
                    for c, t in columns.items()
                ],
                "sql": compiled_sql(graph, node) or "",
                "parents": graph.parents(nid),
                "children": graph.children(nid),
                "tests": tested.get(nid, []),
                "lineage": {
                    c: [list(o) for o in origins] for c, origins in (node.lineage or {}).items()
                },
            }
        )
    return {"project": project.name, "nodes": nodes}


def generate(compiled: Any, out: Path) -> Path:
    """Write the site into `out` (index.html); returns its path."""
    # "</" could end the script element early: JSON allows it escaped as "<\/"
    data = json.dumps(payload(compiled), separators=(",", ":")).replace("</", "<\\/")
    script = files("rivc.adapters.ops").joinpath("docs_site.js").read_text(encoding="utf-8")
    title = html.escape(compiled.project.name)
    page = (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{title} · rivc docs</title>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<style>{STYLE}</style></head><body>"
        '<header><b id=project></b><input id=search type=search placeholder="Search nodes '
        'and columns" autocomplete=off></header><main><nav id=list></nav>'
        "<article id=node><p>Pick a node on the left, or search.</p></article></main>"
        f'<script id=data type="application/json">{data}</script>'
        f"<script>{script}</script></body></html>\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


STYLE = """
body{margin:0;font:14px system-ui,sans-serif;color:#222}
header{display:flex;gap:1em;align-items:center;padding:.5em 1em;background:#1f3a5f;color:#fff}
header input{flex:1;max-width:40em;padding:.3em .5em;font-size:14px}
main{display:flex;height:calc(100vh - 2.6em)}
nav{width:22em;overflow:auto;border-right:1px solid #ddd}
nav a{display:block;padding:.2em 1em;color:#222;text-decoration:none;white-space:nowrap}
nav a:hover,nav a.on{background:#e8eef7}
nav small,article small{color:#777}
article{flex:1;overflow:auto;padding:0 1.5em 2em}
table{border-collapse:collapse}td,th{border-bottom:1px solid #eee;padding:.2em .8em;text-align:left}
pre{background:#f6f8fa;padding:1em;overflow:auto}
svg text{font:12px system-ui,sans-serif}svg a text{fill:#1f3a5f}
.lineage li{list-style:none}
"""


# Delta's names of Spark's types where Spark's own differ (dbt-spark's catalog shows Spark's)
_SPARK_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def catalog(compiled: Any, warehouse: str, store: Any) -> dict[str, Any]:
    """target/catalog.json in dbt's format (catalog v1), as `dbt docs generate` writes it:
    each model's, snapshot's and seed's relation with its columns and their types, read from
    its Delta table where it is built (delta-rs, no JVM), else as compile knows them (a view,
    a table not built yet: a type compile cannot tell is empty); each source table's declared
    columns."""

    from rivc.compiler.emit.dbt_manifest import dbt_metadata, unique_id
    from rivc.compiler.materializations import of_node

    from ..lake.deltatable import open_table
    from ..util.storage import join

    project = compiled.project.name
    nodes: dict[str, Any] = {}
    sources: dict[str, Any] = {}
    for nid in compiled.graph.order():
        node = compiled.graph.nodes[nid]
        columns = dict(node.columns or {})
        if node.kind == "source":
            source, _, table = node.name.partition(".")
            meta = {"type": "table", "schema": source, "name": table}
        elif node.kind in ("model", "seed") and node.placed is not None:
            stored = of_node(node.kind, node.config).stored
            if stored:
                found = open_table(join(warehouse, node.name), store.delta)
                if found is not None:
                    columns = {
                        f["name"]: _type_name(f["type"])
                        for f in json.loads(found.schema().to_json())["fields"]
                    }
            meta = {
                "type": "table" if stored else "view",
                "schema": node.placed.schema,
                "name": node.placed.alias,
                "database": node.placed.database,
            }
        else:
            continue
        uid = unique_id(project, node)
        entry = {
            "metadata": meta,
            "columns": {
                c: {"type": t, "index": i, "name": c} for i, (c, t) in enumerate(columns.items(), 1)
            },
            "stats": {
                "has_stats": {
                    "id": "has_stats",
                    "label": "Has Stats?",
                    "value": False,
                    "include": False,
                    "description": "Indicates whether there are statistics for this table",
                }
            },
            "unique_id": uid,
        }
        (sources if node.kind == "source" else nodes)[uid] = entry
    return {
        "metadata": dbt_metadata("catalog/v1"),
        "nodes": nodes,
        "sources": sources,
        "errors": None,
    }


def _type_name(kind: Any) -> str:
    """A Delta schema field's type (its JSON) as Spark names it: `bigint`, `array<string>`,
    `struct<a:int,b:string>`, `map<string,bigint>`."""
    if isinstance(kind, str):
        return _SPARK_NAMES.get(kind, kind)
    if kind["type"] == "array":
        return f"array<{_type_name(kind['elementType'])}>"
    if kind["type"] == "map":
        return f"map<{_type_name(kind['keyType'])},{_type_name(kind['valueType'])}>"
    fields = ",".join(f"{f['name']}:{_type_name(f['type'])}" for f in kind["fields"])
    return f"struct<{fields}>"
