"""`state:` selectors: what changed since an earlier compile (`--state DIR`: a target/ folder,
its rivc_manifest.json and compiled SQL), as dbt's state comparison. A change is one that changes
what a node does: its compiled SQL (after Jinja, macros, vars and params; whitespace, comments
and keyword case do not count), its config or connector spec, or its columns and their types;
and, as dbt's `modified.macros` and `modified.vars`, a macro it calls or a var it reads whose
text or value changed, even where its SQL came out the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import TokenType
from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError

from ..analysis.inline import compiled_sql
from ..emit.manifest import MANIFEST_FILE, compiled_variants
from ..errors import SelectionError
from ..loading.specs import NodeId
from .graph import Node, ProjectGraph

# state:modified.<change>; `sources` and `sinks`: source tables and sinks with any change
CHANGES = ("body", "configs", "contract", "macros", "vars", "sources", "sinks")
_KEPT_CASE = {TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING}


@dataclass(frozen=True)
class Earlier:
    """An earlier compile: its folder and its manifest's nodes (as JSON)."""

    folder: Path
    nodes: Mapping[str, dict[str, Any]]

    @property
    def records_uses(self) -> bool:
        """Whether its nodes record the vars and macros they read: against a manifest of an
        older rivc, which does not, every var and macro would look changed."""
        return any("uses" in node for node in self.nodes.values())


def load(folder: Path) -> Earlier:
    try:
        data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SelectionError(
            f"--state {folder}: no {MANIFEST_FILE} there (give the target/ folder of an earlier "
            "rivc compile or run)"
        ) from None
    except (OSError, ValueError) as exc:
        raise SelectionError(f"--state {folder}: {MANIFEST_FILE} cannot be read: {exc}") from None
    return Earlier(folder, data.get("nodes", {}))


def changes(graph: ProjectGraph, earlier: Earlier) -> dict[NodeId, set[str]]:
    """Each node that is new ({"new"}) or changed (the CHANGES it has); unchanged ones are
    left out."""
    out: dict[NodeId, set[str]] = {}
    recorded = earlier.records_uses
    for nid, node in graph.nodes.items():
        old = earlier.nodes.get(nid)
        if old is None:
            out[nid] = {"new"}
            continue
        found = set()
        if _body(graph, node, earlier, old):
            found.add("body")
        if _canonical(node.config) != _canonical(old.get("config", {})) or (
            node.facts is not None and _facts_changed(node, old)
        ):
            found.add("configs")
        if (node.columns or {}) != (old.get("columns") or {}):
            found.add("contract")
        before = old.get("uses") or {}
        for kind in ("macro", "var"):
            if recorded and _uses(node.uses, kind) != _uses(before, kind):
                found.add(f"{kind}s")
        if found and node.kind in ("source", "sink"):
            found.add(f"{node.kind}s")
        if found:
            out[nid] = found
    return out


def _uses(uses: Mapping[str, str], kind: str) -> dict[str, str]:
    """The vars or macros a node read, each with the hash of its value or text."""
    return {k: v for k, v in uses.items() if k.startswith(f"{kind}:")}


def _body(graph: ProjectGraph, node: Node, earlier: Earlier, old: dict[str, Any]) -> bool:
    if node.kind == "seed" or (node.sql is None and old.get("compiled_path") is None):
        return node.checksum != str(old.get("checksum", ""))  # a seed: its file
    texts = (
        (compiled_sql(graph, node), old.get("compiled_path")),
        *(
            (compiled_sql(graph, node, name), compiled_variants(old).get(name))
            for name in sorted(set(node.variants) | set(compiled_variants(old)))
        ),
        (node.sql_batches, old.get("compiled_batches_path")),  # a sink's SQL of one batch
    )
    for now, path in texts:
        before = _read(earlier.folder, path)
        if now != before and (now is None or before is None or _tokens(now) != _tokens(before)):
            return True
    return False


def _read(folder: Path, path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return (folder / path).read_text(encoding="utf-8")
    except OSError:
        return None  # an earlier target/ without it: counted as changed


def _tokens(sql: str) -> list[tuple[TokenType, str]] | str:
    """SQL as its tokens: no whitespace or comments, keywords and names in one case (Spark's
    names are case-insensitive); text that is not SQL (a Python model) with its whitespace
    collapsed."""
    try:
        tokens = Spark().tokenize(sql)
    except TokenError:
        return " ".join(sql.split())
    return [
        (t.token_type, t.text if t.token_type in _KEPT_CASE else t.text.lower()) for t in tokens
    ]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _facts_changed(node: Node, old: dict[str, Any]) -> bool:
    """A source's or sink's own spec (connector, config, transforms, ...) differs."""
    assert node.facts is not None
    facts = json.loads(_canonical(node.facts.to_json()))
    return any(_canonical(value) != _canonical(old.get(key)) for key, value in facts.items())
