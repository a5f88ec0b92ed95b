"""Models: rendered, parsed and checked in worker processes, then qualified through the DAG in waves; the per-model compile cache."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..analysis import rules
from ..analysis.rules import Finding
from ..analysis.workers import ColumnResult, ColumnTask, ModelResult, ModelTask, Pool, pool_size
from ..dag.graph import Node, node_id, ref_id
from ..dbt import jinja as dbtjinja
from ..dbt import naming
from ..errors import (
    ProjectError,
    RenderError,
    SourceLocation,
    SqlError,
)
from ..loading.folders import folder_config, merge
from ..loading.project import Project
from ..loading.specs import NodeId
from ..materializations import INCREMENTAL, materialization
from ..microbatch import as_time
from ..rendering.render import RenderContext, Renderer
from ..version import VERSION
from .common import content_hash, suggest


@dataclass
class CompileCache:
    """Per-model results keyed by content hash; the adapter persists it between compiles."""

    models: dict[str, ModelResult] = field(default_factory=dict)
    columns: dict[str, ColumnResult] = field(default_factory=dict)
    seeds: dict[str, dict[str, str]] = field(default_factory=dict)  # a seed's inferred types


def model_configs(project: Project, ctx: RenderContext) -> dict[str, dict[str, Any]]:
    """Each model's and snapshot's config before it renders: the defaults, its folders' and its
    properties' (a model's own `config()` goes on top when it renders)."""
    defaults = project.spec.defaults.model_dump(mode="json", exclude_unset=True)
    configs: dict[str, dict[str, Any]] = {}
    for name in sorted(project.models):
        model = project.models[name]
        config = dict(defaults)
        kind = "snapshots" if name in project.snapshots else "models"
        if kind == "snapshots":
            config["materialized"] = "snapshot"
        folders = model.path.relative_to(getattr(project.spec.paths, kind)).parent.parts
        tree = getattr(project.spec, kind)
        merge(
            config,
            folder_config(tree, kind, project.name, folders, name, ctx.vars, ctx.env, ctx.target),
        )
        if name in project.properties:
            merge(
                config,
                project.properties[name][0].config.model_dump(mode="json", exclude_unset=True),
            )
        configs[name] = config
    return configs


def preliminary_listing(
    project: Project, ctx: RenderContext, configs: dict[str, dict[str, Any]], seeds: list[Node]
) -> dbtjinja.Listing:
    """The project's relations under dbt's names as information_schema.tables lists them while
    models render: from their configs before rendering (the driver checks each model that read
    it against every node's final name). Empty unless a macro or model may query it."""
    texts = [t for _, t in ctx.macros] + [t for _, f in ctx.packages for _, t in f]
    texts += [m.text for m in project.models.values()]
    if not any("information_schema" in t.lower() for t in texts):
        return ()
    nodes = [
        Node(
            id=node_id("model", name),
            kind="model",
            name=name,
            path=project.models[name].path,
            tags=tuple(config.get("tags", ())),
            config={"materialized": "view", **config, **literal_config(project.models[name].text)},
            versioned=versioned(project, name),
        )
        for name, config in configs.items()
        if config.get("enabled") is not False
    ]
    placed, _ = naming.place(project.name, [*nodes, *seeds], ctx.target, Renderer(ctx).macro)
    return naming.listing(placed, [*nodes, *seeds])


def literal_config(text: str) -> dict[str, Any]:
    """The arguments of a model's `{{ config(...) }}` calls that are literals (`alias='x'`,
    `materialized='table'`), read from its Jinja without rendering it; {} when it does not
    parse (its render will say why)."""
    import jinja2
    from jinja2 import nodes

    try:
        tree = jinja2.Environment(extensions=["jinja2.ext.do"]).parse(text)
    except jinja2.TemplateError:
        return {}
    found: dict[str, Any] = {}
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Name) and call.node.name == "config":
            for kw in call.kwargs:
                if isinstance(kw.value, nodes.Const):
                    found[kw.key] = kw.value.value
    return found


def versioned(project: Project, name: str) -> str | None:
    """The versioned model a model is a version of, else None."""
    return next((n for n, v in project.versions.items() if name in v.models.values()), None)


