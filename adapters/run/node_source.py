"""Source nodes: a database table extracted into its landing table, any other source read by its
connector and registered as the view `source()` names."""

from __future__ import annotations

import os

from rivc.compiler.errors import ConnectorError
from rivc.compiler.manifest import ManifestNode

from ..state import NodeResult
from .runtime import Runtime


def run_source(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    source = rt.plan.project.sources[node.name]
    if source.connector.relational:
        from ..connectors.relational import Conn
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
            )
        )
        if done.result.status == "success" and done.batch is not None:
            rt.landed_view(nid, done.batch)
        return done.result
    df = rt.source_df(node)
    df.createOrReplaceTempView(node.relation)
    return NodeResult(nid, "source", "success", schema=rt.schema_of(nid, df))
