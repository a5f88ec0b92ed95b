"""The `rivc` command: a click group; every command is added here, explicitly.

Commands live one group per module: project.py (no JVM: init, import, compile, lint, ls,
connectors), execute.py (Spark and databases: run, test, build, show, check, doctor, server)
and state.py (state, metrics, maintain). common.py holds what they share.
"""

from __future__ import annotations

import click

from rivc.compiler.version import VERSION

from . import cdc, execute, freshness, project, state

# dbt's commands that rivc does not have: named as such, never "did you mean" a neighbour
# (`debug` is not `diff`, `parse` is not `state`)
DBT_ONLY = {
    "debug": "rivc doctor reaches every connection and sink location",
    "parse": "rivc compile",
}


class Commands(click.Group):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name in DBT_ONLY and self.get_command(ctx, name) is None:
            raise click.UsageError(f"rivc has no `{name}` command (a dbt one): {DBT_ONLY[name]}")
        return super().resolve_command(ctx, args)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(VERSION, prog_name="rivc")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """rivc: a SQL-first project compiler for data pipelines on Apache Spark."""
    ctx.obj = {"debug": debug}


for command in (
    project.init,
    project.deps,
    project.clean,
    project.compile_cmd,
    project.lint,
    project.ls_cmd,
    project.diff,
    project.docs,
    project.connectors,
    project.import_cmd,
    execute.run,
    execute.test,
    execute.build,
    execute.retry,
    execute.seed,
    execute.snapshot,
    execute.show,
    execute.check,
    execute.doctor,
    state.state,
    state.metrics,
    state.maintain,
    cdc.cdc,
    freshness.source,
    execute.server,
):
    main.add_command(command)