def analyze_models(
    project: Project,
    ctx: RenderContext,
    configs: dict[str, dict[str, Any]],
    params: dict[str, Any],
    sources: dict[str, dict[str, str]],
    workers: int | None,
    cache: CompileCache,
) -> tuple[dict[str, ModelResult], dict[str, dict[str, str]]]:
    """`configs`: model_configs(); `sources`: the columns of every source relation compile
    knows."""
    ctx = dataclasses.replace(ctx, graph=dbt_graph(project, configs))
    context_key = content_hash(
        sorted(ctx.models),
        sorted(ctx.sources),
        ctx.vars,
        ctx.macros,
        ctx.packages,
        ctx.dispatch,
        sorted(ctx.source_seeds.items()),
        sorted(ctx.columns.items()),
        ctx.seeds,
        ctx.graph,
        ctx.listing,
        params,
        ctx.target,
        VERSION,
    )
    tasks, keys = [], {}
    for name, config in configs.items():
        model = project.models[name]
        task = ModelTask(name, model.path.as_posix(), model.text, config)
        keys[name] = content_hash(context_key, task.path, task.text, config)
        tasks.append(task)
    owner = {t.name: i for i, t in enumerate(tasks)}
    results: dict[str, ModelResult] = {}
    todo = []
    for t in tasks:
        hit = cache.models.get(keys[t.name])
        if hit is not None and all(ctx.env.get(k) == v for k, v in hit.env_used.items()):
            results[t.name] = _fresh(hit)
        else:
            todo.append(t)
    pool = Pool(ctx, params, pool_size(len(todo), workers)) if todo else None
    try:
        if pool is not None:
            for res in pool.run("models", todo, owner):
                results[res.name] = res
        for t in tasks:
            cache.models[keys[t.name]] = _fresh(results[t.name])
        again = Rerender({t.name: t for t in tasks}, ctx, params, pool)
        known = resolve_model_columns(project, sources, results, again, owner, cache)
    finally:
        if pool is not None:
            pool.close()
    return {t.name: results[t.name] for t in tasks}, known


