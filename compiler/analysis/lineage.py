"""Column lineage of one model, from its qualified sqlglot tree: for each output column, the
columns of the relations it reads that it comes from, and how (copied, transformed,
aggregated); and the columns its rows are filtered, joined or grouped on. Followed through
CTEs, subqueries and unions to the relations the model reads (refs and sources)."""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

HOW = ("copied", "transformed", "aggregated")  # each worse than the one before
Origin = tuple[str, str, str]  # (relation, column, how)
MAX_DEPTH = 50


def column_lineage(root: Scope) -> tuple[dict[str, list[Origin]], list[tuple[str, str]]]:
    """(output column -> its origins, sorted; the relation columns that filter rows)."""
    query: Any = root.expression
    names = [sel.alias_or_name for sel in query.selects]
    found: dict[str, dict[tuple[str, str], str]] = {name: {} for name in names}
    for scope in _selects(root):  # a union's branches give its columns by position
        branch: Any = scope.expression
        for name, sel in zip(names, branch.selects, strict=False):
            _follow(sel, scope, "copied", found[name], 0)
    lineage = {n: sorted((r, c, how) for (r, c), how in found[n].items()) for n in names}
    filters: dict[tuple[str, str], str] = {}
    for scope in root.traverse():
        select = scope.expression
        if not isinstance(select, exp.Select):
            continue
        clauses = [select.args.get(k) for k in ("where", "group", "having", "qualify")]
        clauses += [j.args.get("on") for j in select.args.get("joins") or ()]
        for clause in clauses:
            if clause is not None:
                for col in clause.find_all(exp.Column):
                    _column(col, scope, "copied", filters, 0)
    return lineage, sorted(filters)


def _selects(scope: Scope) -> list[Scope]:
    """The SELECT scopes a scope's rows come from: itself, or a set operation's branches."""
    if scope.set_operation_scopes:
        return [s for branch in scope.set_operation_scopes for s in _selects(branch)]
    return [scope] if isinstance(scope.expression, exp.Select) else []


def _worse(a: str, b: str) -> str:
    return a if HOW.index(a) >= HOW.index(b) else b


def _follow(
    sel: exp.Expression, scope: Scope, how: str, found: dict[tuple[str, str], str], depth: int
) -> None:
    inner = sel.this if isinstance(sel, exp.Alias) else sel
    if isinstance(inner, exp.Column):
        _column(inner, scope, how, found, depth)
        return
    for col in inner.find_all(exp.Column):
        aggregated = any(isinstance(a, exp.AggFunc) for a in _ancestors(col, inner))
        _column(
            col, scope, _worse(how, "aggregated" if aggregated else "transformed"), found, depth
        )


def _ancestors(node: Any, top: Any) -> list[Any]:
    out = []
    parent = node.parent
    while parent is not None and parent is not top:
        out.append(parent)
        parent = parent.parent
    return [*out, top]


def _column(
    col: exp.Column, scope: Scope, how: str, found: dict[tuple[str, str], str], depth: int
) -> None:
    if depth > MAX_DEPTH:
        return
    source = scope.sources.get(col.table)
    if isinstance(source, exp.Table):
        key = (source.name, col.name)
        found[key] = _worse(found.get(key, how), how)
        return
    if not isinstance(source, Scope):
        return  # a table function's, a lateral view's: not followed
    branches = _selects(source)
    if not branches:
        return
    first: Any = branches[0].expression
    names = [sel.alias_or_name for sel in first.selects]
    if col.name not in names:
        return
    at = names.index(col.name)
    for inside in branches:  # a union's branches give its columns by position
        projections = inside.expression.selects  # type: ignore[attr-defined]
        if at < len(projections):
            _follow(projections[at], inside, how, found, depth + 1)


Step = tuple[int, str, str, str]  # (depth, node id, column, how it comes from the step before)


def upstream(graph: Any, nid: str, column: str) -> list[Step]:
    """Where a model's column comes from, step by step down to sources and seeds."""
    out: list[Step] = []

    def walk(at: str, col: str, depth: int) -> None:
        node = graph.nodes[at]
        for origin, name, how in (node.lineage or {}).get(col, ()):
            out.append((depth, origin, name, how))
            if depth < MAX_DEPTH:
                walk(origin, name, depth + 1)

    walk(nid, column, 1)
    return out


def downstream(graph: Any, nid: str, column: str) -> list[Step]:
    """What a column reaches: model columns made from it, and the tests and sinks that read
    the nodes that hold it (a sink delivers every column)."""
    made: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for other in graph.nodes.values():
        for col, origins in (other.lineage or {}).items():
            for origin, name, how in origins:
                made.setdefault((origin, name), []).append((other.id, col, how))
    out: list[Step] = []

    def walk(at: str, col: str, depth: int) -> None:
        for child in graph.children(at):
            node = graph.nodes[child]
            if node.kind == "sink":
                out.append((depth, child, col, "delivered"))
            elif node.kind == "test" and node.config.get("column") == col:
                out.append((depth, child, col, "tested"))
        for target, name, how in sorted(made.get((at, col), ())):
            out.append((depth, target, name, how))
            if depth < MAX_DEPTH:
                walk(target, name, depth + 1)

    walk(nid, column, 1)
    return out
