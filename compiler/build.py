"""compile_project(): load -> render -> validate -> graph -> select; the short driver of all phases."""

from __future__ import annotations

import gc
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import transforms as tf
from .connector_specs import DeltaSinkConfig
from .dbtypes import unwritable
from .errors import (
    CompileFailed,
    GraphError,
    RenderError,
    RivcError,
    SourceLocation,
    SqlError,
    did_you_mean,
)
from .graph import Node, ProjectGraph, node_id
from .params import bind, resolve_params
from .project import Located, Project, SinkDef, SourceTableDef, load_project
from .redact import redact
from .render import RenderContext, Renderer, source_relation
from .selector import select
from .specs import GENERIC_TESTS, NodeId
from .sql import literal, quote
from .validate import (
    Finding,
    check_read_only,
    finding_for,
    output_columns,
    parse_query,
    unbound_parameter,
)
from .version import VERSION
from .workers import ColumnResult, ColumnTask, ModelResult, ModelTask, Pool, pool_size


@dataclass(frozen=True)
class CompileOptions:
    """What the command line adds to a project: selection, parameters, vars, workers."""

    select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    vars: Mapping[str, Any] = field(default_factory=dict)
    workers: int | None = None


@dataclass
class CompileCache:
    """Per-model results keyed by content hash; the adapter persists it between compiles."""

    models: dict[str, ModelResult] = field(default_factory=dict)
    columns: dict[str, ColumnResult] = field(default_factory=dict)


@dataclass
class CompiledProject:
    project: Project
    graph: ProjectGraph
    selected: list[NodeId]  # what the selection needs, upstream included; topological order
    findings: list[Finding]
    params: dict[str, Any]
    env_used: dict[str, str | None]
    chosen: list[NodeId] = field(default_factory=list)  # what the selection names; topological

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def compile_project(
    root: Path,
    options: CompileOptions = CompileOptions(),
    cache: CompileCache | None = None,
    env: Mapping[str, str] | None = None,
) -> CompiledProject:
    """Load and analyze the project; raise CompileFailed when any selected node has an error."""
    compiled = analyze(load_project(root, env), options, cache, env)
    if compiled.errors:
        raise CompileFailed(f.error for f in compiled.errors)
    return compiled


def analyze(
    project: Project,
    options: CompileOptions,
    cache: CompileCache | None = None,
    env: Mapping[str, str] | None = None,
) -> CompiledProject:
    """Every finding for the selected nodes and what they need; raises only for an invalid project."""
    # Thousands of parse trees stay alive until the end; the cyclic GC would rescan them again
    # and again (a third of the wall time at 1,000 models) and has nothing to free.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyze(project, options, cache, env)
    finally:
        if enabled:
            gc.enable()


def _analyze(
    project: Project,
    options: CompileOptions,
    cache: CompileCache | None,
    env: Mapping[str, str] | None,
) -> CompiledProject:
    env = os.environ if env is None else env
    cache = cache if cache is not None else CompileCache()
    params = resolve_params(project.spec.params, options.params)
    variables = {**project.spec.vars, **options.vars}
    ctx = RenderContext(
        frozenset(project.models),
        frozenset(project.sources),
        variables,
        env,
        tuple((m.path.as_posix(), m.text) for m in project.macros),
    )
    findings: list[Finding] = []
    env_used = dict(project.env_used)

    models, types = _analyze_models(project, ctx, params, options.workers, cache)
    nodes: dict[NodeId, Node] = {}
    for fqn, table in sorted(project.sources.items()):
        nodes[node_id("source", fqn)] = _source_node(table, params, findings)
    for name, res in models.items():
        nodes[node_id("model", name)] = _model_node(project, res, types.get(name, {}))
        findings += res.findings
        env_used.update(res.env_used)
    _check_model_keys(project, models, nodes, findings)
    _check_targets(project, findings)
    for name, sink in sorted(project.sinks.items()):
        if sink.spec.from_ is not None:
            nodes[node_id("sink", name)] = _sink_node(sink, project, nodes, findings)
    _star_feeding_sinks(project, models, nodes, findings)
    renderer = Renderer(ctx)
    for node in _test_nodes(project, renderer, params, nodes, findings):
        nodes[node.id] = node
    graph = ProjectGraph(nodes)
    chosen = select(graph, options.select, options.exclude)
    needed = graph.with_upstream(chosen)
    scope = {nodes[n].path.as_posix() for n in needed} | {
        n.extra["spec_path"] for n in (nodes[i] for i in needed) if "spec_path" in n.extra
    }
    findings = [f for f in findings if f.location is None or f.location.path.as_posix() in scope]
    findings.sort(
        key=lambda f: (
            str(f.location.path) if f.location else "",
            f.location.line or 0 if f.location else 0,
            f.location.col or 0 if f.location else 0,
            f.rule,
        )
    )
    return CompiledProject(
        project, graph, graph.order(needed), findings, params, env_used, graph.order(chosen)
    )


