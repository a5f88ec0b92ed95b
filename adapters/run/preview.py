"""`rivc show`: a node's first rows. What is already on disk (a model's table, what a sink
delivered) is read without Spark; the rest is computed by Spark after binding what it reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.sql import quote

from ..state import StateStore
from .binding import bind
from .plan import Plan
from .runtime import Runtime
from .scheduler import RunOptions, compile_for_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def show(root: Path, node: str, limit: int, spark_factory: Callable[[Plan], SparkSession]) -> Any:
    """Rows of one model, source table or sink input, after binding what it reads."""
    options = RunOptions(select=(node,))
    compiled, plan = compile_for_run(root, options)
    target = [n for n in compiled.chosen if compiled.graph.nodes[n].kind != "test"]
    if len(target) != 1:
        from rivc.compiler.errors import SelectionError

        raise SelectionError(f"show takes one model, source table or sink, got {node!r}")
    meta = plan.nodes[target[0]]
    if meta.stored:
        stored = _stored_rows(plan, meta.name, limit)
        if stored is not None:  # read with delta-rs: no JVM for what is already on disk
            return stored
    if meta.kind == "sink":
        delivered = _sink_rows(plan, meta.name, limit)
        if delivered is not None:  # what the sink delivered, read without a JVM
            return delivered
    state = StateStore.for_project(root)
    try:
        runtime = Runtime(lambda: spark_factory(plan), plan, "show", state)
        for nid in compiled.selected:
            if nid != target[0] and compiled.graph.nodes[nid].kind != "test":
                bind(runtime, nid)
        nid = target[0]
        meta = plan.nodes[nid]
        if meta.kind == "source":
            bind(runtime, nid)
            df = runtime.spark.table(quote(meta.relation or meta.name))
        elif meta.stored:
            bind(runtime, nid)
            df = runtime.spark.table(quote(meta.name))
        else:
            df = runtime.spark.sql(plan.sql(nid))
        return df.limit(limit).toArrow()
    finally:
        state.close()


def _stored_rows(plan: Plan, name: str, limit: int) -> Any:
    """The first rows of a model's Delta table, or None when it has not been built: read from
    its files with Arrow, wherever the warehouse is (no JVM)."""
    from ..util.storage import join

    uri = join(plan.warehouse, name)
    from ..lake.deltatable import head

    return head(uri, plan.store(uri), limit)


def _sink_rows(plan: Plan, name: str, limit: int) -> Any:
    """The first rows a sink delivered, read back without Spark where its connector can
    (Sink.preview); None before its first delivery, and for sinks whose preview is their
    input, computed by Spark."""
    from ..plane.base import Can, SinkContext
    from ..plane.registry import sink_for

    sink = plan.project.sinks[name]
    ctx = SinkContext(plan.root, plan.manifest.project, name, plan.profile.storage)
    target = sink_for(sink.spec.connector, sink.config, ctx)
    return target.preview(limit) if Can.PREVIEW in target.can else None
