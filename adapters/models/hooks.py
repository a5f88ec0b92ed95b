"""dbt's hooks on Spark (docs/dbt.md): a model's pre- and post-hooks around its build, and a
run's on-run-start and on-run-end around its nodes, each SQL text run by `spark.sql`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rivc.compiler.errors import RivcError

from ..state import NodeResult
from ..util.errortext import spark_message

if TYPE_CHECKING:
    from ..run.runtime import Runtime


class HookFailed(RivcError):
    pass


def run_hooks(rt: Runtime, key: str, statements: Sequence[str]) -> None:
    """Run a model's `pre_hook` or `post_hook` statements in order; the first that fails stops
    the model with its error."""
    if not statements:
        return
    from pyspark.errors import PySparkException

    for i, sql in enumerate(statements):
        try:
            rt.spark.sql(sql)
        except PySparkException as exc:
            raise HookFailed(f"{key.replace('_', '-')} {i + 1}: {spark_message(exc)}") from None


def operations(rt: Runtime, key: str, statements: Sequence[str]) -> list[NodeResult]:
    """The run's `on_run_start` or `on_run_end`, one result each (`operation:on-run-start.0`,
    as dbt names them); the first that fails ends the list."""
    if not statements:
        return []
    from pyspark.errors import PySparkException

    out = []
    for i, sql in enumerate(statements):
        nid, started = f"operation:{key.replace('_', '-')}.{i}", time.perf_counter()
        try:
            rt.spark.sql(sql)
            status, error = "success", None
        except PySparkException as exc:
            status, error = "error", spark_message(exc)
        took = time.perf_counter() - started
        result = NodeResult(nid, "operation", status, error=error, duration_s=took)
        rt.state.record(rt.run_id, result)
        out.append(result)
        if result.status == "error":
            break
    return out