# --------------------------------------------------------------------------- models


def _hash(*parts: Any) -> str:
    """A cache key; inputs are built in a deterministic order, so their repr is stable."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def _analyze_models(
    project: Project,
    ctx: RenderContext,
    params: dict[str, Any],
    workers: int | None,
    cache: CompileCache,
) -> tuple[dict[str, ModelResult], dict[str, dict[str, str]]]:
    defaults = project.spec.defaults.model_dump(mode="json", exclude_unset=True)
    context_key = _hash(
        sorted(ctx.models), sorted(ctx.sources), ctx.vars, ctx.macros, params, VERSION
    )
    tasks, keys = [], {}
    for name in sorted(project.models):
        model = project.models[name]
        config = dict(defaults)
        if name in project.properties:
            config.update(
                project.properties[name][0].config.model_dump(mode="json", exclude_unset=True)
            )
        task = ModelTask(name, model.path.as_posix(), model.text, config)
        keys[name] = _hash(context_key, task.path, task.text, config)
        tasks.append(task)
    owner = {t.name: i for i, t in enumerate(tasks)}
    results: dict[str, ModelResult] = {}
    todo = []
    for t in tasks:
        hit = cache.models.get(keys[t.name])
        if hit is not None and all(ctx.env.get(k) == v for k, v in hit.env_used.items()):
            results[t.name] = hit
        else:
            todo.append(t)
    pool = Pool(ctx, params, pool_size(len(todo), workers)) if todo else None
    try:
        if pool is not None:
            for res in pool.run("models", todo, owner):
                results[res.name] = res
        for t in tasks:
            cache.models[keys[t.name]] = results[t.name]
        known = _resolve_columns(project, results, pool, owner, cache)
    finally:
        if pool is not None:
            pool.close()
    return {t.name: results[t.name] for t in tasks}, known


def _resolve_columns(
    project: Project,
    results: dict[str, ModelResult],
    pool: Pool | None,
    owner: dict[str, int],
    cache: CompileCache,
) -> dict[str, dict[str, str]]:
    """Qualify models in waves: a model is checked once every relation it reads has known columns.

    Returns the columns (name -> Spark type, UNKNOWN when not declared) of every relation known.
    """
    known: dict[str, dict[str, str]] = {}
    for fqn, table in project.sources.items():
        cols = table.known_columns()
        if cols is not None:
            known[source_relation(*fqn.split(".", 1))] = cols
    pending = {n for n, r in results.items() if r.parsed and r.sql is not None}
    while pending:
        ready = sorted(
            n for n in pending if all(rel in known and rel != n for rel in results[n].relations)
        )
        if not ready:
            promoted = [n for n in pending if results[n].columns is not None]
            if not promoted:
                break
            for n in promoted:
                known[n] = {c: "UNKNOWN" for c in results[n].columns or ()}
                pending.discard(n)
            continue
        tasks: list[ColumnTask] = []
        done: dict[str, ColumnResult | None] = {}
        for n in ready:
            r = results[n]
            schema = {rel: known[rel] for rel in r.relations}
            key = _hash(r.sql, r.sql_incremental, schema)
            hit = cache.columns.get(key)
            if hit is not None:
                done[n] = hit
            else:
                tasks.append(
                    ColumnTask(
                        n, project.models[n].path.as_posix(), r.sql or "", r.sql_incremental, schema
                    )
                )
                done[n] = None
        if tasks:
            if pool is None:
                pool = Pool(RenderContext(frozenset(), frozenset(), {}, {}, ()), {}, 1)
            for task, col in zip(tasks, pool.run("columns", tasks, owner), strict=True):
                done[task.name] = col
                cache.columns[_hash(task.sql, task.sql_incremental, task.schema)] = col
        for n in ready:
            col = done[n]
            assert col is not None
            results[n].findings = [f for f in results[n].findings if f.rule != "RV009"]
            results[n].findings += col.findings
            if col.columns is not None:
                known[n] = dict(col.columns)
                results[n].columns = list(col.columns)
            pending.discard(n)
    return known


def _model_node(project: Project, res: ModelResult, types: dict[str, str]) -> Node:
    model = project.models[res.name]
    props = project.properties.get(res.name)
    declared = {c.name: c.data_type or "" for c in props[0].columns} if props else {}
    columns = None
    if res.columns is not None:
        columns = {
            c: declared.get(c) or types.get(c, "").replace("UNKNOWN", "") for c in res.columns
        }
    deps = [node_id("model", r) for r in res.refs] + [node_id("source", s) for s in res.sources]
    config = res.config or {}
    return Node(
        node_id("model", res.name),
        "model",
        res.name,
        model.path,
        deps,
        tuple(config.get("tags", ())),
        config,
        props[0].description if props else "",
        res.sql,
        res.sql_incremental,
        columns,
        hashlib.sha256(model.text.encode()).hexdigest(),
    )


def _check_model_keys(
    project: Project,
    models: dict[str, ModelResult],
    nodes: dict[NodeId, Node],
    findings: list[Finding],
) -> None:
    for name, res in models.items():
        if not res.config:
            continue
        path = project.models[name].path
        cfg = res.config
        if (
            cfg["materialized"] == "incremental"
            and cfg.get("incremental_strategy") == "merge"
            and not cfg["unique_key"]
        ):
            findings.append(
                Finding(
                    "RV006",
                    "error",
                    SqlError(
                        "incremental model with incremental_strategy merge needs unique_key",
                        SourceLocation(path, 1),
                    ),
                )
            )
        if res.columns is None:
            continue
        for key in ("unique_key", "partition_by"):
            for col in cfg.get(key) or ():
                if col not in res.columns:
                    findings.append(
                        Finding(
                            "RV004",
                            "error",
                            SqlError(
                                f"{key} {col!r} is not an output column of model {name!r}"
                                f"{_suggest(col, res.columns)}",
                                SourceLocation(path, 1),
                            ),
                        )
                    )


def _suggest(name: str, candidates: list[str]) -> str:
    return did_you_mean(name, candidates) or f" (columns: {', '.join(candidates)})"


# --------------------------------------------------------------------------- sources and sinks


def _source_node(table: SourceTableDef, params: dict[str, Any], findings: list[Finding]) -> Node:
    spec, where = table.table, table.where
    path = where.doc.path
    sql: str | None = None
    columns = table.known_columns()
    if table.connector.relational:
        dialect = "postgres" if table.source.connector == "postgres" else "mysql"
        raw = spec.query or f"SELECT * FROM {spec.table}"
        loc = where.location("query" if spec.query else "table")
        offset = (loc.line or 1) - 1
        bound, unbound = bind(raw, params, dialect)
        for name, _, _ in unbound:
            findings.append(unbound_parameter(name, loc))
        if not unbound:
            try:
                tree = parse_query(bound, path, dialect, "a source query", offset)
                check_read_only(tree, bound, path, offset)
                sql = bound
                if columns is None:
                    names = output_columns(tree)
                    columns = {c: "UNKNOWN" for c in names} if names is not None else None
            except SqlError as exc:
                findings.append(
                    Finding(
                        "RV010"
                        if "read-only" in exc.message or "must be" in exc.message
                        else "RV001",
                        "error",
                        exc,
                    )
                )
        if columns is not None:
            if spec.meta_columns.exported_at:
                columns = {**columns, "_rivc_exported_at": "timestamp"}
            if spec.meta_columns.row_hash:
                columns = {**columns, "_rivc_row_hash": "bigint"}
        for key in ("cursor_column", "chunk_column", "time_column", "unique_key"):
            value = getattr(spec, key)
            for col in (value,) if isinstance(value, str) else value or ():
                if columns is None:
                    findings.append(
                        Finding(
                            "RV004",
                            "warning",
                            SqlError(
                                f"{key} {col!r} cannot be checked: the query selects * from a table "
                                "without declared columns (declare columns: to check it)",
                                where.location(key),
                            ),
                        )
                    )
                elif col not in columns:
                    findings.append(
                        Finding(
                            "RV004",
                            "error",
                            SqlError(
                                f"{key} {col!r} is not an output column of source table {table.fqn}"
                                f"{_suggest(col, list(columns))}",
                                where.location(key),
                            ),
                        )
                    )
    if spec.transforms:
        columns = _transformed(spec.transforms, columns, where, findings, "source")
    extra = {
        "connector": table.source.connector,
        "connection": table.source.connection,
        "relation": source_relation(table.source.name, spec.name),
        "spec_path": path.as_posix(),
        "table": redact(spec.model_dump(mode="json", exclude_defaults=True, by_alias=True)),
    }
    if table.connector.relational:
        extra["tuning"] = table.source.tuning.resolved()
    cfg = spec.model_dump(mode="json", include={"mode"})
    return Node(
        node_id("source", table.fqn),
        "source",
        table.fqn,
        path,
        [],
        (),
        cfg,
        spec.description or table.source.description,
        sql,
        None,
        dict(columns) if columns is not None else None,
        _hash(
            table.source.name,
            table.source.connector,
            table.source.connection,
            table.source.tuning,
            spec,
        ),
        extra,
    )


def _sink_node(
    sink: SinkDef, project: Project, nodes: dict[NodeId, Node], findings: list[Finding]
) -> Node:
    spec = sink.spec
    path = sink.where.doc.path
    src = spec.from_ or ""
    if src.startswith("source:"):
        upstream = node_id("source", src.removeprefix("source:"))
    else:
        upstream = node_id("model", src)
    deps: list[NodeId] = []
    columns: dict[str, str] | None = None
    if upstream not in nodes:
        names = [n.removeprefix("model:") for n in nodes if n.startswith("model:")] + [
            f"source:{n.removeprefix('source:')}" for n in nodes if n.startswith("source:")
        ]
        findings.append(
            Finding(
                "RV002",
                "error",
                GraphError(
                    f"sink {spec.name!r}: from {src!r} names no model or source table"
                    f"{did_you_mean(src, names)}",
                    sink.where.location("from"),
                ),
            )
        )
    else:
        deps = [upstream]
        columns = nodes[upstream].columns
        if (
            nodes[upstream].kind == "model"
            and nodes[upstream].config.get("materialized") == "ephemeral"
        ):
            findings.append(
                Finding(
                    "RV002",
                    "error",
                    GraphError(
                        f"sink {spec.name!r} reads ephemeral model {src!r}: ephemeral models have no "
                        "relation; materialize it as view, table or incremental",
                        sink.where.location("from"),
                    ),
                )
            )
    columns = _transformed(spec.transforms, columns, sink.where, findings, "sink")
    if columns is not None:
        _check_expectations(spec.quality, columns, sink.where, findings)
        fmt = getattr(sink.config, "format", None)
        for col, kind in columns.items():
            why = unwritable(spec.connector, fmt, kind) if kind else None
            if why is not None:
                findings.append(
                    _spec_finding(
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
                        Finding(
                            "RV004",
                            "error",
                            SqlError(
                                f"{key} {col!r} is not a column of {src!r}{_suggest(col, list(columns))}",
                                sink.where.location("config", key),
                            ),
                        )
                    )
    relation = (nodes[upstream].extra.get("relation") or nodes[upstream].name) if deps else ""
    extra = {
        "connector": spec.connector,
        "from": src,
        "relation": relation,
        "spec_path": path.as_posix(),
        "sink_config": redact(sink.config.model_dump(mode="json")),
        "trigger": spec.trigger
        if isinstance(spec.trigger, str)
        else spec.trigger.model_dump(mode="json"),
        "targets": spec.targets,
    }
    sql = f"SELECT * FROM {quote(relation)}\n" if relation else None
    cfg = {"connector": spec.connector}
    if isinstance(sink.config, DeltaSinkConfig):
        cfg["mode"] = sink.config.mode
    return Node(
        node_id("sink", spec.name),
        "sink",
        spec.name,
        path,
        deps,
        spec.tags,
        cfg,
        spec.description,
        sql,
        None,
        columns,
        _hash(spec.model_dump(mode="json", by_alias=True)),
        extra,
    )


def _transformed(
    transforms: tuple[Any, ...],
    columns: dict[str, str] | None,
    where: Located,
    findings: list[Finding],
    kind: str,
) -> dict[str, str] | None:
    """The columns after `transforms`, each checked against its input; None when unknown."""
    for i, t in enumerate(transforms):
        if kind == "source" and t.type == "route":
            findings.append(_spec_finding("route is a sink transform", where, "transforms", i))
    if columns is None:
        return None
    try:
        return tf.plan(transforms, columns).columns
    except tf.UnknownColumns:
        return None
    except tf.TransformError as exc:
        findings.append(_spec_finding(str(exc), where, "transforms", exc.index, exc.key))
        return None


def _check_expectations(
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
                _spec_finding(
                    f"quality {e.check}: column {col!r} is not in the sink's input"
                    f"{_suggest(col, list(columns))}",
                    where,
                    "quality",
                    i,
                )
            )


def _check_targets(project: Project, findings: list[Finding]) -> None:
    """Route and dead-letter targets: existing sinks without `from`, each written by one sink."""
    writers: dict[str, str] = {}
    for name, sink in sorted(project.sinks.items()):
        for target, why in sink.spec.targets.items():
            key = "dead_letter" if why == "dead_letter" else "transforms"
            other = project.sinks.get(target)
            if other is None:
                findings.append(
                    _spec_finding(
                        f"sink {name!r}: {why} target {target!r} is not a sink"
                        f"{did_you_mean(target, list(project.sinks))}",
                        sink.where,
                        key,
                    )
                )
            elif other.spec.from_ is not None or target == name:
                findings.append(
                    _spec_finding(
                        f"sink {name!r}: {why} target {target!r} has its own from:; a target sink "
                        "takes its rows from the sink that names it, so leave from: out",
                        sink.where,
                        key,
                    )
                )
            elif target in writers:
                findings.append(
                    _spec_finding(
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
                _spec_finding(
                    f"sink {name!r} has no from: and no sink routes or dead-letters to it",
                    sink.where,
                    "name",
                )
            )


def _spec_finding(message: str, where: Located, *keys: str | int) -> Finding:
    return Finding("RV004", "error", SqlError(message, where.location(*keys)))


def _star_feeding_sinks(
    project: Project,
    models: dict[str, ModelResult],
    nodes: dict[NodeId, Node],
    findings: list[Finding],
) -> None:
    for sink in project.sinks.values():
        res = models.get(sink.spec.from_ or "")
        if res is not None and res.star is not None:
            findings.append(
                Finding(
                    "RV005",
                    "warning",
                    SqlError(
                        f"SELECT * in model {res.name!r}, which feeds sink {sink.spec.name!r}: an upstream "
                        "column change silently changes the sink's schema; list the columns",
                        SourceLocation(project.models[res.name].path, *res.star),
                    ),
                )
            )


# --------------------------------------------------------------------------- tests

_REF = re.compile(r"""^\s*ref\(\s*['"](\w+)['"]\s*\)\s*$""")
_SOURCE = re.compile(r"""^\s*source\(\s*['"](\w+)['"]\s*,\s*['"](\w+)['"]\s*\)\s*$""")


def _test_nodes(
    project: Project,
    renderer: Renderer,
    params: dict[str, Any],
    nodes: dict[NodeId, Node],
    findings: list[Finding],
) -> list[Node]:
    out: list[Node] = []
    seen: set[str] = set()
    for model_name, (props, where) in sorted(project.properties.items()):
        model = nodes.get(node_id("model", model_name))
        for ci, column in enumerate(props.columns):
            for ti, test in enumerate(column.data_tests):
                loc = where.location("columns", ci, "tests", ti)
                try:
                    node = _generic_test(model_name, column.name, test, loc, nodes)
                except RivcError as exc:
                    findings.append(finding_for(exc))
                    continue
                if (
                    model is not None
                    and model.columns is not None
                    and column.name not in model.columns
                ):
                    findings.append(
                        Finding(
                            "RV009",
                            "error",
                            SqlError(
                                f"test on unknown column {column.name!r} of model {model_name!r}"
                                f"{_suggest(column.name, list(model.columns))}",
                                loc,
                            ),
                        )
                    )
                base, n = node.name, 2
                while node.name in seen:
                    node.name, n = f"{base}_{n}", n + 1
                node.id = node_id("test", node.name)
                seen.add(node.name)
                out.append(node)
    for name, singular in sorted(project.tests.items()):
        node = Node(
            node_id("test", name),
            "test",
            name,
            singular.path,
            checksum=hashlib.sha256(singular.text.encode()).hexdigest(),
            config={"severity": "error", "test": "singular"},
        )
        try:
            rendered = renderer.render(name, singular.path, singular.text, False)
            sql, unbound = bind(rendered.sql, params, "spark")
            for pname, line, col in unbound:
                findings.append(unbound_parameter(pname, SourceLocation(singular.path, line, col)))
            if not unbound:
                parse_query(sql, singular.path, "spark", "a test")
                node.sql = sql
            node.depends_on = [node_id("model", r) for r in rendered.refs] + [
                node_id("source", s) for s in rendered.sources
            ]
        except RivcError as exc:
            findings.append(finding_for(exc))
        seen.add(name)
        out.append(node)
    return out


def _generic_test(
    model: str,
    column: str,
    test: str | dict[str, Any],
    loc: SourceLocation,
    nodes: dict[NodeId, Node],
) -> Node:
    args: dict[str, Any]
    if isinstance(test, str):
        kind, args = test, {}
    elif len(test) == 1:
        kind, args = next(iter(test.items()))
        args = args or {}
    else:
        raise RenderError(f"a test is a name or a mapping with one key, got {sorted(test)}", loc)
    cls = GENERIC_TESTS.get(kind)
    if cls is None:
        raise RenderError(f"unknown test {kind!r}{did_you_mean(kind, GENERIC_TESTS)}", loc)
    from pydantic import ValidationError

    try:
        spec: Any = cls.model_validate(args)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise RenderError(
            f"test {kind}: {'.'.join(map(str, err['loc']))}: {err['msg']}", loc
        ) from None
    rel, col = quote(model), quote(column)
    deps = [node_id("model", model)]
    name = f"{kind}_{model}_{column}"
    if kind == "not_null":
        sql = f"SELECT *\nFROM {rel}\nWHERE {col} IS NULL"
    elif kind == "unique":
        sql = (
            f"SELECT {col}, COUNT(*) AS n_records\nFROM {rel}\nWHERE {col} IS NOT NULL\n"
            f"GROUP BY {col}\nHAVING COUNT(*) > 1"
        )
    elif kind == "accepted_values":
        values = ", ".join(
            literal(v, "spark") if spec.quote or not isinstance(v, str) else v for v in spec.values
        )
        sql = (
            f"SELECT {col}, COUNT(*) AS n_records\nFROM {rel}\nWHERE {col} IS NOT NULL "
            f"AND {col} NOT IN ({values})\nGROUP BY {col}"
        )
    else:
        target = _test_target(spec.to, loc, nodes)
        deps.append(target)
        parent = quote(nodes[target].extra.get("relation") or nodes[target].name)
        field_ = quote(spec.field)
        sql = (
            f"SELECT child.{col}\nFROM {rel} AS child\nLEFT JOIN {parent} AS parent\n"
            f"  ON child.{col} = parent.{field_}\nWHERE child.{col} IS NOT NULL "
            f"AND parent.{field_} IS NULL"
        )
        name = (
            f"relationships_{model}_{column}__{nodes[target].name.replace('.', '_')}_{spec.field}"
        )
    config = {"severity": spec.config.severity, "test": kind, "column": column, "model": model}
    return Node(
        node_id("test", name),
        "test",
        name,
        loc.path,
        deps,
        (),
        config,
        "",
        sql + "\n",
        checksum=_hash(model, column, test),
        extra={"spec_path": loc.path.as_posix()},
    )


def _test_target(to: str, loc: SourceLocation, nodes: dict[NodeId, Node]) -> NodeId:
    m = _REF.match(to)
    target = node_id("model", m.group(1)) if m else None
    if target is None and (s := _SOURCE.match(to)):
        target = node_id("source", f"{s.group(1)}.{s.group(2)}")
    if target is None:
        raise RenderError(
            f"relationships: to must be ref('model') or source('src', 'table'), got {to!r}", loc
        )
    if target not in nodes:
        raise GraphError(f"relationships: {to} names nothing", loc)
    return target
