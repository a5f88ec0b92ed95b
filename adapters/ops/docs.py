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
