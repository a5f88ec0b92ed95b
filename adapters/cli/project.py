"""Commands that need no JVM: init, deps, compile, lint, ls, connectors."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from rivc.compiler.loading.locate import TARGET_DIR
from rivc.compiler.loading.secrets import redact_text

from .common import (
    EXIT_FAILED,
    EXIT_INVALID,
    _compile,
    _params,
    _root,
    _vars,
    apply,
    compile_options,
    ends_with_compile,
    handle_errors,
    project_dir_option,
    select_options,
    state_option,
)


@click.command()
@project_dir_option
@handle_errors
def deps(project_dir: str | None) -> None:
    """Install the packages packages.yml asks for into dbt_packages/."""
    from rivc.compiler.loading.project import load_project_spec

    from ..ops.deps import install

    root = _root(project_dir)
    spec, _ = load_project_spec(root, os.environ)
    done, failed = install(root, spec.paths.packages)
    for line in done:
        click.echo(line)
    for line in failed:
        click.echo(f"error: {line}", err=True)
    if not done and not failed:
        click.echo("no packages to install (packages.yml lists none)")
    if failed:
        sys.exit(EXIT_FAILED)


@click.command()
@project_dir_option
@handle_errors
def clean(project_dir: str | None) -> None:
    """Remove the project's clean-targets (target/ by default), as dbt clean does."""
    import shutil

    from rivc.compiler.errors import ProjectError
    from rivc.compiler.loading.project import load_project_spec

    root = _root(project_dir).resolve()
    spec, _ = load_project_spec(root, os.environ)
    for name in spec.clean_targets:
        path = (root / name).resolve()
        if path == root or not path.is_relative_to(root):
            raise ProjectError(f"clean-targets: {name!r} is not a folder inside the project")
    for name in spec.clean_targets:
        path = (root / name).resolve()
        if path.is_dir():
            shutil.rmtree(path)
            click.echo(f"removed {name}/")


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--template", default="default", show_default=True, help="Scaffold to use.")
@handle_errors
def init(directory: str | None, template: str) -> None:
    """Scaffold a project that compiles and runs as it is."""
    from ..ops.scaffold import scaffold

    target = Path(directory or ".")
    written, skipped = scaffold(target, template)
    for path in written:
        click.echo(f"  created {path}")
    for path in skipped:
        click.echo(f"  kept    {path} (exists)")
    click.echo(f"Project ready in {target}/. Next: cd {target} && rivc run")


import_dir_option = click.option(
    "--project-dir",
    type=click.Path(file_okay=False),
    default=".",
    help="Where the project's files go (created if missing).",
)


@click.group("import")
def import_cmd() -> None:
    """Write a rivc project's files from another tool's config (docs/migrate.md)."""


@import_cmd.command("rivet")
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", default="rivet", show_default=True, help="The source and connection.")
@import_dir_option
@handle_errors
def import_rivet(config: str, name: str, project_dir: str) -> None:
    """A Rivet config (rivet.yaml): a connection, a source of its exports, a files sink each."""
    from rivc.compiler.importers.migrate import import_rivet as convert
    from rivc.compiler.loading.yamlio import load_yaml

    path = Path(config).resolve()
    doc = load_yaml(path.parent, Path(path.name), env=os.environ)
    _write_imported(convert(doc, name), Path(project_dir), path.name, name)


@import_cmd.command("rivven")
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@import_dir_option
@handle_errors
def import_rivven(config: str, project_dir: str) -> None:
    """A Rivven Connect file: connections and sources of its CDC sources, a sink per source
    table each sink's topics carry."""
    from rivc.compiler.importers.migrate import import_rivven as convert

    path = Path(config).resolve()
    doc = read_verbatim(path)
    _write_imported(convert(doc), Path(project_dir), path.name, "rivven")


def read_verbatim(path: Path) -> Any:
    """A YAML file with its lines, and ${VAR} kept as written (an import writes it as it is)."""
    import yaml

    from rivc.compiler.loading.yamlio import AnyEnv, parse_yaml

    text = path.read_text()
    doc = parse_yaml(text, Path(path.name), env=AnyEnv())  # for the marks
    doc.data = yaml.safe_load(text)  # the data read again, ${VAR} as written
    return doc


