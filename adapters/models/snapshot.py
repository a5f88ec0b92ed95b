"""dbt snapshots: a model's rows kept as history, type 2 (docs/dbt.md, "Snapshots").

Each run compares the snapshot's query (the source's state now) with the table's current rows
(`dbt_valid_to` is NULL), by `unique_key`:
- `timestamp` strategy: a row changed when its `updated_at` is newer than the current version's;
  the new version is valid from that `updated_at`;
- `check` strategy: a row changed when one of `check_cols` (or any column, `all`) differs (NULL
  equals NULL); the new version is valid from the run's time.
The current version of a changed row is closed (`dbt_valid_to` = the new version's start), the new
one inserted; keys the query no longer has are closed at the run's time (`hard_deletes:
invalidate`) or also get a row marked deleted (`new_record`, column `dbt_is_deleted`). The
closed and new versions are one batch merged by `dbt_scd_id` in one Delta commit by Spark's
tasks, stamped with the snapshot's batch id: a run killed after its commit is not applied twice.
`dbt_scd_id` is dbt's: md5 of the key and `updated_at` (or the run's time), joined by `|`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rivc.compiler.emit.manifest import ManifestNode
from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import literal, quote

from ..lake import deltamerge, deltatable
from ..plane.base import WriteResult
from ..run.runtime import Runtime
from ..state import NodeResult
from .materializations import Table

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

META = ("dbt_scd_id", "dbt_updated_at", "dbt_valid_from", "dbt_valid_to")
DELETED = "dbt_is_deleted"


class Snapshot(Table):
    WRITTEN = "snapshot: every row's first version"
    views: Views | None = None

    def build(self, rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
        try:
            return super().build(rt, nid, node)
        finally:  # a warm server's session outlives the run: leave no view behind
            if self.views is not None:
                for view in (self.views.source, self.views.table):
                    rt.spark.catalog.dropTempView(view)

    def grows(self, rt: Runtime, table: DeltaTable | None) -> bool:
        return table is not None and not rt.full_refresh

    def built_from(self, rt: Runtime, node: ManifestNode) -> str | None:
        return None  # a run's changes are stamped with its time: always run

    def frame(self, rt: Runtime, node: ManifestNode, grows: bool) -> DataFrame:
        """The first run's rows: every row of the query as its first version."""
        source = rt.spark.sql(rt.plan.sql(node.id))
        _check(node, source.columns)
        self.now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        # temp views of this build alone: snapshots built at once (--threads) share a session
        self.views = Views(f"__rivc_snapshot_{uuid.uuid4().hex}")
        if grows:
            return source  # write() compares it with the table
        source.createOrReplaceTempView(self.views.source)
        return rt.spark.sql(_first_versions(node, source.columns, self.now, self.views))

    def write(
        self,
        rt: Runtime,
        node: ManifestNode,
        df: DataFrame,
        grown: DeltaTable | None,
        stamp: deltatable.Stamp,
    ) -> tuple[str, WriteResult]:
        if grown is None:  # the first run: every row's first version
            return super().write(rt, node, df, grown, stamp)
        table = grown
        uri = rt.table_uri(node)
        store = rt.plan.store(uri)
        views = self.views
        assert views is not None  # frame() named them
        df.createOrReplaceTempView(views.source)
        deltatable.read(rt.spark, uri, store).createOrReplaceTempView(views.table)
        batch = rt.spark.sql(_changes(node, df.columns, self.now, views))
        target: pa.Schema = deltatable.table_schema(table)
        batch, target = deltatable.reconcile(
            batch, table, "append_new_columns", f"snapshot {node.name!r}"
        )
        result = deltamerge.merge(batch, uri, store, ("dbt_scd_id",), target, stamp)
        return f"snapshot, {result.rows} versions closed or added", result


@dataclass(frozen=True)
class Views:
    """The temp views one build of a snapshot reads: its query's rows, and its table."""

    prefix: str

    @property
    def source(self) -> str:
        return f"{self.prefix}_source"

    @property
    def table(self) -> str:
        return f"{self.prefix}_table"


def _check(node: ManifestNode, columns: list[str]) -> None:
    cfg = node.model_config
    where = f"snapshot {node.name!r}"
    if not cfg.unique_key:
        raise ConnectorError(f"{where}: needs unique_key")
    strategy = cfg.strategy or ("timestamp" if cfg.updated_at else None)
    if strategy is None:
        raise ConnectorError(f"{where}: needs strategy: timestamp (with updated_at) or check")
    if strategy == "timestamp" and not cfg.updated_at:
        raise ConnectorError(f"{where}: strategy timestamp needs updated_at")
    if strategy == "check" and not cfg.check_cols:
        raise ConnectorError(f"{where}: strategy check needs check_cols (a list, or 'all')")
    for col in (*cfg.unique_key, *([cfg.updated_at] if strategy == "timestamp" else [])):
        if col not in columns:
            raise ConnectorError(f"{where}: {col!r} is not a column of its query")


def _key(alias: str, node: ManifestNode) -> str:
    parts = [f"coalesce(cast({alias}.{quote(k)} as string), '')" for k in node.unique_key]
    return " || '|' || ".join(parts)


