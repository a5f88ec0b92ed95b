"""Which views pass new batches through (docs/running.md, "What each node reads").

A source table extracted in `incremental` mode changes by batches: every run lands the rows
extracted since the last one. A consumer downstream of it receives only those new batches when
every view on the way is row-wise over them: each row of the view's result comes from one row of
one changing relation (select, filter, project, UNION ALL, a join in which the changing relation
drives and the other side is read whole). A view that aggregates, windows, deduplicates, limits,
or joins two changing relations is rebuilt whole, and so are its consumers' inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, build_scope


def new_batches_relation(sink: str, relation: str) -> str:
    """The temporary view a sink's run binds to the new batches of `relation` (a landed source's
    view name), which the sink's batch SQL reads instead of the whole table."""
    return f"_rivc_new__{sink}__{relation}"


def changes(sql: str, changing: Iterable[str]) -> tuple[bool, str | None]:
    """Whether `sql` reads a relation of `changing` (by its unqualified name), and if it does,
    why new batches cannot pass through it (None when they can)."""
    names = {n.lower() for n in changing}
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except SqlglotError:
        return True, "its SQL could not be analyzed"
    root = build_scope(tree)
    if root is None:
        return False, None
    return _scope(root, names)


def _scope(scope: Scope, names: set[str]) -> tuple[bool, str | None]:
    if isinstance(scope.expression, exp.SetOperation):
        return _set_operation(scope, names)
    select = scope.expression
    driving: list[str] = []
    why: str | None = None
    for alias, (node, source) in scope.selected_sources.items():
        if isinstance(source, Scope):
            moving, reason = _scope(source, names)
        else:
            moving = (
                isinstance(source, exp.Table) and not source.db and source.name.lower() in names
            )
            reason = None
        if moving:
            driving.append(alias)
            why = why or reason
            if reason is None:
                why = why or _outer_side(select, node)
    for sub in scope.subquery_scopes:
        moving, _ = _scope(sub, names)
        if moving:
            return True, "a subquery reads a changing relation"
    if not driving:
        return False, None
    if len(driving) > 1:
        return True, "it joins two changing relations"
    return True, why or _whole(select)


def _set_operation(scope: Scope, names: set[str]) -> tuple[bool, str | None]:
    node = scope.expression
    moving, why = False, None
    for branch in scope.set_operation_scopes:
        m, w = _scope(branch, names)
        moving = moving or m
        why = why or (w if m else None)
    if moving and why is None:
        if not isinstance(node, exp.Union) or node.args.get("distinct"):
            why = "it is a UNION, INTERSECT or EXCEPT that compares rows (only UNION ALL passes batches)"
    return moving, why


def _outer_side(select: Any, node: Any) -> str | None:
    """A changing relation on the outer side of a join would produce the other side's unmatched
    rows again with every batch."""
    if not isinstance(select, exp.Select):
        return None
    joins = select.args.get("joins") or []
    first = select.args.get("from_")
    in_from = first is not None and node in first.find_all(exp.Table, exp.Subquery)
    for join in joins:
        side = (join.side or "").upper()
        mine = join.this is node or node in join.this.find_all(exp.Table, exp.Subquery)
        if mine and side in ("LEFT", "FULL"):
            return "a changing relation is on the outer side of an outer join"
        if in_from and side in ("RIGHT", "FULL"):
            return "a changing relation is on the outer side of an outer join"
    return None


def _whole(select: Any) -> str | None:
    """Why a select over one changing relation is not row-wise: aggregates, windows, DISTINCT,
    LIMIT (this scope only; nested selects are scopes of their own)."""
    if not isinstance(select, exp.Select):
        return None
    if select.args.get("group") or select.args.get("having"):
        return "it aggregates (GROUP BY)"
    if select.args.get("distinct"):
        return "it deduplicates (DISTINCT)"
    if select.args.get("limit") or select.args.get("offset"):
        return "it limits its rows"
    if select.args.get("qualify"):
        return "it filters on a window (QUALIFY)"
    for projection in select.expressions:
        for found in projection.walk(prune=lambda e: isinstance(e, exp.Subquery | exp.Select)):
            if isinstance(found, exp.Window):
                return "it computes a window function"
            if isinstance(found, exp.AggFunc):
                return "it aggregates"
    return None


def rename(sql: str, names: dict[str, str]) -> Any:
    """`sql` parsed, with every unqualified table named in `names` renamed."""
    tree = sqlglot.parse_one(sql, read="spark")
    lowered = {k.lower(): v for k, v in names.items()}
    for table in tree.find_all(exp.Table):
        new = lowered.get(table.name.lower())
        if new is not None and not table.db:
            table.set("this", exp.to_identifier(new, quoted=True))
    return tree


def batch_sql(relation: str, views: list[tuple[str, str]], renamed: dict[str, str]) -> str:
    """`SELECT * FROM relation` with `views` ((name, SQL), in dependency order) inlined as CTEs
    and the changing sources in `renamed` replaced by their new-batch relations. Each view keeps
    its own WITH inside its CTE (sqlglot would hoist nested CTEs, and two views may name theirs
    alike)."""
    target = renamed.get(relation, relation)
    body = f"SELECT * FROM {exp.to_identifier(target, quoted=True).sql(dialect='spark')}\n"
    if not views:
        return body
    ctes = ",\n".join(
        f"{exp.to_identifier(name, quoted=True).sql(dialect='spark')} AS (\n"
        f"{rename(sql, renamed).sql(dialect='spark', pretty=True)}\n)"
        for name, sql in views
    )
    return f"WITH {ctes}\n{body}"
