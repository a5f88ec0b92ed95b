"""What every command shares: error handling (one line, exit 2), options, project lookup, compile."""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rivc.compiler.errors import RivcError
from rivc.compiler.loading.locate import PROFILES_DIR_ENV, TARGET_ENV, find_project_root
from rivc.compiler.loading.secrets import redact_text

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
    """The project's folder; the variables of the `.env` beside its profiles.yml join this
    process's environment where it does not set them (compile, the run and Spark's workers
    all read the one environment)."""
    from rivc.compiler.loading.profiles import dotenv

    root = find_project_root(Path(project_dir) if project_dir else Path.cwd())
    os.environ.update(dotenv(root, os.environ))
    return root


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


def _set_target(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--target is $RIVC_TARGET for this process: the project loader, a compile's fingerprint
    and the Spark workers all read the one environment."""
    if value:
        os.environ[TARGET_ENV] = value


def _set_profiles_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--profiles-dir is $RIVC_PROFILES_DIR for this process, as --target is $RIVC_TARGET."""
    if value:
        os.environ[PROFILES_DIR_ENV] = str(Path(value).resolve())


def project_dir_option(fn: F) -> F:
    """--project-dir, --target and --profiles-dir, which every command that reads a project
    takes."""
    fn = click.option(
        "--profiles-dir",
        metavar="DIR",
        expose_value=False,
        callback=_set_profiles_dir,
        type=click.Path(file_okay=False, exists=True),
        help="The folder of profiles.yml (default: $RIVC_PROFILES_DIR, $DBT_PROFILES_DIR, the "
        "project, ~/.rivc).",
    )(fn)
    fn = click.option(
        "--target",
        "-t",
        metavar="NAME",
        expose_value=False,
        callback=_set_target,
        help="The profile's output to use (default: $RIVC_TARGET, else the profile's target:).",
    )(fn)
    return click.option(
        "--project-dir",
        type=click.Path(file_okay=False),
        help="Project directory (default: found from the current one).",
    )(fn)


select_options = [
    click.option("--select", "-s", "select", multiple=True, help="Nodes to include (dbt syntax)."),
    click.option("--exclude", multiple=True, help="Nodes to leave out."),
]
state_option = click.option(
    "--state",
    "state",
    type=click.Path(file_okay=False),
    help="An earlier target/ folder, for the state:new, state:modified and result: selectors.",
    callback=lambda ctx, param, value: None if value is None else str(Path(value).resolve()),
)
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


def ends_with_compile() -> None:
    """For a command that exits once its compile is done (compile, lint, ls): no cyclic GC for
    the rest of the process. The compiled project stays alive to the end anyway; a collection
    after the analysis rescans its million objects (0.15 s at 1,000 models) and the one at
    exit does it again, to free nothing the exit does not."""
    gc.disable()


def _compile(
    root: Path,
    select: tuple[str, ...],
    exclude: tuple[str, ...],
    params: dict[str, str],
    variables: dict[str, Any],
    workers: int | None,
    state: str | None = None,
) -> Any:
    """Analyze without writing target/ (lint, ls, state selections)."""
    from rivc.compiler import CompileOptions

    from ..ops.target import analyze_project

    options = CompileOptions(select, exclude, params, variables, workers, state)
    return analyze_project(root, options)


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:  # logs and CI: wide enough for the summary table
        console = Console(highlight=False, width=140)
    return console