def _start(alias: str, node: ManifestNode, now: dt.datetime) -> str:
    """When a version starts: its updated_at (timestamp strategy), else the run's time."""
    cfg = node.model_config
    if (cfg.strategy or "timestamp") == "timestamp" and cfg.updated_at:
        return f"cast({alias}.{quote(cfg.updated_at)} as timestamp)"
    return literal(now)


def _scd_id(alias: str, node: ManifestNode, now: dt.datetime) -> str:
    return (
        f"md5({_key(alias, node)} || '|' || "
        f"coalesce(cast({_start(alias, node, now)} as string), ''))"
    )


def _deletes(node: ManifestNode) -> str:
    cfg = node.model_config
    return "invalidate" if cfg.invalidate_hard_deletes else cfg.hard_deletes


def _versions(node: ManifestNode, columns: list[str], now: dt.datetime, deleted: str) -> str:
    cols = ", ".join(f"s.{quote(c)}" for c in columns)
    start = _start("s", node, now)
    extra = f", {literal(deleted)} AS {DELETED}" if _deletes(node) == "new_record" else ""
    return (
        f"{cols}, {_scd_id('s', node, now)} AS dbt_scd_id, {start} AS dbt_updated_at, "
        f"{start} AS dbt_valid_from, CAST(NULL AS timestamp) AS dbt_valid_to{extra}"
    )


def _first_versions(node: ManifestNode, columns: list[str], now: dt.datetime, views: Views) -> str:
    return f"SELECT {_versions(node, columns, now, 'False')} FROM {views.source} s"


def _changed(node: ManifestNode, columns: list[str]) -> str:
    cfg = node.model_config
    if (cfg.strategy or "timestamp") == "timestamp" and cfg.updated_at:
        col = quote(cfg.updated_at)
        return f"cast(s.{col} as timestamp) > t.dbt_updated_at"
    checked = columns if cfg.check_cols == "all" else list(cfg.check_cols)
    keys = set(node.unique_key)
    return " OR ".join(f"NOT (s.{quote(c)} <=> t.{quote(c)})" for c in checked if c not in keys)


def _changes(node: ManifestNode, columns: list[str], now: dt.datetime, views: Views) -> str:
    """One batch: the versions a run closes (their rows with dbt_valid_to set) and adds."""
    on = " AND ".join(f"s.{quote(k)} <=> t.{quote(k)}" for k in node.unique_key)
    current = f"SELECT * FROM {views.table} WHERE dbt_valid_to IS NULL"
    source = views.source
    deletes = _deletes(node)
    live = f" AND coalesce(t.{DELETED}, 'False') = 'False'" if deletes == "new_record" else ""
    gone = f" AND coalesce(t.{DELETED}, 'False') = 'True'" if deletes == "new_record" else ""
    table_cols = [*columns, *META] + ([DELETED] if deletes == "new_record" else [])

    def closing(end: str) -> str:
        """A current version's columns, closed at `end`."""
        return ", ".join(
            f"{end} AS dbt_valid_to" if c == "dbt_valid_to" else f"t.{quote(c)}" for c in table_cols
        )

    closed_cols = closing(_start("s", node, now))  # where the new version starts
    parts = [
        # a changed row: its current version closes where the new one starts
        f"SELECT {closed_cols} FROM __rivc_current t JOIN {source} s ON {on} "
        f"WHERE ({_changed(node, columns)}){live}",
        f"SELECT {_versions(node, columns, now, 'False')} FROM {source} s "
        f"JOIN __rivc_current t ON {on} WHERE ({_changed(node, columns)}){live}",
        # a new key, or one that comes back after it was marked deleted
        f"SELECT {_versions(node, columns, now, 'False')} FROM {source} s "
        f"LEFT ANTI JOIN (SELECT * FROM __rivc_current t WHERE TRUE{live}) t ON {on}",
    ]
    if deletes == "new_record":  # a key marked deleted that comes back: its marker closes
        parts.append(
            f"SELECT {closed_cols} FROM __rivc_current t JOIN {source} s ON {on} WHERE TRUE{gone}"
        )
    if deletes in ("invalidate", "new_record"):  # a key the query lost closes now
        parts.append(
            f"SELECT {closing(literal(now))} FROM __rivc_current t "
            f"LEFT ANTI JOIN {source} s ON {on} WHERE TRUE{live}"
        )
    if deletes == "new_record":
        marked = ", ".join(_deleted_col(c, now, node) for c in table_cols)
        parts.append(
            f"SELECT {marked} FROM __rivc_current t LEFT ANTI JOIN {source} s "
            f"ON {on} WHERE TRUE{live}"
        )
    union = "\nUNION ALL\n".join(f"({p})" for p in parts)
    return f"WITH __rivc_current AS ({current})\nSELECT * FROM ({union})"


def _deleted_col(col: str, now: dt.datetime, node: ManifestNode) -> str:
    """A row that marks a key deleted: the last values, valid from the run's time."""
    stamp = literal(now)
    if col == "dbt_scd_id":
        return f"md5({_key('t', node)} || '|' || cast({stamp} as string)) AS dbt_scd_id"
    if col in ("dbt_updated_at", "dbt_valid_from"):
        return f"{stamp} AS {col}"
    if col == "dbt_valid_to":
        return "CAST(NULL AS timestamp) AS dbt_valid_to"
    if col == DELETED:
        return f"'True' AS {DELETED}"
    return f"t.{quote(col)}"
