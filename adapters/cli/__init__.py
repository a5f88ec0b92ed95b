"""The `rivc` command: a click group; every command is added here, explicitly.

Commands live one group per module: project.py (no JVM: init, compile, lint, ls, connectors),
execute.py (Spark and databases: run, test, build, show, check, doctor) and state.py (state,
metrics). common.py holds what they share.
"""

from __future__ import annotations

import click

from rivc.compiler.version import VERSION

from . import execute, project, state


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(VERSION, prog_name="rivc")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """rivc: a SQL-first project compiler for data pipelines on Apache Spark."""
    ctx.obj = {"debug": debug}


for command in (
    project.init,
    project.compile_cmd,
    project.lint,
    project.ls_cmd,
    project.connectors,
    execute.run,
    execute.test,
    execute.build,
    execute.show,
    execute.check,
    execute.doctor,
    state.state,
    state.metrics,
    state.maintain,
    execute.server,
):
    main.add_command(command)
