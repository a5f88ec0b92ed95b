"""The `rivc` command: a click group that drives the compiler and reports RivcError as one line."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rivc.compiler.errors import CompileFailed, RivcError
from rivc.compiler.locate import find_project_root
from rivc.compiler.redact import redact_text

F = TypeVar("F", bound=Callable[..., Any])
EXIT_FAILED, EXIT_INVALID = 1, 2


def _fail(message: str, code: int = EXIT_INVALID) -> None:
    click.echo(redact_text(message), err=True)
    sys.exit(code)


def handle_errors(fn: F) -> F:
    """RivcError -> its message on stderr and exit 2 (re-raised under --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return fn(*args, **kwargs)
        except RivcError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _fail(str(exc))

    return wrapper  # type: ignore[return-value]


def _root(project_dir: str | None) -> Path:
    return find_project_root(Path(project_dir) if project_dir else Path.cwd())


def _params(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise RivcError(f"--param {item!r}: expected name=value")
        out[name.strip()] = value
    return out


def _vars(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RivcError(f"--vars: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RivcError("--vars: expected a mapping such as '{start: 2024-01-01}'")
    return data


project_dir_option = click.option(
    "--project-dir",
    type=click.Path(file_okay=False),
    help="Project directory (default: found from the current one).",
)
select_options = [
    click.option("--select", "-s", "select", multiple=True, help="Nodes to include (dbt syntax)."),
    click.option("--exclude", multiple=True, help="Nodes to leave out."),
]
compile_options = [
    click.option(
        "--param", "params", multiple=True, metavar="NAME=VALUE", help="Bind a ${name} parameter."
    ),
    click.option("--vars", "vars_", metavar="YAML", help="Override project vars, as YAML."),
]


def apply(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return deco


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option("0.1.0", prog_name="rivc")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """rivc: a SQL-first project compiler for data pipelines on Apache Spark."""
    ctx.obj = {"debug": debug}


@main.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--template", default="default", show_default=True, help="Scaffold to use.")
@handle_errors
def init(directory: str | None, template: str) -> None:
    """Scaffold a project that compiles and runs as it is."""
    from .scaffold import scaffold

    target = Path(directory or ".")
    written, skipped = scaffold(target, template)
    for path in written:
        click.echo(f"  created {path}")
    for path in skipped:
        click.echo(f"  kept    {path} (exists)")
    click.echo(f"Project ready in {target}/. Next: cd {target} && rivc run")


def _compile(
    root: Path,
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    params: dict[str, str],
    variables: dict[str, Any],
    workers: int | None,
) -> Any:
    from rivc.compiler import CompileOptions, load_project
    from rivc.compiler.build import analyze

    from .target import load_cache, save_cache

    target = root / "target"
    cache = load_cache(target)
    options = CompileOptions(select, exclude, params, variables, workers)
    compiled = analyze(load_project(root), options, cache)
    save_cache(target, cache)
    return compiled


@main.command("compile")
@click.argument("selection", nargs=-1)
@apply(select_options + compile_options)
@click.option("--workers", type=int, help="Processes for rendering and parsing (default: cores).")
@project_dir_option
@handle_errors
def compile_cmd(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    params: tuple[str, ...],
    vars_: str | None,
    workers: int | None,
    project_dir: str | None,
) -> None:
    """Render, validate and write target/ (manifest, graph, compiled SQL). No JVM."""
    started = time.perf_counter()
    root = _root(project_dir)
    target = root / "target"
    command = {
        "cmd": "compile",
        "select": sorted(select + selection),
        "exclude": sorted(exclude),
        "params": _params(params),
        "vars": vars_ or "",
    }
    from .target import up_to_date

    summary = up_to_date(target, root, command, os.environ)
    if summary is not None:
        click.echo(f"{summary['text']} (up to date, {time.perf_counter() - started:.2f}s)")
        return
    compiled = _compile(root, select + selection, exclude, _params(params), _vars(vars_), workers)
    for warning in compiled.warnings:
        click.echo(redact_text(str(warning)), err=True)
    if compiled.errors:
        raise CompileFailed(f.error for f in compiled.errors)
    from rivc.compiler.codegen import artifacts

    from .target import save_fingerprint, write_artifacts

    files = artifacts(compiled)
    write_artifacts(target, files)
    kinds: dict[str, int] = {}
    for nid in compiled.selected:
        kinds[compiled.graph.nodes[nid].kind] = kinds.get(compiled.graph.nodes[nid].kind, 0) + 1
    counts = ", ".join(
        f"{kinds.get(k, 0)} {k}{'' if kinds.get(k) == 1 else 's'}"
        for k in ("model", "source", "sink", "test")
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


@main.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github"]),
    default="text",
    show_default=True,
)
@apply(compile_options)
@project_dir_option
@handle_errors
def lint(
    paths: tuple[str, ...],
    fmt: str,
    params: tuple[str, ...],
    vars_: str | None,
    project_dir: str | None,
) -> None:
    """Check SQL models without a JVM: exit 0 clean, 1 findings, 2 invalid project."""
    from rivc.compiler.lint import format_findings, lint_findings

    root = _root(project_dir)
    compiled = _compile(root, (), (), _params(params), _vars(vars_), None)
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
    sys.exit(EXIT_FAILED if findings else 0)


@main.command("ls")
@click.argument("selection", nargs=-1)
@apply(select_options + compile_options)
@click.option(
    "--output", type=click.Choice(["name", "path", "json"]), default="name", show_default=True
)
@project_dir_option
@handle_errors
def ls_cmd(
    selection: tuple[str, ...],
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    params: tuple[str, ...],
    vars_: str | None,
    output: str,
    project_dir: str | None,
) -> None:
    """List the selected nodes in DAG order."""
    from rivc.compiler.selector import select as select_nodes

    root = _root(project_dir)
    compiled = _compile(root, (), (), _params(params), _vars(vars_), None)
    graph = compiled.graph
    chosen = select_nodes(graph, select + selection, exclude)
    for nid in graph.order(chosen):
        node = graph.nodes[nid]
        if output == "name":
            click.echo(node.name if node.kind != "source" else f"source:{node.name}")
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


@main.command()
@click.option("--category", help="Only this category (database, storage, lakehouse, ...).")
def connectors(category: str | None) -> None:
    """The connector catalog."""
    from rivc.compiler.registry import CONNECTORS

    for info in sorted(CONNECTORS.values(), key=lambda c: (c.kind, c.category, c.name)):
        if category and info.category != category:
            continue
        click.echo(f"{info.kind:<7} {info.category:<10} {info.name:<10} {info.description}")


# Commands that run on Spark or read the state store; imported last, as they register on `main`.
from . import cli_runtime  # noqa: E402,F401

if __name__ == "__main__":
    main()
