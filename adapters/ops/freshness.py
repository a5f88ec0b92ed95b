"""`rivc source freshness`: how old each source table's newest data is, against its
`freshness` thresholds, as dbt's command. Measured without Spark:

- a PostgreSQL or MySQL table with `loaded_at_field`: `max(field)` in the database, over the
  table's extraction query (and `freshness.filter`);
- a Delta source (a dbt source's `external` Delta table) with `loaded_at_field`: the column's
  maximum, read with delta-rs;
- a table rivc extracts, without `loaded_at_field`: when its newest batch landed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from rivc.compiler.errors import RivcError
from rivc.compiler.loading.specs import Freshness
from rivc.compiler.registry import connector

from ..connectors.database.engine import Conn, connection, driver_errors
from ..plane.registry import newest

NEVER = datetime(1, 1, 1, tzinfo=UTC)  # dbt's max_loaded_at of a table with no rows


@dataclass
class Measured:
    node: str
    status: str  # pass | warn | error | runtime error
    max_loaded_at: datetime | None
    snapshotted_at: datetime
    criteria: dict[str, Any]
    error: str | None = None
    took_s: float = 0.0

    @property
    def age_s(self) -> float | None:
        if self.max_loaded_at is None:
            return None
        return (self.snapshotted_at - self.max_loaded_at).total_seconds()

    def to_json(self, project: str) -> dict[str, Any]:
        """Its result in dbt's sources.json (v3): a table with no rows (or never landed) is
        `max_loaded_at` 0001-01-01, as dbt reports one."""
        uid = f"source.{project}.{self.node.removeprefix('source:')}"
        if self.status == "runtime error":
            return {"unique_id": uid, "error": self.error, "status": self.status}
        newest = self.max_loaded_at or NEVER
        return {
            "unique_id": uid,
            "max_loaded_at": newest.isoformat(),
            "snapshotted_at": self.snapshotted_at.isoformat(),
            "max_loaded_at_time_ago_in_s": (self.snapshotted_at - newest).total_seconds(),
            "status": self.status,
            "criteria": self.criteria,
            "adapter_response": {},
            "timing": [],
            "thread_id": "main",
            "execution_time": self.took_s,
        }


def measure(runtime: Any, nids: list[str]) -> list[Measured]:
    """Each source table among `nids` that has a `freshness` setting, measured now."""
    plan = runtime.plan
    out = []
    for nid in nids:
        node = plan.nodes[nid]
        if node.kind != "source" or not node.source.freshness:
            continue
        given = node.source.freshness
        now = datetime.now(UTC)
        try:
            rule = Freshness.model_validate(given.get("freshness") or {})
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            out.append(
                Measured(
                    nid, "runtime error", None, now, {}, f"freshness.{where}: {problem['msg']}"
                )
            )
            continue
        criteria = rule.model_dump(mode="json", exclude_none=True)
        if rule.warn_after is None and rule.error_after is None:
            continue  # `freshness: null` turns it off, as in dbt
        failures: tuple[type[BaseException], ...] = (RuntimeError, RivcError, *driver_errors())
        began = time.perf_counter()
        try:
            newest = _newest(runtime, nid, given.get("loaded_at_field"), rule.filter)
        except failures as exc:
            out.append(Measured(nid, "runtime error", None, now, criteria, str(exc).strip()))
            continue
        status = "pass"
        if newest is None:
            status = "error" if rule.error_after else "warn"
        else:
            age = (now - newest).total_seconds()
            if rule.error_after and age > rule.error_after.seconds():
                status = "error"
            elif rule.warn_after and age > rule.warn_after.seconds():
                status = "warn"
        out.append(Measured(nid, status, newest, now, criteria, took_s=time.perf_counter() - began))
    return out


def _newest(runtime: Any, nid: str, field: str | None, where: str | None) -> datetime | None:
    plan = runtime.plan
    node = plan.nodes[nid]
    facts = node.source
    if field is None:
        if not plan.is_extracted(nid):
            raise RuntimeError(
                "no loaded_at_field: only a table rivc extracts is measured by when it landed"
            )
        batch = plan.landing(nid).position().batch  # landed batch ids are milliseconds
        return None if batch is None else datetime.fromtimestamp(batch / 1000, UTC)
    info = connector("source", facts.connector)
    if info is not None and info.relational:  # the query, asked of its database
        spec = plan.profile.connections.get(facts.connection or "")
        if spec is None:
            raise RuntimeError(f"connection {facts.connection!r} is not in the profile")
        conn = Conn.resolve(spec, os.environ)
        query = f"SELECT max({field}) FROM ({plan.sql(nid)}) AS _rivc"
        if where:
            query += f" WHERE {where}"
        with connection(conn) as db, db.cursor() as cur:
            cur.execute(query)
            row = cur.fetchone()
        return _utc(None if row is None else row[0])
    source = plan.project.sources[node.name]
    told, value = newest(source.connector, source.config, plan.root, plan.profile.storage, field)
    if told:
        return _utc(value)
    raise RuntimeError(
        f"a {facts.connector} source's freshness needs Spark to read it: not measured"
    )


def _utc(value: Any) -> datetime | None:
    """A database's timestamp as UTC: a naive one is taken as UTC, as rivc delivers them."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(str(value))
    moment: datetime = value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def sources_json(project: str, results: list[Measured], elapsed_s: float) -> dict[str, Any]:
    """target/sources.json in dbt's format (sources v3)."""
    from rivc.compiler.emit.dbt_manifest import dbt_metadata

    return {
        "metadata": dbt_metadata("sources/v3"),
        "results": [r.to_json(project) for r in results],
        "elapsed_time": round(elapsed_s, 3),
    }
