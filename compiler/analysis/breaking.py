"""`rivc diff --state` and `rivc lint --state`: which column changes since an earlier compile
break what reads them. A column of a node that was removed, changed its type, or changed its
definition (the expression of the final SELECT) is breaking for each direct reader that uses
it: a model or test whose SQL names it, and a sink, which delivers every column of its
input. A model that selects * passes the change on: its own columns change, and that is
reported for its readers in turn. Added columns break nothing.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..dag.graph import Node, ProjectGraph
from ..dag.statediff import Earlier
from ..errors import RivcError, SourceLocation
from ..loading.specs import NodeId
from .inline import compiled_sql
from .rules import Finding, breaking_change

What = Literal["removed", "retyped", "redefined", "added"]


@dataclass(frozen=True)
class ColumnChange:
    node: NodeId
    column: str
    what: What
    before: str  # type or definition before ("" when unknown)
    after: str


@dataclass(frozen=True)
class Impact:
    change: ColumnChange
    reader: NodeId
    breaking: bool
    why: str
    where: SourceLocation  # the reader's line that uses it (its file's first line if unknown)


def column_changes(graph: ProjectGraph, earlier: Earlier) -> list[ColumnChange]:
    """Each column change of each node that was in the earlier compile, in graph order."""
    out: list[ColumnChange] = []
    for nid in graph.order():
        old = earlier.nodes.get(nid)
        node = graph.nodes[nid]
        if old is None or node.kind not in ("model", "seed", "source"):
            continue
        before: dict[str, str] = {k.lower(): v for k, v in (old.get("columns") or {}).items()}
        after = {k.lower(): v for k, v in (node.columns or {}).items()}
        if not before or not after:
            continue  # columns unknown on one side: nothing to compare
        defined_before = _definitions(_read(earlier.folder, old.get("compiled_path")))
        defined_after = _definitions(compiled_sql(graph, node))
        for col in before:
            if col not in after:
                out.append(ColumnChange(nid, col, "removed", before[col], ""))
            elif before[col] and after[col] and before[col] != after[col]:
                out.append(ColumnChange(nid, col, "retyped", before[col], after[col]))
            elif (
                col in defined_before
                and col in defined_after
                and defined_before[col] != defined_after[col]
            ):
                out.append(
                    ColumnChange(nid, col, "redefined", defined_before[col], defined_after[col])
                )
        out += [ColumnChange(nid, c, "added", "", after[c]) for c in after if c not in before]
    return out


def impacts(graph: ProjectGraph, changes: list[ColumnChange], root: Path) -> list[Impact]:
    """For each change, each direct reader of its node: whether the change breaks it."""
    out: list[Impact] = []
    for change in changes:
        node = graph.nodes[change.node]
        for rid in graph.children(change.node):
            reader = graph.nodes[rid]
            uses, why = _uses(graph, reader, node, change.column)
            breaking = uses and change.what != "added"
            out.append(Impact(change, rid, breaking, why, _where(reader, change.column, root)))
    return out


def findings(graph: ProjectGraph, earlier: Earlier, root: Path) -> list[Finding]:
    """`rivc lint --state`: a breaking change to a column a sink delivers, at the changed
    node's line (its file's first when the column is gone), naming the sink's line."""
    out = []
    for impact in impacts(graph, column_changes(graph, earlier), root):
        if not impact.breaking or graph.nodes[impact.reader].kind != "sink":
            continue
        change, node = impact.change, graph.nodes[impact.change.node]
        sink = graph.nodes[impact.reader]
        message = (
            f"column {change.column} of {node.kind} {node.name} {describe(change)}: sink "
            f"{sink.name} ({impact.where}) {impact.why}"
        )
        out.append(breaking_change(RivcError(message, _where(node, change.column, root))))
    return out


def describe(change: ColumnChange) -> str:
    if change.what == "removed":
        return "was removed"
    if change.what == "added":
        return f"was added ({change.after or 'type unknown'})"
    return f"was {change.what} ({change.before} -> {change.after})"


def _uses(graph: ProjectGraph, reader: Node, node: Node, column: str) -> tuple[bool, str]:
    if reader.kind == "sink":
        return True, f"delivers every column of {node.name}"
    sql = compiled_sql(graph, reader)
    if sql is None:
        return False, "reads no SQL"
    try:
        tree = _parsed(sql)  # a reader is asked about each change of each node it reads
    except SqlglotError:
        return True, "its SQL could not be read: counted as a use"
    relation = node.relation.lower()
    aliases = {
        (t.alias_or_name or "").lower(): t.name.lower()
        for t in tree.find_all(exp.Table)
        if t.name.lower() == relation
    }
    if not aliases:
        return False, f"does not read {node.name}"
    for col in tree.find_all(exp.Column):
        if col.name.lower() != column:
            continue
        qualifier = col.table.lower()
        if not qualifier or qualifier in aliases:
            return True, f"reads {node.name}.{column}"
    if any(e.is_star for select in tree.find_all(exp.Select) for e in select.expressions):
        # passed on: a model's own columns change (reported for its readers); a test's * is
        # the failing rows it shows
        if reader.kind == "test":
            return False, f"does not check {node.name}.{column} (its * shows failing rows)"
        return False, f"selects * from {node.name}: passes the change on to its own columns"
    return False, f"does not read {node.name}.{column}"


@functools.lru_cache(maxsize=256)
def _parsed(sql: str) -> exp.Expr:  # read only: the cached tree is shared
    return sqlglot.parse_one(sql, read="spark")


def _definitions(sql: str | None) -> dict[str, str]:
    """Each output column of a query's final SELECT: its expression as normalized SQL."""
    if sql is None:
        return {}
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except SqlglotError:
        return {}
    if not isinstance(tree, exp.Select):
        return {}
    out = {}
    for e in tree.expressions:
        name = e.alias_or_name.lower()
        body = e.this if isinstance(e, exp.Alias) else e
        if name and not isinstance(body, exp.Star):
            out[name] = body.sql(dialect="spark", normalize=True, comments=False)
    return out


def _read(folder: Path, path: object) -> str | None:
    if not isinstance(path, str):
        return None
    try:
        return (folder / path).read_text(encoding="utf-8")
    except OSError:
        return None


def _where(reader: Node, column: str, root: Path) -> SourceLocation:
    """The reader's line: a sink's YAML entry; else the first line of its file that names the
    column."""
    if reader.kind == "sink" or reader.line is not None:
        return SourceLocation(reader.path, reader.line)
    try:
        lines = (root / reader.path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return SourceLocation(reader.path)
    word = re.compile(rf"\b{re.escape(column)}\b", re.IGNORECASE)
    line = next((i for i, text in enumerate(lines, 1) if word.search(text)), None)
    return SourceLocation(reader.path, line)
