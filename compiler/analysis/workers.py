"""Render and validate models on every core: per-model work runs in forked worker processes.

Each model is owned by one worker for the whole compile, so the worker that parsed it keeps the
tree for the column pass; only small results (SQL text, names, findings) cross process borders.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlglot import exp

from ..errors import ProjectError, RivcError, SourceLocation, SqlError
from ..loading.folders import HOOKS, merge
from ..loading.specs import ModelConfig
from ..materializations import INCREMENTAL, foreign_config, materialization
from ..rendering.params import bind
from ..rendering.relations import NeedColumns
from ..rendering.render import RenderContext, Renderer, source_relation
from ..sql import SPARK
from . import rules
from .lineage import Origin, column_lineage
from .rules import Finding
from .validate import (
    has_star,
    nondeterministic_in_filters,
    output_columns,
    parse_query,
    position,
    resolve_columns,
    spark_types,
    too_deep,
    unconditioned_joins,
)


@dataclass(frozen=True, slots=True)
class ModelTask:
    name: str
    path: str
    text: str
    config: dict[str, Any]  # project defaults and properties YAML, explicitly set keys only
    # columns of the models its macros asked for (adapter.get_columns_in_relation): a second
    # render, once compile resolved them (compiler/nodes/models.py)
    known: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class ModelResult:
    """Everything compile learns about one model from its own file."""

    name: str
    config: dict[str, Any] = field(default_factory=dict)  # validated ModelConfig dump
    refs: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    sql: str | None = None
    sql_incremental: str | None = None
    env_used: dict[str, str | None] = field(default_factory=dict)
    uses: dict[str, str] = field(
        default_factory=dict
    )  # vars and macros it read (rendering/render.py)
    findings: list[Finding] = field(default_factory=list)
    star: tuple[int, int] | None = None  # position of a * in the output list
    columns: list[str] | None = None  # output names when readable without a schema
    parsed: bool = False
    needs: str | None = None  # a model whose columns it asked for: rendered again after it
    lineage: dict[str, list[Origin]] | None = None  # column -> (relation, column, how)
    filters: list[tuple[str, str]] | None = None  # (relation, column) that filter its rows

    @property
    def relations(self) -> list[str]:
        """Relations the SQL reads (besides itself): refs, then source views."""
        return self.refs + [source_relation(*s.split(".", 1)) for s in self.sources]


@dataclass(frozen=True, slots=True)
class ColumnTask:
    name: str
    path: str
    sql: str
    sql_incremental: str | None
    schema: dict[str, dict[str, str]]


@dataclass
class ColumnResult:
    name: str
    columns: dict[str, str] | None  # name -> Spark type or UNKNOWN
    findings: list[Finding] = field(default_factory=list)
    lineage: dict[str, list[Origin]] | None = None  # column -> (relation, column, how)
    filters: list[tuple[str, str]] | None = None  # (relation, column) that filter its rows


class Worker:
    """Renders, parses and qualifies the models given to it; keeps their trees in memory."""

    def __init__(self, ctx: RenderContext, params: Mapping[str, Any]) -> None:
        self.renderer = Renderer(ctx)
        self.params = params
        self.trees: dict[tuple[str, bool], exp.Query] = {}

    def models(self, tasks: Sequence[ModelTask]) -> list[ModelResult]:
        return [self.model(t) for t in tasks]

    def model(self, task: ModelTask) -> ModelResult:
        try:
            return self._model(task)
        except RecursionError:  # in sqlglot's recursive descent, or a tree walk after it
            res = ModelResult(task.name)
            res.findings.append(rules.syntax(too_deep(Path(task.path))))
            return res

    def _hook(self, name: str, path: Path, key: str, text: str, res: ModelResult) -> str | None:
        """A pre- or post-hook's SQL, rendered in the model's context; None when it fails."""
        try:
            sql = self.renderer.render(name, path, text, False).sql.strip().rstrip(";").strip()
        except RivcError as exc:
            res.findings.append(rules.from_error(type(exc)(f"{key}: {exc.message}", exc.location)))
            return None
        return sql

    def _model(self, task: ModelTask) -> ModelResult:
        path = Path(task.path)
        res = ModelResult(task.name)
        self.renderer.state.known = task.known
        try:
            full = self.renderer.render(task.name, path, task.text, False)
        except NeedColumns:
            res.needs = self.renderer.state.out.needs
            res.refs = list(self.renderer.state.out.refs)
            return res
        except RivcError as exc:
            res.findings.append(rules.from_error(exc))
            return res
        res.refs, res.sources, res.env_used = full.refs, full.sources, dict(full.env_used)
        res.uses = dict(full.uses)
        merged = dict(task.config)
        merge(merged, {k: v for k, (v, _) in full.config.items()})
        try:
            config = ModelConfig.model_validate(merged)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            key = str(err["loc"][0]) if err["loc"] else ""
            line = full.config.get(key, (None, None))[1]
            res.findings.append(
                rules.render(
                    ProjectError(
                        f"invalid config {key!r}: {err['msg']}", SourceLocation(path, line)
                    )
                )
            )
            return res
        res.config = config.model_dump(
            mode="json",
            exclude={"language"} | foreign_config(config.materialized),
        )
        if not (config.contract and config.contract.enforced):
            res.config.pop("contract", None)  # nodes/models.py fills in an enforced one
        for key in HOOKS:  # rendered as the model's: `{{ this }}` is its table
            hooks = [self._hook(task.name, path, key, text, res) for text in res.config.pop(key)]
            if None in hooks:
                return res
            if hooks:
                res.config[key] = hooks
        res.sql = self._bind(full.sql, path, res)
        grows = INCREMENTAL in materialization(config.materialized).variants
        if grows and full.uses_is_incremental:
            inc = self.renderer.render(task.name, path, task.text, True)
            res.env_used.update(inc.env_used)
            res.uses.update(inc.uses)
            res.sql_incremental = self._bind(inc.sql, path, res)
        if res.sql is None or (full.uses_is_incremental and grows and res.sql_incremental is None):
            return res
        try:
            tree = parse_query(res.sql, path, "spark", "a model")
            tree_inc = (
                parse_query(res.sql_incremental, path, "spark", "a model")
                if res.sql_incremental
                else None
            )
        except SqlError as exc:
            res.findings.append(rules.syntax(exc))
            return res
        res.parsed = True
        self.trees[(task.name, False)] = tree
        if tree_inc is not None:
            self.trees[(task.name, True)] = tree_inc
        res.columns = output_columns(tree)
        if has_star(tree):
            star = next(e for e in tree.selects if isinstance(e, exp.Star | exp.Column))
            line, col = position(res.sql, star)
            res.star = (line or 1, col or 1)
        for line, col, message in spark_types(res.sql):
            res.findings.append(rules.syntax(SqlError(message, SourceLocation(path, line, col))))
        for line, col in unconditioned_joins(tree, res.sql):
            res.findings.append(
                rules.cross_join(
                    SqlError(
                        "join without a condition (a cross join multiplies rows)",
                        SourceLocation(path, line, col),
                    )
                )
            )
        if tree_inc is not None and res.sql_incremental is not None:
            before = {(n, ln) for n, ln, _ in nondeterministic_in_filters(tree, res.sql)}
            for name, line, col in nondeterministic_in_filters(tree_inc, res.sql_incremental):
                if (name, line) not in before:
                    res.findings.append(
                        rules.nondeterministic_incremental_filter(
                            SqlError(
                                f"non-deterministic {name}() in an incremental filter: a re-run selects "
                                "different rows; filter on a column of {{ this }} instead",
                                SourceLocation(path, line, col),
                            )
                        )
                    )
        return res

    def _bind(self, sql: str, path: Path, res: ModelResult) -> str | None:
        bound, unbound = bind(sql, self.params, SPARK)
        for name, line, col in unbound:
            res.findings.append(rules.unbound_parameter(name, SourceLocation(path, line, col)))
        return None if unbound else bound

    def columns(self, tasks: Sequence[ColumnTask]) -> list[ColumnResult]:
        return [self.column(t) for t in tasks]

    def column(self, task: ColumnTask) -> ColumnResult:
        path = Path(task.path)
        out = ColumnResult(task.name, None)
        try:
            tree = self.trees.get((task.name, False)) or parse_query(task.sql, path, "spark", "")
            out.columns, root = resolve_columns(tree, task.sql, path, task.schema)
            out.lineage, out.filters = column_lineage(root)
            if task.sql_incremental:
                own = {**task.schema, task.name: out.columns}
                inc = self.trees.get((task.name, True)) or parse_query(
                    task.sql_incremental, path, "spark", ""
                )
                resolve_columns(inc, task.sql_incremental, path, own)
        except SqlError as exc:
            out.findings.append(rules.unknown_column(exc))
        except RecursionError:
            out.findings.append(rules.syntax(too_deep(path)))
        return out


def _serve(conn: Connection, worker: Worker) -> None:
    while True:
        msg = conn.recv()
        if msg is None:
            return
        op, tasks = msg
        conn.send(getattr(worker, op)(tasks))


class Pool:
    """The calling process plus forked helpers; task i always goes to the same worker."""

    def __init__(self, ctx: RenderContext, params: Mapping[str, Any], size: int) -> None:
        self.local = Worker(ctx, params)
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        if size > 1:
            mp = multiprocessing.get_context("fork")
            for _ in range(size - 1):
                parent, child = mp.Pipe()
                proc = mp.Process(target=_serve, args=(child, self.local), daemon=True)
                proc.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(proc)

    @property
    def size(self) -> int:
        return 1 + len(self.conns)

    def run(self, op: str, tasks: Sequence[Any], owner: Mapping[str, int]) -> list[Any]:
        """Run `op` over tasks, each on worker owner[task.name]; results in task order."""
        shares: list[list[Any]] = [[] for _ in range(self.size)]
        for t in tasks:
            shares[owner[t.name] % self.size].append(t)
        for conn, share in zip(self.conns, shares[1:], strict=True):
            conn.send((op, share))
        results = {r.name: r for r in getattr(self.local, op)(shares[0])}
        for conn in self.conns:
            results.update({r.name: r for r in conn.recv()})
        return [results[t.name] for t in tasks]

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
            conn.close()
        for proc in self.procs:
            proc.join(timeout=5)


def pool_size(models: int, requested: int | None) -> int:
    if requested is not None:
        return max(1, requested)
    return 1 if models < 64 else max(1, min(os.cpu_count() or 1, 8))