def _write_imported(imported: Any, root: Path, source: str, name: str) -> None:
    from rivc.compiler.errors import ProjectError

    files = dict(imported.files)
    if not (root / "rivc_project.yml").exists():
        files["rivc_project.yml"] = f"name: {name}\n"
    taken = [rel for rel in files if (root / rel).exists()]
    if taken:  # nothing is written over
        raise ProjectError(f"{root / taken[0]} exists: import into a project without it")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        click.echo(f"  created {root / rel}")
    for line in imported.unmapped:
        click.echo(f"  no equivalent: {line}")
    click.echo(f"Imported {source}. Next: rivc compile --project-dir {root}")


@click.command("compile")
@click.argument("selection", nargs=-1)
@apply([*select_options, state_option, *compile_options])
@click.option("--workers", type=int, help="Processes for rendering and parsing (default: cores).")
@project_dir_option
@handle_errors
def compile_cmd(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    state: str | None,
    params: tuple[str, ...],
    vars_: str | None,
    workers: int | None,
    project_dir: str | None,
) -> None:
    """Render, validate and write target/ (manifest, graph, compiled SQL). No JVM."""
    started = time.perf_counter()
    ends_with_compile()
    root = _root(project_dir)
    target = root / TARGET_DIR
    command = {
        "cmd": "compile",
        "select": sorted(select + selection),
        "exclude": sorted(exclude),
        "params": _params(params),
        "vars": vars_ or "",
        "state": state,
    }
    from ..ops.target import up_to_date

    # a selection by the last run's results or by an earlier compile reads files beside the
    # project's: compiled again each time
    asks = any(m in s for s in select + selection + exclude for m in ("result:", "state:"))
    summary = None if asks else up_to_date(target, root, command, os.environ)
    if summary is not None:
        click.echo(f"{summary['text']} (up to date, {time.perf_counter() - started:.2f}s)")
        return
    from rivc.compiler import CompileOptions

    from ..ops.target import compile_to_target, save_fingerprint

    options = CompileOptions(
        select + selection, exclude, _params(params), _vars(vars_), workers, state
    )
    compiled, files = compile_to_target(
        root, options, lambda text: click.echo(redact_text(text), err=True)
    )
    kinds: dict[str, int] = {}
    for nid in compiled.selected:
        kinds[compiled.graph.nodes[nid].kind] = kinds.get(compiled.graph.nodes[nid].kind, 0) + 1
    counts = ", ".join(
        f"{kinds.get(k, 0)} {k}{'' if kinds.get(k) == 1 else 's'}"
        for k in ("model", "seed", "source", "sink", "test")
        if k != "seed" or kinds.get(k)
    )
    text = f"Compiled {counts} into {target.relative_to(root)}/"
    save_fingerprint(
        target,
        root,
        compiled.project.spec.paths.model_dump(),
        command,
        os.environ,
        list(compiled.env_used),
        sorted(files),
        {"text": text},
    )
    click.echo(f"{text} in {time.perf_counter() - started:.2f}s")


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github"]),
    default="text",
    show_default=True,
)
@apply([state_option, *compile_options])
@project_dir_option
@handle_errors
def lint(
    paths: tuple[str, ...],
    fmt: str,
    state: str | None,
    params: tuple[str, ...],
    vars_: str | None,
    project_dir: str | None,
) -> None:
    """Check SQL models without a JVM: exit 0 clean, 1 findings, 2 invalid project. With
    --state, also a column a sink delivers that was removed, retyped or redefined since."""
    from rivc.compiler.analysis.lint import format_findings, lint_findings

    ends_with_compile()
    root = _root(project_dir)
    compiled = _compile(root, (), (), _params(params), _vars(vars_), None)
    if state is not None:
        from rivc.compiler.analysis import breaking
        from rivc.compiler.dag import statediff

        earlier = statediff.load(Path(state))
        compiled.findings += breaking.findings(compiled.graph, earlier, root)
    findings = lint_findings(compiled, paths)
    text = format_findings(findings, fmt)
    if text:
        click.echo(redact_text(text))
    if fmt == "text":
        errors = sum(f.severity == "error" for f in findings)
        click.echo(
            f"{len(findings)} finding(s): {errors} error(s), {len(findings) - errors} warning(s)"
            if findings
            else "All checks passed.",
            err=bool(findings),
        )
    notes = sum(f.rule == NOTE_RULE for f in findings)  # what rivc does not run: not a defect
    sys.exit(EXIT_FAILED if len(findings) > notes else 0)


