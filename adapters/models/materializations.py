"""Model and seed nodes, one class per materialization (snapshots: snapshot.py): an ephemeral model is inlined by compile; a view is
its SQL; a table is replaced and an incremental model appended or merged, each in one Delta
commit of the warehouse (plane/deltatable) stamped with the model's batch id.

Each class builds its model in a run (`build`) and, for an unselected model a selected one reads,
makes its relation available without building it (`bind`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from rivc.compiler.emit.manifest import ManifestNode
from rivc.compiler.errors import ConnectorError, StateError
from rivc.compiler.materializations import INCREMENTAL

from ..lake import deltamerge, deltatable
from ..plane.base import WriteResult
from ..run.runtime import Runtime
from ..state import NodeResult
from ..util.faults import fault
from ..util.storage import join

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


class Materialization(ABC):
    """How a model (or seed, or snapshot) is built in a run, and made available unbuilt to the
    selected nodes that read it: one class per entry of MATERIALIZATIONS
    (compiler/materializations.py), which names it."""

    @abstractmethod
    def build(self, rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
        """Build the node in this run."""

    @abstractmethod
    def bind(self, rt: Runtime, node: ManifestNode) -> None:
        """An unselected node's relation, for the selected nodes that read it."""


class Ephemeral(Materialization):
    def build(self, rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
        return NodeResult(nid, "model", "success", message="ephemeral: inlined")

    def bind(self, rt: Runtime, node: ManifestNode) -> None:
        pass  # compile inlined it into every model that reads it


class View(Materialization):
    """A view: registered now when Spark runs, else, when a node of the run reads it, once a
    node first needs Spark (a run whose tables are all reused starts none)."""

    def build(self, rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
        sql = rt.plan.sql(nid)
        if rt.later(nid):
            rt.view(node.name, lambda spark: _view(spark, node, sql))
            return NodeResult(nid, "model", "success", message="view")
        df = rt.spark.sql(sql)
        df.createOrReplaceTempView(node.name)
        return NodeResult(nid, "model", "success", schema=rt.schema_of(nid, df), message="view")

    def bind(self, rt: Runtime, node: ManifestNode) -> None:
        rt.spark.sql(rt.plan.sql(node.id)).createOrReplaceTempView(node.name)


def _view(spark: SparkSession, node: ManifestNode, sql: str) -> DataFrame:
    """A view registered after its node ran: an error in it names the view."""
    from pyspark.errors import PySparkException

    from ..util.errortext import spark_message

    try:
        return spark.sql(sql)
    except PySparkException as exc:
        raise ConnectorError(f"view {node.name} ({node.path}): {spark_message(exc)}") from None


class Table(Materialization):
    """A table model: its whole result replaces the table, stamped with the model's batch id (a
    resumed run skips the batch a killed one committed) and with what it was built from
    (inputs.py): a table that holds what its SQL gives over its inputs as they are now is
    reused, not built again (--full-refresh builds it)."""

    def build(self, rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
        uri = rt.table_uri(node)
        store = rt.plan.store(uri)
        table = deltatable.open_table(uri, store.delta)
        built = self.built_from(rt, node)
        if table is not None and built is not None and not rt.full_refresh:
            if _recorded(table) == built:
                rt.view(node.name, lambda spark: deltatable.read(spark, uri, store))
                return NodeResult(nid, node.kind, "success", message=self.REUSED)
        grows = self.grows(rt, table)
        if grows:
            deltatable.read(rt.spark, uri, store).createOrReplaceTempView(node.name)  # {{ this }}
        df = self.frame(rt, node, grows)
        if df.isStreaming:
            raise ConnectorError(
                f"model {node.name!r} reads a stream: materialize it as a view and deliver it "
                "with a sink"
            )
        if node.config.get("contract"):  # dbt's enforced contract, before anything is written
            from .contracts import enforce

            enforce(node.name, df, node.config["contract"])
        schema = rt.schema_of(nid, df)
        app_id = rt.model_app(node.name)
        last = None if table is None else table.transaction_version(app_id)
        batch_id = rt.hand_out(nid, None if last is None else int(last))
        stamp = deltatable.Stamp(((app_id, batch_id),), {BUILT_FROM: built} if built else None)
        if last is not None and int(last) >= batch_id:  # a resumed run: this batch is in
            how, result = "already committed by the killed run", WriteResult()
        else:
            how, result = self.write(rt, node, df, table if grows else None, stamp)
        fault("after-commit", node.name)
        deltatable.read(rt.spark, uri, store).createOrReplaceTempView(node.name)
        return NodeResult(
            nid,
            node.kind,
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

    REUSED = "reused: its SQL and inputs are unchanged"
    WRITTEN = "table"  # what a run that writes the whole table says

    def built_from(self, rt: Runtime, node: ManifestNode) -> str | None:
        """What the table is built from now (inputs.py); None: build it whatever it holds."""
        from .inputs import built_from

        return built_from(rt, node.id)

    def frame(self, rt: Runtime, node: ManifestNode, grows: bool) -> DataFrame:
        """What this run writes: the model's SQL (its is_incremental() variant when it grows),
        or a Python model's DataFrame."""
        if node.config.get("language") == "python":
            from .pymodel import python_frame

            return python_frame(rt, node, grows)
        return rt.spark.sql(rt.plan.sql(node.id, INCREMENTAL if grows else None))

    def grows(self, rt: Runtime, table: DeltaTable | None) -> bool:
        """Whether this run adds to the table rather than replacing it."""
        return False

    def write(
        self,
        rt: Runtime,
        node: ManifestNode,
        df: DataFrame,
        grown: DeltaTable | None,
        stamp: deltatable.Stamp,
    ) -> tuple[str, WriteResult]:
        """Commit what this run wrote (`grown`: the table this run adds to, None when it
        replaces it); returns the node's message and what was written."""
        uri = rt.table_uri(node)
        result = deltatable.write_batch(
            df,
            uri,
            rt.plan.store(uri),
            "replace",
            deltatable.arrow_schema(df),
            node.model_config.partition_by if node.kind == "model" else (),
            stamp,
        )
        return self.WRITTEN, result

    def bind(self, rt: Runtime, node: ManifestNode) -> None:
        """An unselected table: this warehouse's, else (--defer) the --state run's."""
        uri = rt.table_uri(node)
        store = rt.plan.store(uri)
        if deltatable.open_table(uri, store.delta) is None and rt.defer_to is not None:
            uri = join(rt.defer_to, node.name)
            store = rt.plan.store(uri)
        if deltatable.open_table(uri, store.delta) is None:
            how = f"rivc {node.materialization.command}"
            where = "" if rt.defer_to is None else f" (here or in the deferred {rt.defer_to})"
            raise StateError(
                f"{node.kind} {node.name!r} has not been built yet{where}; "
                f"run `{how} --select +{node.name}` first"
            )
        rt.view(node.name, lambda spark: deltatable.read(spark, uri, store))


class Incremental(Table, ABC):
    """An incremental model: its first run (and --full-refresh) builds the table; later runs
    add the rows its `is_incremental()` SQL selects, the table's schema reconciled by
    `on_schema_change`, committed as its strategy commits them (`commit`)."""

    def grows(self, rt: Runtime, table: DeltaTable | None) -> bool:
        return table is not None and not rt.full_refresh

    def built_from(self, rt: Runtime, node: ManifestNode) -> str | None:
        return None  # each run adds what its SQL selects: always run

    def write(
        self,
        rt: Runtime,
        node: ManifestNode,
        df: DataFrame,
        grown: DeltaTable | None,
        stamp: deltatable.Stamp,
    ) -> tuple[str, WriteResult]:
        if grown is None:
            return super().write(rt, node, df, grown, stamp)
        table = grown
        uri = rt.table_uri(node)
        store = rt.plan.store(uri)
        parts = tuple(table.metadata().partition_columns)
        given = node.model_config.partition_by
        if given and tuple(given) != parts:
            raise ConnectorError(
                f"model {node.name!r}: partition_by {list(given)} differs from its "
                f"table's {list(parts)}; run with --full-refresh to rebuild it"
            )
        on_change = node.model_config.on_schema_change
        df, target = deltatable.reconcile(df, table, on_change, f"model {node.name!r}")
        gone = [n for n in deltatable.table_schema(table).names if n not in target.names]
        if gone:  # sync_all_columns: the model no longer has them
            deltatable.drop_columns(rt.spark, uri, store, gone)
            parts = tuple(p for p in parts if p not in gone)
        return self.commit(rt, node, df, target, parts, stamp)

    @abstractmethod
    def commit(
        self,
        rt: Runtime,
        node: ManifestNode,
        df: DataFrame,
        target: pa.Schema,
        parts: tuple[str, ...],
        stamp: deltatable.Stamp,
    ) -> tuple[str, WriteResult]:
        """Commit the rows this run adds, in the table's reconciled schema `target`."""


class Append(Incremental):
    """The new rows added to the table in one commit."""

    MODE, HOW = "append", "incremental append"  # deltatable.commit's mode; the node's message

    def commit(
        self,
        rt: Runtime,
        node: ManifestNode,
        df: DataFrame,
        target: pa.Schema,
        parts: tuple[str, ...],
        stamp: deltatable.Stamp,
    ) -> tuple[str, WriteResult]:
        uri = rt.table_uri(node)
        store = rt.plan.store(uri)
        result = deltatable.write_batch(df, uri, store, self.MODE, target, parts, stamp)
        return self.HOW, result


class InsertOverwrite(Append):
    """dbt's insert_overwrite: the partitions the new rows fall in are replaced by them, the
    others kept; a table without partition_by is replaced whole. One commit either way."""

    MODE, HOW = "replace_partitions", "incremental insert_overwrite"


class Merge(Incremental):
    def commit(
        self,
        rt: Runtime,
        node: ManifestNode,
        df: DataFrame,
        target: pa.Schema,
        parts: tuple[str, ...],
        stamp: deltatable.Stamp,
    ) -> tuple[str, WriteResult]:
        uri = rt.table_uri(node)
        result = deltamerge.merge(df, uri, rt.plan.store(uri), node.unique_key, target, stamp)
        return f"incremental merge, {result.removed} files rewritten", result


class Seed(Table):
    """A seed: its CSV file, read as compile read it (compiler/loading/seeds.py), each column cast to
    its type by Spark's tasks (a value a type cannot hold fails the seed, naming it), replaces
    its table. Each commit records which file and types it holds: a table that already holds
    them is reused (--full-refresh loads it again)."""

    REUSED = "unchanged: its table holds it"

    def built_from(self, rt: Runtime, node: ManifestNode) -> str | None:
        return _content(node)

    def frame(self, rt: Runtime, node: ManifestNode, grows: bool) -> DataFrame:
        import pyarrow as pa

        from rivc.compiler.loading.seeds import read_csv
        from rivc.compiler.sql import quote

        path = rt.plan.root / node.path
        text = path.read_bytes().decode("utf-8")  # "\r\n" inside quotes is a value's own
        data = read_csv(text, path, node.config.get("delimiter", ","))
        types = node.columns or {}
        columns = [f"_{i}" for i in range(len(data.header))]  # any header, any case
        text = pa.table(
            {c: pa.array(v, pa.string()) for c, v in zip(columns, data.columns, strict=True)}
        )
        raw = rt.spark.createDataFrame(text)
        return raw.selectExpr(
            *(
                f"CAST({c} AS {types.get(name) or 'string'}) AS {quote(name)}"
                for c, name in zip(columns, data.header, strict=True)
            )
        )


def _content(node: ManifestNode) -> str:
    """A seed's file and column types, as one hash."""
    import hashlib
    import json

    text = json.dumps([node.checksum, node.columns], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


BUILT_FROM = "built_from"  # in a table's commit: what it was built from


def _recorded(table: DeltaTable) -> str | None:
    """What the table's newest commit says it was built from."""
    import json

    for entry in table.history(limit=1):
        given = entry.get("rivc")
        if given:
            return str(json.loads(given).get(BUILT_FROM) or "") or None
    return None


class Microbatch(Table):
    """dbt's microbatch: one batch per period of the model's `batch_size`, each reading its
    parents through its period and replacing the rows of its period in the table, in a commit
    of its own (compiler/microbatch.py says which batches a run builds). A batch is the same
    whenever it is built again, so a run killed between batches is run again whole; the model's
    batch id is stamped on the last batch's commit when every batch succeeded. A batch that
    fails fails the model, naming its period; the others are committed."""

    def build(self, rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
        from datetime import UTC, datetime

        from rivc.compiler import microbatch as mb

        cfg = node.config
        uri = rt.table_uri(node)
        store = rt.plan.store(uri)
        table = deltatable.open_table(uri, store.delta)
        whole = table is None or rt.full_refresh
        start, end = rt.event_times
        windows = mb.windows(
            cfg["batch_size"],
            mb.as_time(cfg["begin"], "begin"),
            int(cfg.get("lookback", 1)),
            whole,
            datetime.now(UTC),
            start,
            end,
        )
        app_id = rt.model_app(node.name)
        last = None if table is None else table.transaction_version(app_id)
        batch_id = rt.hand_out(nid, None if last is None else int(last))
        if last is not None and int(last) >= batch_id:  # a resumed run: its batches are in
            deltatable.read(rt.spark, uri, store).createOrReplaceTempView(node.name)
            return NodeResult(
                nid, node.kind, "success", message="already committed by the killed run"
            )
        if not whole:
            deltatable.read(rt.spark, uri, store).createOrReplaceTempView(node.name)  # {{ this }}
        sql = rt.plan.sql(nid, None if whole else INCREMENTAL)
        parents = {
            p.source.relation if p.kind == "source" else p.name: str(p.config["event_time"])
            for p in (rt.plan.nodes[d] for d in node.depends_on)
            if p.kind in ("model", "seed", "source") and p.config.get("event_time")
        }
        done: list[list[str]] = []
        failed: list[tuple[list[str], str]] = []
        total, schema = WriteResult(), None
        for i, window in enumerate(windows):
            span = [w.isoformat() for w in window]
            final = i == len(windows) - 1 and not failed
            stamp = deltatable.Stamp(((app_id, batch_id),) if final else ())
            try:
                df = rt.spark.sql(mb.filtered(sql, parents, window))
                if cfg.get("contract"):
                    from .contracts import enforce

                    enforce(node.name, df, cfg["contract"])
                if schema is None:
                    schema = rt.schema_of(nid, df)
                if table is None or (whole and i == 0):  # the table begins with the first batch
                    parts = node.model_config.partition_by
                    result = deltatable.write_batch(
                        df, uri, store, "replace", deltatable.arrow_schema(df), parts, stamp
                    )
                else:
                    df, target = deltatable.reconcile(
                        df, table, node.model_config.on_schema_change, f"model {node.name!r}"
                    )
                    column = str(cfg["event_time"])
                    result = deltamerge.replace_window(
                        df, uri, store, column, window, target, stamp
                    )
                table = deltatable.open_table(uri, store.delta)
            except Exception as exc:  # noqa: BLE001  (the batch fails; the others go on)
                failed.append(
                    (
                        span,
                        str(exc).strip().splitlines()[0]
                        if str(exc).strip()
                        else type(exc).__name__,
                    )
                )
                continue
            fault("between-batches", node.name)
            done.append(span)
            total.rows += result.rows
            total.bytes += result.bytes
            total.files += result.files
            total.retries += result.retries
            total.commits += result.commits
            total.commit_s += result.commit_s
        if table is not None:
            deltatable.read(rt.spark, uri, store).createOrReplaceTempView(node.name)
        how = f"microbatch, {len(done)} of {len(windows)} batches of a {cfg['batch_size']}"
        error = None
        if failed:
            error = f"{len(failed)} of {len(windows)} batches failed: " + "; ".join(
                f"[{s}, {e}): {why}" for (s, e), why in failed[:3]
            )
        return NodeResult(
            nid,
            node.kind,
            "error" if failed else "success",
            rows=total.rows,
            bytes=total.bytes,
            files=len(total.files),
            retries=total.retries,
            schema=schema,
            message=how,
            error=error,
            commits=total.commits,
            commit_ms=total.commit_s * 1000,
            batches={"successful": done, "failed": [span for span, _ in failed]},
        )