def dbt_graph(project: Project, configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """dbt's `graph` as compile knows it before rendering: models, snapshots and seeds with
    their folder and properties configs (a model's own `config()` is not in it yet), and
    sources."""
    nodes: dict[str, Any] = {}
    for name, config in configs.items():
        if config.get("enabled") is False:
            continue  # dbt keeps disabled nodes out of the graph
        kind = "snapshot" if name in project.snapshots else "model"
        path = project.models[name].path
        nodes[f"{kind}.{project.name}.{name}"] = {
            "unique_id": f"{kind}.{project.name}.{name}",
            "resource_type": kind,
            "name": name,
            "alias": name,
            "package_name": project.name,
            "original_file_path": path.as_posix(),
            "path": path.as_posix(),
            "fqn": [project.name, *path.parts[1:-1], name],
            "tags": list(config.get("tags", ())),
            "config": {"materialized": "view", "enabled": True, **config},
            "description": project.properties[name][0].description
            if name in project.properties
            else "",
        }
    for name, seed in sorted(project.seeds.items()):
        nodes[f"seed.{project.name}.{name}"] = {
            "unique_id": f"seed.{project.name}.{name}",
            "resource_type": "seed",
            "name": name,
            "alias": name,
            "package_name": project.name,
            "original_file_path": seed.path.as_posix(),
            "path": seed.path.as_posix(),
            "fqn": [project.name, *seed.path.parts[1:-1], name],
            "tags": [],
            "config": {"materialized": "seed", "enabled": True},
        }
    sources = {}
    for fqn in sorted(project.sources):
        source, table = fqn.split(".", 1)
        sources[f"source.{project.name}.{fqn}"] = {
            "unique_id": f"source.{project.name}.{fqn}",
            "resource_type": "source",
            "source_name": source,
            "name": table,
            "identifier": table,
            "package_name": project.name,
            "fqn": [project.name, source, table],
        }
    return {"nodes": nodes, "sources": sources, "macros": {}}


def _fresh(result: ModelResult) -> ModelResult:
    """A copy of a worker's result. Column resolution completes a result in place (its columns,
    its RV009 findings), from what other models are in this compile; the cache keeps what the
    model's own file says, so that a compile answers the same with or without it."""
    return dataclasses.replace(
        result,
        findings=list(result.findings),
        columns=None if result.columns is None else list(result.columns),
    )


@dataclass
class Rerender:
    """What a second render of a model needs: its task, the compile's context and workers."""

    tasks: dict[str, ModelTask]
    ctx: RenderContext
    params: dict[str, Any]
    pool: Pool | None
    given: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    def run(self, names: list[str], owner: dict[str, int]) -> list[ModelResult]:
        """Render `names` again, each with the columns of the models it asked for."""
        todo = [dataclasses.replace(self.tasks[n], known=dict(self.given[n])) for n in names]
        return self.workers().run("models", todo, owner)

    def workers(self) -> Pool:
        if self.pool is None:  # every model came from the cache: one worker, this process
            self.pool = Pool(self.ctx, self.params, 1)
        return self.pool


def resolve_model_columns(
    project: Project,
    sources: dict[str, dict[str, str]],
    results: dict[str, ModelResult],
    again: Rerender,
    owner: dict[str, int],
    cache: CompileCache,
) -> dict[str, dict[str, str]]:
    """Qualify models in waves: a model is checked once every relation it reads has known columns.
    A model whose macros asked for a model's columns (dbt_utils.star) is rendered again once
    they are known.

    Returns the columns (name -> Spark type, UNKNOWN when not declared) of every relation known.
    """
    known = dict(sources)
    pending = {n for n, r in results.items() if r.parsed and r.sql is not None}
    waiting = {n for n, r in results.items() if r.needs}
    while pending or waiting:
        ready_again = sorted(n for n in waiting if results[n].needs in known)
        if ready_again:
            for n in ready_again:
                waiting.discard(n)
                needs = results[n].needs
                assert needs is not None
                again.given.setdefault(n, {})[needs] = known[needs]
            for res in again.run(ready_again, owner):
                results[res.name] = res
                if res.needs:
                    waiting.add(res.name)
                elif res.parsed and res.sql is not None:
                    pending.add(res.name)
            continue
        ready = sorted(
            n for n in pending if all(rel in known and rel != n for rel in results[n].relations)
        )
        if not ready:
            promoted = [n for n in pending if results[n].columns is not None]
            if not promoted:
                break  # a model waiting on one of these is told below
            for n in promoted:
                known[n] = {c: "UNKNOWN" for c in results[n].columns or ()}
                pending.discard(n)
            continue
        tasks: list[ColumnTask] = []
        done: dict[str, ColumnResult | None] = {}
        for n in ready:
            r = results[n]
            schema = {rel: known[rel] for rel in r.relations}
            key = content_hash(r.sql, r.sql_incremental, schema)
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
            for task, col in zip(tasks, again.workers().run("columns", tasks, owner), strict=True):
                done[task.name] = col
                cache.columns[content_hash(task.sql, task.sql_incremental, task.schema)] = col
        for n in ready:
            col = done[n]
            assert col is not None
            results[n].findings = [f for f in results[n].findings if f.rule != "RV009"]
            results[n].findings += col.findings
            if col.columns is not None:
                known[n] = dict(col.columns)
                results[n].columns = list(col.columns)
                results[n].lineage, results[n].filters = col.lineage, col.filters
            elif (names := results[n].columns) is not None:  # its own error found: its select
                known[n] = {c: "UNKNOWN" for c in names}  # list still checks what reads it
            pending.discard(n)
    for n in sorted(waiting):
        results[n].findings.append(
            rules.render(
                RenderError(
                    f"adapter.get_columns_in_relation({results[n].needs}): its columns are not "
                    "known at compile (it reads a relation whose columns are not declared)",
                    SourceLocation(project.models[n].path),
                )
            )
        )
    return known


def model_node(project: Project, res: ModelResult, types: dict[str, str]) -> Node:
    model = project.models[res.name]
    props = project.properties.get(res.name)
    declared = {c.name: c.data_type or "" for c in props[0].columns} if props else {}
    columns = None
    if res.columns is not None:
        columns = {
            c: declared.get(c) or types.get(c, "").replace("UNKNOWN", "") for c in res.columns
        }
    deps = [ref_id(r, project.seeds) for r in res.refs] + [
        node_id("source", s) for s in res.sources
    ]
    config = res.config or {}
    ids = dict(zip(res.relations, deps, strict=True))  # what its SQL names -> node ids
    lineage = None
    if res.lineage is not None:
        lineage = {
            c: [(ids[r], col, how) for r, col, how in origins if r in ids]
            for c, origins in res.lineage.items()
        }
    filters = [(ids[r], col) for r, col in res.filters or () if r in ids]
    return Node(
        id=node_id("model", res.name),
        kind="model",
        name=res.name,
        path=model.path,
        depends_on=deps,
        tags=tuple(config.get("tags", ())),
        config=config,
        description=props[0].description if props else "",
        sql=res.sql,
        variants={INCREMENTAL: res.sql_incremental} if res.sql_incremental else {},
        columns=columns,
        checksum=hashlib.sha256(model.text.encode()).hexdigest(),
        lineage=lineage,
        filters=filters,
        uses=res.uses,
        versioned=versioned(project, res.name),
    )


def check_model_keys(
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
            cfg.get("incremental_strategy") == "merge"
            and "merge" in materialization(cfg["materialized"]).strategies
            and not cfg["unique_key"]
        ):
            findings.append(
                rules.merge_without_key(
                    SqlError(
                        "incremental model with incremental_strategy merge needs unique_key",
                        SourceLocation(path, 1),
                    )
                )
            )
        if cfg.get("incremental_strategy") == "microbatch":
            missing = [k for k in ("event_time", "batch_size", "begin") if not cfg.get(k)]
            error = (
                f"a microbatch model needs {', '.join(missing)} (docs/dbt.md)" if missing else None
            )
            if not missing:
                try:
                    as_time(cfg["begin"], "begin")
                except ValueError as exc:
                    error = str(exc)
            if error is not None:
                findings.append(rules.from_error(ProjectError(error, SourceLocation(path, 1))))
        if res.columns is None:
            continue
        for key in ("unique_key", "partition_by", "event_time"):
            given = cfg.get(key) or ()
            for col in (given,) if isinstance(given, str) else given:
                if col not in res.columns:
                    findings.append(
                        rules.key_column(
                            SqlError(
                                f"{key} {col!r} is not an output column of model {name!r}"
                                f"{suggest(col, res.columns)}",
                                SourceLocation(path, 1),
                            )
                        )
                    )
