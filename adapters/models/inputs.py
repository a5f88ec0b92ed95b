"""What a table model is built from, as one hash: its compiled SQL and config, the profile's
Spark settings, and the version of every table it reads (through views and ephemeral models,
down to stored tables and sources).

A table model's commit records the hash (materializations.Table.stamp). A later run whose hash
is the same reuses the table instead of building it again: the same SQL over the same data
gives the same rows. So the decision is read from the table itself, never from state.db: a
fresh clone or a lost `.rivc/` decides as the last run did.

No hash (the model is always built) when the result may differ over the same inputs: a Python
model, pre- or post-hooks, a function whose value changes from run to run (`current_date()`,
`rand()`, `uuid()`, ...), a relation the SQL names that is not one of its parents, or an input
whose version cannot be told without reading it (a file, a stream, a deferred table).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..connectors.datagen.spec import DatagenConfig
from ..lake import deltatable

if TYPE_CHECKING:
    from ..run.runtime import Runtime

FORMAT = 1  # bumped when what the hash covers changes: every table is built once more

# Spark functions whose value is not a function of their arguments
VOLATILE = frozenset(
    {
        "current_date",
        "current_timestamp",
        "current_time",
        "now",
        "localtimestamp",
        "curdate",
        "current_timezone",
        "rand",
        "randn",
        "random",
        "uuid",
        "shuffle",
        "monotonically_increasing_id",
        "spark_partition_id",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "current_user",
        "user",
        "session_user",
        "reflect",
        "java_method",
        "try_reflect",
    }
)
_VOLATILE_NODES = (
    exp.CurrentDate,
    exp.CurrentTimestamp,
    exp.CurrentTime,
    exp.CurrentDatetime,
    exp.CurrentUser,
    exp.Rand,
    exp.Randn,
    exp.Uuid,
    exp.TableSample,
)


def built_from(rt: Runtime, nid: str) -> str | None:
    """The hash of what `nid` is built from now, or None when its result may differ over the
    same inputs."""
    node = rt.plan.nodes[nid]
    config = node.config
    if config.get("language") == "python" or config.get("pre_hook") or config.get("post_hook"):
        return None
    versions = _inputs(rt, nid)
    if versions is None:
        return None
    given = {
        "format": FORMAT,
        "sql": rt.plan.sql(nid),
        "config": config,
        "columns": node.columns,
        "spark": rt.plan.profile.spark.conf,  # settings that change results (a time zone)
    }
    text = json.dumps({**given, "inputs": versions}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _inputs(rt: Runtime, nid: str) -> dict[str, str] | None:
    """The version of each input `nid`'s SQL reads (through ephemeral models); None when the
    SQL may give other rows over the same inputs, or an input has no version."""
    versions: dict[str, str] = {}
    if not _reads_only(rt.plan.sql(nid), frozenset(_relations(rt, nid, versions))):
        return None
    return None if "" in versions.values() else versions


def _relations(rt: Runtime, nid: str, versions: dict[str, str]) -> set[str]:
    """The relation names `nid`'s SQL may read (its parents', through ephemeral models), each
    parent's version put in `versions` ("" when it has none)."""
    names: set[str] = set()
    for dep in rt.plan.nodes[nid].depends_on:
        parent = rt.plan.nodes[dep]
        names.add((parent.relation if parent.kind == "source" else parent.name).lower())
        if parent.kind == "model" and not parent.materialization.relation:
            names |= _relations(rt, dep, versions)  # inlined: its SQL is in ours
        else:
            versions[dep] = _version(rt, dep)
    return names


def _version(rt: Runtime, nid: str) -> str:
    """What identifies the data of an input now ("" when nothing does without reading it)."""
    node = rt.plan.nodes[nid]
    if node.kind == "source":
        if rt.plan.is_extracted(nid):
            return _table_version(rt.landing(nid).uri, rt)
        if pure_source(rt, nid):
            config = rt.plan.project.sources[node.name].config
            return "datagen:" + json.dumps(config.model_dump(mode="json"), sort_keys=True)
        return ""
    if node.kind == "model" and not node.stored:  # a view: what it reads, and its SQL
        inner = _inputs(rt, nid)
        if inner is None:
            return ""
        return json.dumps({"view": rt.plan.sql(nid), "inputs": inner}, sort_keys=True)
    return _table_version(rt.table_uri(node), rt)


def pure_source(rt: Runtime, nid: str) -> bool:
    """A source table whose rows are a function of its config: a datagen table (its rows are
    a function of seed and index, connectors/datagen.py) without transforms."""
    source = rt.plan.project.sources[rt.plan.nodes[nid].name]
    return isinstance(source.config, DatagenConfig) and not source.table.transforms


def _table_version(uri: str, rt: Runtime) -> str:
    """A Delta table's identity and version: a re-created table is another table."""
    table = deltatable.open_table(uri, rt.plan.store(uri).delta)
    if table is None:
        return ""  # not built here (a deferred one is read from elsewhere): no version
    return f"{table.metadata().id}@{table.version()}"


@lru_cache(maxsize=4096)
def _reads_only(sql: str, relations: frozenset[str]) -> bool:
    """Whether `sql` calls no volatile function and reads only `relations` (and its CTEs)."""
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except SqlglotError:
        return False
    if tree is None:
        return False
    if any(True for _ in tree.find_all(*_VOLATILE_NODES)):
        return False
    for call in tree.find_all(exp.Func):
        name = call.name if isinstance(call, exp.Anonymous) else call.sql_name()
        if name.lower() in VOLATILE:
            return False
        if isinstance(call, exp.StrToUnix) and not call.this:
            return False  # unix_timestamp(): now
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if not table.name:
            return False  # a table function, a path: not a relation rivc versions
        if table.db or table.catalog or table.name.lower() not in relations | ctes:
            return False
    return True
