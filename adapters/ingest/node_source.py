"""Source nodes: a database table extracted into its landing table, any other source read by its
connector and registered as the view `source()` names. `bind` gives an unselected source's view
to the selected nodes that read it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from rivc.compiler.emit.manifest import ManifestNode
from rivc.compiler.errors import ConnectorError

from ..delivery.sinkwriter import transform_source
from ..models.inputs import pure_source
from ..plane.base import SourceContext
from ..plane.registry import read_source
from ..run.runtime import Runtime
from ..state import NodeResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .extract import Extraction


def run_source(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    source = rt.plan.project.sources[node.name]
    if source.connector.log:
        done = run_log(rt, nid, node)
        if done.result.status == "success" and done.batch is not None:
            landed_view(rt, nid, done.batch, lazy=True)
        return done.result
    if source.connector.relational:
        from ..connectors.database.engine import Conn
        from .extract import ExtractContext, extract

        spec = rt.plan.profile.connections.get(source.source.connection or "")
        if spec is None:
            raise ConnectorError(
                f"source {node.name}: connection {source.source.connection!r} is not in the profile"
            )
        done = extract(
            ExtractContext(
                nid=nid,
                name=node.name,
                table=source.table,
                conn=Conn.resolve(spec, os.environ),
                tuning=source.source.tuning.resolved(),
                query=rt.plan.sql(nid),
                landing=rt.landing(nid),
                state=rt.state,
                run_id=rt.run_id,
                full_refresh=rt.full_refresh,
                resume_from=rt.resume_from,
                spark=lambda: rt.spark,
                validate=rt.validate,
            )
        )
        if done.result.status == "success" and done.batch is not None:
            landed_view(rt, nid, done.batch, lazy=True)
        return done.result
    if rt.later(nid) and pure_source(rt, nid):  # read when a node first needs Spark
        rt.view(node.relation, lambda spark: source_df(rt, node))
        return NodeResult(nid, "source", "success")
    df = source_df(rt, node)
    df.createOrReplaceTempView(node.relation)
    return NodeResult(nid, "source", "success", schema=rt.schema_of(nid, df))


def run_log(rt: Runtime, nid: str, node: ManifestNode) -> Extraction:
    """A change-log table: its changes landed by the change-log driver (changelog.py)."""
    from .changelog import LogContext, source_log

    table = rt.plan.project.sources[node.name]
    name = table.source.name
    log, source = source_log(rt.plan, name)
    siblings = sorted(f for f, t in rt.plan.project.sources.items() if t.source.name == name)
    return log.land(
        LogContext(
            nid=nid,
            name=node.name,
            table=table.table,
            source=source,
            landing=rt.landing(nid),
            siblings=[rt.landing(f"source:{fqn}") for fqn in siblings],
            readers={
                rt.plan.project.sources[fqn].table.table or "": rt.landing(f"source:{fqn}")
                for fqn in siblings
                if f"source:{fqn}" in rt.running
            },
            run_id=rt.run_id,
            full_refresh=rt.full_refresh,
            resume_from=rt.resume_from,
        )
    )


def bind(rt: Runtime, nid: str) -> None:
    """An unselected source's view: an extracted table as landed so far (the database's table
    as it is now when it was never extracted); any other source as its connector reads it."""
    node = rt.plan.nodes[nid]
    if rt.plan.is_extracted(nid):
        batch = rt.landing(nid).position().batch
        if batch is not None:
            landed_view(rt, nid, batch)
            return
    if pure_source(rt, nid):
        rt.view(node.relation, lambda spark: source_df(rt, node))
        return
    source_df(rt, node).createOrReplaceTempView(node.relation)


def landed_view(rt: Runtime, nid: str, batch: int | None, lazy: bool = False) -> None:
    """`source()` of an extracted table: its landing table as of `batch`; `lazy`: made when a
    node reading it starts (rt.landed: listing every file of a growing table each pass of a
    followed log made the pass slower as the table grew)."""
    from .extract import source_frame

    node = rt.plan.nodes[nid]
    table = rt.plan.project.sources[node.name].table
    landing = rt.landing(nid)
    columns = landing.position().columns

    def make(spark: SparkSession) -> DataFrame:
        return source_frame(landing.whole(spark, batch, columns), table)

    if lazy:
        with rt.lock:
            rt.landed[nid] = lambda: rt.view(node.relation, make)
        return
    rt.view(node.relation, make)


def source_df(rt: Runtime, node: ManifestNode) -> DataFrame:
    """A source table as its connector reads it (plane/registry names the reader), with the
    table's transforms."""
    source = rt.plan.project.sources[node.name]
    relational = source.connector.relational
    ctx = SourceContext(
        node.name,
        rt.plan.manifest.project,
        rt.plan.root,
        source.config,
        dict(source.table.columns),
        rt.plan.sql(f"source:{node.name}") if relational else None,
        rt.plan.profile.connections.get(source.source.connection or ""),
        source.source.tuning.resolved() if relational else {},
        rt.plan.profile.storage,
    )
    return transform_source(read_source(rt.spark, source.connector, ctx), source.table.transforms)
