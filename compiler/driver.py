"""compile_project(): load -> render -> validate -> graph -> select; the short driver of all phases."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analysis import rules
from .analysis.rules import Finding
from .collector import no_cyclic_gc
from .dag.graph import Node, ProjectGraph, node_id
from .dag.selector import select
from .dbt import naming
from .dbt.jinja import Listing
from .emit import run_results
from .emit.run_results import RESULTS_FILE
from .errors import (
    CompileFailed,
    GraphError,
    RenderError,
    RivcError,
    SelectionError,
    SourceLocation,
)
from .loading.locate import TARGET_DIR, project_file
from .loading.project import Located, Project, load_project
from .loading.specs import NodeId
from .nodes.consumers import sink_inputs
from .nodes.contracts import check_contracts
from .nodes.data_tests import test_nodes
from .nodes.models import (
    CompileCache,
    analyze_models,
    check_model_keys,
    model_configs,
    model_node,
    preliminary_listing,
)
from .nodes.python_models import python_model_nodes
from .nodes.seeds import seed_nodes
from .nodes.sinks import check_targets, sink_node, star_feeding_sinks
from .nodes.sources import source_node
from .nodes.unit_tests import unit_test_nodes
from .rendering.params import resolve_params
from .rendering.render import LISTING, RenderContext, Renderer, listing_digest, source_relation

__all__ = [
    "CompileCache",
    "CompileOptions",
    "CompiledProject",
    "analyze",
    "compile_project",
    "no_cyclic_gc",
]


@dataclass(frozen=True)
class CompileOptions:
    """What the command line adds to a project: selection, parameters, vars, workers."""

    select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    vars: Mapping[str, Any] = field(default_factory=dict)
    workers: int | None = None
    state: str | None = None  # --state: an earlier target/, for `state:` and `result:`


@dataclass
class CompiledProject:
    project: Project
    graph: ProjectGraph
    selected: list[NodeId]  # what the selection needs, upstream included; topological order
    findings: list[Finding]
    params: dict[str, Any]
    env_used: dict[str, str | None]
    chosen: list[NodeId] = field(default_factory=list)  # what the selection names; topological
    hooks: dict[str, list[str]] = field(default_factory=dict)  # on_run_start/end: rendered SQL

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
    with no_cyclic_gc():
        return _analyze(project, options, cache, env)


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
        frozenset(project.models) | frozenset(project.seeds) | frozenset(project.python_models),
        frozenset(project.sources),
        variables,
        env,
        tuple((m.path.as_posix(), m.text) for m in project.macros),
        project.target_context,
        project.name,
        tuple((p.name, p.macros) for p in project.packages),
        tuple((d.macro_namespace, d.search_order) for d in project.spec.dispatch),
        dict(project.source_seeds),
        versions=project.versions,
    )
    findings: list[Finding] = [rules.not_run(note) for note in project.not_run]
    env_used = dict(project.env_used)

    nodes: dict[NodeId, Node] = {}
    for fqn, table in sorted(project.sources.items()):
        nodes[node_id("source", fqn)] = source_node(table, params, findings)
    seeds = seed_nodes(project, variables, env, findings, cache.seeds)
    for seed in seeds:
        nodes[seed.id] = seed
    sources = {
        source_relation(*fqn.split(".", 1)): dict(columns)
        for fqn in project.sources
        if (columns := nodes[node_id("source", fqn)].columns) is not None
    } | {seed.name: dict(seed.columns) for seed in seeds if seed.columns is not None}
    seed_files = tuple(  # run_query of seeds at compile
        (
            s.name,
            str(project.root / s.path),
            str(s.config["delimiter"]),
            s.checksum,
            tuple((s.columns or {}).items()),
        )
        for s in seeds
    )
    ctx = dataclasses.replace(ctx, columns=sources, seeds=seed_files)
    configs = model_configs(project, ctx)
    ctx = dataclasses.replace(ctx, listing=preliminary_listing(project, ctx, configs, seeds))
    models, types = analyze_models(project, ctx, configs, params, sources, options.workers, cache)
    for name, res in models.items():
        if res.config and not res.config["enabled"]:
            continue  # as if its file were not there; a ref() to it is an error
        nodes[node_id("model", name)] = model_node(project, res, types.get(name, {}))
        findings += res.findings
        env_used.update(res.env_used)
    names = frozenset(project.models) | frozenset(project.seeds) | frozenset(project.python_models)
    for node in python_model_nodes(project, names, variables, env, findings):
        nodes[node.id] = node
    check_model_keys(project, models, nodes, findings)
    check_contracts(project, models, types, nodes, findings)
    check_targets(project, findings)
    for name, sink in sorted(project.sinks.items()):
        if sink.spec.from_ is not None:
            nodes[node_id("sink", name)] = sink_node(sink, project, nodes, findings)
    star_feeding_sinks(project, models, nodes, findings)
    renderer = Renderer(ctx)
    renderer.state.known = types  # every model's columns, for tests' get_columns_in_relation
    for node in test_nodes(project, renderer, params, nodes, findings):
        nodes[node.id] = node
    for node in unit_test_nodes(project, ctx, renderer, nodes, findings):
        nodes[node.id] = node
    _refs_to_disabled(nodes, findings)
    hooks = _run_hooks(project, renderer, findings)
    _name_relations(project, renderer, nodes, findings)
    _check_listing(project, ctx.listing, nodes, findings)
    graph = ProjectGraph(nodes)
    sink_inputs(project, graph, findings)
    chosen = select(
        graph,
        options.select,
        options.exclude,
        _last_results(project.root, options),
        _changed(project.root, graph, options),
    )
    needed = graph.with_upstream(chosen)
    scope = {nodes[n].path.as_posix() for n in needed} | {project_file(project.root).as_posix()}
    scope |= {  # unit tests of the needed models, which make no node when they fail
        where.doc.path.as_posix()
        for spec, where in project.unit_tests
        if node_id("model", spec.model) in needed or spec.model not in project.models
    }
    for nid in needed:  # the properties that describe a needed node: its tests' errors
        described = _properties_file(project, nodes[nid])
        if described is not None:
            scope.add(described)
    whole = not options.select and not options.exclude  # every finding, nodes made or not
    findings = [
        f for f in findings if whole or f.location is None or f.location.path.as_posix() in scope
    ]
    findings.sort(
        key=lambda f: (
            str(f.location.path) if f.location else "",
            f.location.line or 0 if f.location else 0,
            f.location.col or 0 if f.location else 0,
            f.rule,
        )
    )
    return CompiledProject(
        project, graph, graph.order(needed), findings, params, env_used, graph.order(chosen), hooks
    )


def _properties_file(project: Project, node: Node) -> str | None:
    """The YAML file that describes `node` (its tests, columns, config), if any."""
    described: tuple[Any, Located] | None = None
    if node.kind == "model":
        described = project.properties.get(node.name)
    elif node.kind == "seed":
        described = project.seed_properties.get(node.name)
    elif node.kind == "source" and node.name in project.dbt_sources:
        return project.dbt_sources[node.name].doc.path.as_posix()
    return None if described is None else described[1].doc.path.as_posix()


def _run_hooks(
    project: Project, renderer: Renderer, findings: list[Finding]
) -> dict[str, list[str]]:
    """dbt's on-run-start and on-run-end, rendered as Spark SQL to run around a run's nodes."""
    out: dict[str, list[str]] = {}
    path = project_file(project.root)
    for key in ("on_run_start", "on_run_end"):
        rendered = []
        for text in getattr(project.spec, key):
            try:
                sql = renderer.render(key, path, text, False).sql.strip().rstrip(";").strip()
            except RivcError as exc:
                name = key.replace("_", "-")
                findings.append(rules.from_error(type(exc)(f"{name}: {exc.message}", exc.location)))
                continue
            if sql:
                rendered.append(sql)
        if rendered:
            out[key] = rendered
    return out


def _name_relations(
    project: Project, renderer: Renderer, nodes: dict[NodeId, Node], findings: list[Finding]
) -> None:
    """Each model's, seed's and data test's relation name in dbt's terms (dbt/naming.py)."""
    placed, errors = naming.place(
        project.name, nodes.values(), project.target_context, renderer.macro
    )
    for nid, where in placed.items():
        nodes[NodeId(nid)].placed = where
    findings += [rules.from_error(e) for e in errors]


def _check_listing(
    project: Project, told: Listing, nodes: dict[NodeId, Node], findings: list[Finding]
) -> None:
    """A model that read information_schema.tables while rendering was told each relation's
    name from the configs before any model rendered; a model's own `config()` may name it
    otherwise. Then the listing it read was not the project's: an error at that model."""
    readers = [n for n in nodes.values() if LISTING in n.uses]
    if not readers:
        return
    listed = [n for n in nodes.values() if n.kind == "seed" or n.name in project.models]
    final = naming.listing({n.id: n.placed for n in listed if n.placed}, listed)
    if listing_digest(final) == readers[0].uses[LISTING]:
        return
    moved = sorted({row[3] for row in set(final) ^ set(told)})
    for node in readers:
        findings.append(
            rules.render(
                RenderError(
                    f"model {node.name!r} lists relations through information_schema.tables "
                    f"while compiling, but {', '.join(moved)} {'is' if len(moved) == 1 else 'are'} "
                    "named by a model's own config() (schema, alias, enabled or materialized), "
                    "which the listing cannot know yet: set it in dbt_project.yml or properties "
                    "YAML (docs/dbt.md)",
                    SourceLocation(node.path),
                )
            )
        )