NOTE_RULE = "RV012"


@click.command("diff")
@apply([state_option, *compile_options])
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@project_dir_option
@handle_errors
def diff(
    state: str | None,
    params: tuple[str, ...],
    vars_: str | None,
    fmt: str,
    project_dir: str | None,
) -> None:
    """Column changes since the --state compile, each breaking or not for each node that
    reads it (no JVM)."""
    from rivc.compiler.analysis import breaking
    from rivc.compiler.dag import statediff
    from rivc.compiler.errors import ProjectError

    if state is None:
        raise ProjectError("rivc diff compares with an earlier compile: give --state DIR")
    ends_with_compile()
    root = _root(project_dir)
    compiled = _compile(root, (), (), _params(params), _vars(vars_), None)
    graph = compiled.graph
    changes = breaking.column_changes(graph, statediff.load(Path(state)))
    readers: dict[object, list[breaking.Impact]] = {}
    for impact in breaking.impacts(graph, changes, root):
        readers.setdefault(impact.change, []).append(impact)
    if fmt == "json":
        out = [
            {
                "node": c.node,
                "column": c.column,
                "change": c.what,
                "before": c.before,
                "after": c.after,
                "readers": [
                    {"node": i.reader, "breaking": i.breaking, "why": i.why, "at": str(i.where)}
                    for i in readers.get(c, [])
                ],
            }
            for c in changes
        ]
        click.echo(json.dumps({"changes": out}, indent=2))
        return
    if not changes:
        click.echo("No column changed.")
        return
    for c in changes:
        node = graph.nodes[c.node]
        click.echo(f"{c.node}: column {c.column} {breaking.describe(c)}  ({node.path.as_posix()})")
        for i in readers.get(c, []):
            verdict = "breaking    " if i.breaking else "non-breaking"
            click.echo(f"  {verdict}  {i.reader}  {i.where}  {i.why}")
    broken = sum(i.breaking for group in readers.values() for i in group)
    click.echo(f"{len(changes)} column change(s), {broken} breaking for a reader")


@click.command("ls")
@click.argument("selection", nargs=-1)
@apply([*select_options, state_option, *compile_options])
@click.option(
    "--output", type=click.Choice(["name", "path", "json"]), default="name", show_default=True
)
@click.option(
    "--lineage",
    metavar="NODE.COLUMN",
    help="Where a column comes from and what it reaches (model.column, source:s.t.column).",
)
@project_dir_option
@handle_errors
def ls_cmd(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    state: str | None,
    params: tuple[str, ...],
    vars_: str | None,
    output: str,
    lineage: str | None,
    project_dir: str | None,
) -> None:
    """List the selected nodes in DAG order, or (--lineage) a column's lineage."""
    ends_with_compile()
    root = _root(project_dir)
    compiled = _compile(
        root, select + selection, exclude, _params(params), _vars(vars_), None, state
    )
    graph = compiled.graph
    if lineage is not None:
        _print_lineage(graph, lineage, output == "json")
        return
    chosen = compiled.chosen
    for nid in graph.order(chosen):
        node = graph.nodes[nid]
        if output == "name":
            # a selector that names this node alone: sources and sinks by their method
            kind = node.kind in ("source", "sink")
            click.echo(f"{node.kind}:{node.name}" if kind else node.name)
        elif output == "path":
            click.echo(node.path.as_posix())
        else:
            click.echo(
                json.dumps(
                    {
                        "id": nid,
                        "kind": node.kind,
                        "name": node.name,
                        "path": node.path.as_posix(),
                        "tags": list(node.tags),
                        "config": node.config,
                        "depends_on": graph.parents(nid),
                    }
                )
            )


