"""Model nodes, one way per materialization: a view is its SQL; a table is replaced and an
incremental model appended or merged in one Delta commit, with the model's batch id."""

from __future__ import annotations

from rivc.compiler.errors import ConnectorError
from rivc.compiler.manifest import ManifestNode

from ..plane import deltamerge, deltatable
from ..plane.base import WriteResult
from ..state import NodeResult
from ..util.faults import fault
from .runtime import Runtime


def run_model(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    name, mat = node.name, node.materialized
    if mat == "ephemeral":
        return NodeResult(nid, "model", "success", message="ephemeral: inlined")
    if mat == "view":
        df = rt.spark.sql(rt.plan.sql(nid))
        df.createOrReplaceTempView(name)
        return NodeResult(nid, "model", "success", schema=rt.schema_of(nid, df), message="view")
    uri = rt.table_uri(node)
    store = rt.plan.store(uri)
    table = deltatable.open_table(uri, store.delta)
    incremental = mat == "incremental" and not rt.full_refresh and table is not None
    if incremental:
        deltatable.read(rt.spark, uri, store).createOrReplaceTempView(name)  # {{ this }}
        df = rt.spark.sql(rt.plan.sql(nid, incremental=True))
    else:
        df = rt.spark.sql(rt.plan.sql(nid))
    if df.isStreaming:
        raise ConnectorError(
            f"model {name!r} reads a stream: materialize it as a view and deliver it with a sink"
        )
    schema = rt.schema_of(nid, df)
    config = node.model_config
    app_id = rt.model_app(name)
    last = None if table is None else table.transaction_version(app_id)
    batch_id = rt.hand_out(nid, None if last is None else int(last))
    if last is not None and int(last) >= batch_id:  # a resumed run: this batch is in
        how = "already committed by the killed run"
        result = WriteResult()
    elif not incremental:
        result = deltatable.write_batch(
            df,
            uri,
            store,
            "replace",
            deltatable.arrow_schema(df),
            config.partition_by,
            deltatable.Stamp.batch(app_id, batch_id),
        )
        how = "table"
    else:
        assert table is not None
        parts = tuple(table.metadata().partition_columns)
        if config.partition_by and tuple(config.partition_by) != parts:
            raise ConnectorError(
                f"model {name!r}: partition_by {list(config.partition_by)} differs from its "
                f"table's {list(parts)}; run with --full-refresh to rebuild it"
            )
        df, target = deltatable.reconcile(df, table, config.on_schema_change, f"model {name!r}")
        gone = [n for n in deltatable.table_schema(table).names if n not in target.names]
        if gone:  # sync_all_columns: the model no longer has them
            deltatable.drop_columns(rt.spark, uri, store, gone)
            parts = tuple(p for p in parts if p not in gone)
        strategy = node.incremental_strategy
        if strategy == "merge":
            stamp = deltatable.Stamp.batch(app_id, batch_id)
            result = deltamerge.merge(df, uri, store, node.unique_key, target, stamp)
            how = f"incremental merge, {result.removed} files rewritten"
        else:
            result = deltatable.write_batch(
                df,
                uri,
                store,
                "append",
                target,
                parts,
                deltatable.Stamp.batch(app_id, batch_id),
            )
            how = "incremental append"
    fault("after-commit", name)
    deltatable.read(rt.spark, uri, store).createOrReplaceTempView(name)
    return NodeResult(
        nid,
        "model",
        "success",
        rows=result.rows,
        bytes=result.bytes,
        files=len(result.files),
        retries=result.retries,
        schema=schema,
        message=how,
        commits=result.commits,
        commit_ms=result.commit_s * 1000,
    )