def _refs_to_disabled(nodes: dict[NodeId, Node], findings: list[Finding]) -> None:
    """A ref() to a model or seed with `enabled: false` (which has no node) is an error."""
    for node in nodes.values():
        for dep in [d for d in node.depends_on if d not in nodes]:
            kind, _, name = dep.partition(":")
            findings.append(
                rules.unknown_reference(
                    GraphError(
                        f"ref({name!r}): that {kind} is disabled (enabled: false)",
                        SourceLocation(node.path),
                    )
                )
            )
            node.depends_on.remove(dep)


def _asks(options: CompileOptions, method: str) -> bool:
    return any(f"{method}:" in s for s in (*options.select, *options.exclude))


def _last_results(root: Path, options: CompileOptions) -> dict[NodeId, str] | None:
    """Each node's status in the project's last run (target/run_results.json), when a selector
    asks for it with `result:`; None when there was no run."""
    if not _asks(options, "result"):
        return {}
    path = root / TARGET_DIR / RESULTS_FILE
    try:
        data = run_results.read(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SelectionError(f"{path} cannot be read: {exc}") from None
    return {NodeId(r["node"]): str(r["status"]) for r in data["results"]}


def _changed(
    root: Path, graph: ProjectGraph, options: CompileOptions
) -> dict[NodeId, set[str]] | None:
    """What changed in each node since the --state compile, when a selector asks with
    `state:`; None without --state."""
    if not _asks(options, "state"):
        return {}
    if options.state is None:
        return None
    from .dag import statediff

    return statediff.changes(graph, statediff.load(root / options.state))