def _print_lineage(graph: Any, wanted: str, as_json: bool) -> None:
    from rivc.compiler.analysis import lineage
    from rivc.compiler.errors import SelectionError, did_you_mean

    name, _, column = wanted.rpartition(".")
    nid = (
        name
        if ":" in name
        else next((f"{k}:{name}" for k in ("model", "seed") if f"{k}:{name}" in graph.nodes), name)
    )
    if nid not in graph.nodes:
        known = [n.name for n in graph.nodes.values() if n.kind in ("model", "seed")]
        raise SelectionError(f"--lineage {wanted}: no node {name!r}{did_you_mean(name, known)}")
    columns = graph.nodes[nid].columns or {}
    if column not in columns:
        raise SelectionError(
            f"--lineage {wanted}: {name} has no column {column!r}{did_you_mean(column, columns)}"
        )
    up, down = lineage.upstream(graph, nid, column), lineage.downstream(graph, nid, column)

    def shown(node: str) -> str:
        kind, _, rest = node.partition(":")
        return rest if kind in ("model", "seed") else node

    if as_json:

        def steps(found: list[Any]) -> list[dict[str, Any]]:
            return [{"depth": d, "node": n, "column": c, "how": h} for d, n, c, h in found]

        data = {"node": nid, "column": column, "upstream": steps(up), "downstream": steps(down)}
        click.echo(json.dumps(data))
        return
    click.echo(f"{shown(nid)}.{column}")
    for depth, node, col, how in up:
        click.echo(f"{'  ' * depth}<- {shown(node)}.{col}  {how}")
    for depth, node, col, how in down:
        where = (
            shown(node) if graph.nodes[node].kind in ("sink", "test") else f"{shown(node)}.{col}"
        )
        click.echo(f"{'  ' * depth}-> {where}  {how}")


@click.group()
def docs() -> None:
    """The project's documentation site: nodes, columns, SQL, tests, DAG and lineage."""


@docs.command("generate")
@click.option(
    "--output", type=click.Path(file_okay=False), help="Folder to write (default: target/docs)."
)
@apply(compile_options)
@project_dir_option
@handle_errors
def docs_generate(
    output: str | None, params: tuple[str, ...], vars_: str | None, project_dir: str | None
) -> None:
    """Write a static site (one index.html, no server needed) from a compile. No JVM."""
    import json

    from ..ops.docs import catalog, generate
    from ..util.storage import Store, resolve

    started = time.perf_counter()
    ends_with_compile()
    root = _root(project_dir)
    compiled = _compile(root, (), (), _params(params), _vars(vars_), None)
    index = generate(compiled, Path(output) if output else root / TARGET_DIR / "docs")
    profile = compiled.project.profile
    warehouse = resolve(profile.warehouse, root)
    found = catalog(compiled, warehouse, Store.of(warehouse, profile.storage))
    (root / TARGET_DIR / "catalog.json").write_text(json.dumps(found, indent=2) + "\n")
    took = time.perf_counter() - started
    click.echo(
        f"Wrote {index} and {TARGET_DIR}/catalog.json ({len(compiled.graph.nodes)} nodes) "
        f"in {took:.2f}s"
    )


@docs.command("serve")
@click.option("--port", type=int, default=8080, show_default=True)
@project_dir_option
@handle_errors
def docs_serve(port: int, project_dir: str | None) -> None:
    """Serve target/docs on 127.0.0.1 (after `rivc docs generate`) until Ctrl-C."""
    import functools
    import http.server

    from rivc.compiler.errors import ProjectError

    folder = _root(project_dir) / TARGET_DIR / "docs"
    if not (folder / "index.html").exists():
        raise ProjectError(f"{folder}/index.html is missing: run `rivc docs generate` first")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        click.echo(f"Serving the docs on http://127.0.0.1:{port}/ (Ctrl-C stops)")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


@click.command()
@click.option("--category", help="Only this category (database, storage, lakehouse, ...).")
def connectors(category: str | None) -> None:
    """The connector catalog: the built-in connectors and each installed plugin's (exit 2 when a
    plugin did not load, naming it)."""
    from rivc.compiler.registry import catalog

    found = catalog()
    origin = {key: p.distribution for p in found.plugins for key in p.adds}
    for key, info in sorted(
        found.connectors.items(), key=lambda c: (c[0][0], c[1].category, c[0][1])
    ):
        if category and info.category != category:
            continue
        extra = f" (from {origin[key]})" if key in origin else ""
        click.echo(f"{info.kind:<7} {info.category:<10} {info.name:<10} {info.description}{extra}")
    broken = [p for p in found.plugins if p.broken]
    for p in broken:
        click.echo(
            f"plugin {p.entry_point!r} ({p.distribution}) did not load: {p.broken}", err=True
        )
    if broken:
        sys.exit(EXIT_INVALID)
