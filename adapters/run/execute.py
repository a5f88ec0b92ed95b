"""Running one node: its strategy by kind (node_source, node_model, node_sink, node_test),
its result recorded, and an error in it one line at its file (never the end of the run)."""

from __future__ import annotations

import sys
import time

from rivc.compiler.errors import EnvironmentFault, RivcError
from rivc.compiler.loading.locate import STATE_DIR

from ..delivery.node_sink import run_sink
from ..ingest.node_source import run_source
from ..models.node_model import run_model
from ..models.node_test import run_test
from ..spark.session import peak_rss_mb
from ..state import NodeResult
from ..util.errortext import model_error, python_error_inside, rivc_error_inside, spark_message
from ..util.faults import fault
from .binding import bind_views, taken_by_batches
from .runtime import Runtime


def execute(rt: Runtime, nid: str) -> NodeResult:
    """Run one node and record its result; user and connector errors become an error result."""
    node = rt.plan.nodes[nid]
    started = time.perf_counter()
    try:
        bind_views(rt, nid, taken_by_batches(node))
        fn = {
            "source": run_source,
            "model": run_model,
            "seed": run_model,
            "sink": run_sink,
            "test": run_test,
        }[node.kind]
        result: NodeResult = fn(rt, nid, node)
    except EnvironmentFault:
        raise  # no node can run: the command stops with one line
    except Exception as exc:  # noqa: BLE001  (a bug of rivc's fails this node, not the run)
        result = NodeResult(nid, node.kind, "error", error=_error(rt, nid, exc))
    scrub = rt.plan.scrub  # no secret of the project's leaves in a message or an error
    result = NodeResult(
        **{
            **result.__dict__,
            "duration_s": time.perf_counter() - started,
            "peak_rss_mb": peak_rss_mb(rt.spark if rt.started else None),
            "message": scrub(result.message) if result.message else result.message,
            "error": scrub(result.error) if result.error else result.error,
        }
    )
    rt.state.record(rt.run_id, result)
    if node.kind == "sink":
        fault("between-sinks", node.name)
    return result


def _error(rt: Runtime, nid: str, exc: Exception) -> str:
    """A failed node's one line: a user's or connector's error at its file, else rivc's own."""
    if not isinstance(exc, (RivcError, *_spark_errors())):
        return unexpected(rt, nid, exc)
    node = rt.plan.nodes[nid]
    error = None
    if node.kind == "test" and node.line:  # a generic test: its SQL is rivc's
        error = f"{node.path}:{node.line}: error: {spark_message(exc)}"
    elif node.kind in ("model", "test") and node.compiled_path:
        error = model_error(exc, rt.plan.sql(nid), node.path)
    elif node.line:  # a source or a sink: at its YAML entry
        error = f"{node.path}:{node.line}: error: {_one_line(exc)}"
    return error or _one_line(exc)


def unexpected(rt: Runtime, nid: str, exc: BaseException) -> str:
    """One line for an error rivc did not expect; its traceback goes to .rivc/errors.log."""
    import traceback

    log = rt.plan.root / STATE_DIR / ERRORS_LOG
    with log.open("a") as out:
        out.write(
            rt.plan.scrub(f"--- {rt.run_id} {nid}\n{''.join(traceback.format_exception(exc))}")
        )
    return (
        f"{type(exc).__name__}: {_one_line(exc)} (unexpected: please report it with the "
        f"traceback in {STATE_DIR}/{ERRORS_LOG})"
    )


ERRORS_LOG = "errors.log"


def _spark_errors() -> tuple[type[BaseException], ...]:
    """Spark's errors, once pyspark is loaded (a node that needs no Spark loads none)."""
    errors = sys.modules.get("pyspark.errors")
    return () if errors is None else (errors.PySparkException,)


def _one_line(exc: BaseException) -> str:
    """The error in one line; for a stream that failed in a batch, rivc's own error inside it
    rather than Spark's wrapper."""
    text = (exc.message if isinstance(exc, RivcError) else str(exc)).strip()
    inner = rivc_error_inside(text) or python_error_inside(text)
    if inner:
        return inner
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]
