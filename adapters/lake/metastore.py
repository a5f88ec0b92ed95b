"""The warehouse's tables under their dbt names in a Hive metastore (Spark's catalog with the
profile's `spark.metastore`), so that another Spark job, the Spark Thrift Server and the BI
tools behind it find each one by name.

Spark reads a catalog table of provider `delta` only through Delta's Spark connector (jars
from Maven), so the name is registered as what any Spark reads without them: a Parquet table
whose location is the current snapshot's data files, one glob of their names under the table's
folder (`basePath` the folder: Hive-style partition folders give the partition columns), its
columns the Delta table's with their types (a file written before a column was added reads it
as NULL). The Delta log stays the truth: rivc itself reads the log, never the name, and each
build of a stored node points the name at its new snapshot in one metastore call (`ALTER TABLE
... SET LOCATION`); a node whose columns changed is dropped and created again. The entry is
external and carries `rivc.node`, the node's warehouse location: a relation of that name rivc
did not make for that node is left alone (an error naming it).

A run killed between a commit and the registration leaves the name on the snapshot before, whose
files stay until VACUUM; the next run that builds or reuses the node, and `rivc maintain`
before its VACUUM, point it at the current one.

A view model is a view of the metastore, its SQL reading its parents by their names there
(`name_view`); one that reads a relation without a name there (a rivc source's landing table)
is not named, with a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import literal, quote

from ..util.storage import Store, is_local
from . import deltatable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from rivc.compiler.emit.manifest import Placed

PROPERTY = "rivc.node"  # the warehouse location of the node a catalog entry names
EMPTY = "_rivc_empty"  # the folder an empty table's entry points at (Spark needs one to list)
GLOB = set("\\{}[]*?,^")  # what Hadoop's glob reads as syntax in a file's name


def name_table(spark: SparkSession, placed: Placed, uri: str, store: Store) -> str | None:
    """Point `placed`'s name at the table's current snapshot; returns why it was not (a table
    on an object store, whose files Spark reaches through its own Hadoop filesystem and
    settings), or None."""
    if not is_local(uri):
        return f"{placed.relation_name} is not registered: its table is not on this machine's disk"
    dt = deltatable.open_table(uri, store.delta)
    if dt is None:
        return None
    files = deltatable.table_files(dt, uri)  # refuses what a Parquet reader would read wrongly
    parts = list(dt.metadata().partition_columns)
    columns = _columns(deltatable.table_schema(dt), parts)
    location = _location(uri, [f.uri for f in files])
    name = _name(spark, placed)
    kind = _ours(spark, placed, name, _folder(uri))
    if kind == "TABLE":
        have = [(c.name, c.dataType) for c in spark.catalog.listColumns(name)]
        if have == columns:
            spark.sql(f"ALTER TABLE {name} SET LOCATION {literal(location)}")
            return None
    if kind is not None:  # other columns, or the node's view before: external, the files stay
        spark.sql(f"DROP {kind} {name}")
    ddl = ", ".join(f"{quote(c)} {t}" for c, t in columns)
    # a partition folder sits in the folder of the write that made its file (rivc-batch-...),
    # which Spark's partition discovery would take for another layout: the partition columns
    # are read from the `k=v` folders of each file's path
    options = {"basePath": _folder(uri), "ignoreInvalidPartitionPaths": "true"}
    spark.sql(
        f"CREATE TABLE {name} ({ddl}) USING parquet "
        f"OPTIONS ({', '.join(f'{k} {literal(v)}' for k, v in options.items())}) "
        f"LOCATION {literal(location)} "
        f"TBLPROPERTIES ({literal(PROPERTY)} = {literal(_folder(uri))})"
    )
    return None


def _name(spark: SparkSession, placed: Placed) -> str:
    """`placed`'s quoted name, its schema made if the metastore lacks it."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote(placed.schema)}")
    return f"{quote(placed.schema)}.{quote(placed.alias)}"


def _ours(spark: SparkSession, placed: Placed, name: str, owner: str) -> str | None:
    """What the catalog holds under `name` for the node at `owner`: TABLE, VIEW, or None
    (nothing); a relation another made is an error naming it (rivc leaves it alone)."""
    if not spark.catalog.tableExists(name):
        return None
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    if props.get(PROPERTY) != owner:
        raise ConnectorError(
            f"{placed.relation_name} in Spark's catalog is not this warehouse's {owner}: "
            "rename the node (alias or schema) or drop that relation"
        )
    return "VIEW" if spark.catalog.getTable(name).tableType == "VIEW" else "TABLE"


def _folder(uri: str) -> str:
    return uri.removeprefix("file://").rstrip("/")


def _location(uri: str, files: list[str]) -> str:
    """One glob of the snapshot's files under the table's folder."""
    folder = _folder(uri)
    if not files:
        (empty := Path(folder) / EMPTY).mkdir(exist_ok=True)
        return str(empty)
    names = []
    for f in files:
        rel = f.removeprefix("file://").removeprefix(folder + "/")
        names.append("".join("\\" + c if c in GLOB else c for c in rel))
    return f"{folder}/{{{','.join(names)}}}"


def _columns(schema: pa.Schema, parts: list[str]) -> list[tuple[str, str]]:
    """The table's columns in Spark's type names, partition columns last (where Spark puts
    them, as dbt-spark does)."""
    from pyspark.sql.pandas.types import from_arrow_type

    typed = [(f.name, from_arrow_type(f.type).simpleString()) for f in schema]
    return [c for c in typed if c[0] not in parts] + [c for c in typed if c[0] in parts]


def name_view(
    spark: SparkSession,
    placed: Placed,
    sql: str,
    parents: dict[str, Placed | None],
    owner: str,
) -> str | None:
    """`placed` as a view of the metastore over `sql`, whose relations (rivc's names of the
    node's parents, `parents`) are read by their names there; returns why it was not made (a
    parent without a name there: None in `parents`), or None. `owner`: the node's warehouse
    location, which marks the view as its own."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read="spark")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if table.db or table.name in ctes or table.name not in parents:
            continue
        where = parents[table.name]
        if where is None:
            return (
                f"view {placed.relation_name} is not named in the metastore: it reads "
                f"{table.name}, which has no name there"
            )
        named = exp.table_(where.alias, where.schema, alias=table.alias or None)
        table.replace(named)
    name = _name(spark, placed)
    if _ours(spark, placed, name, _folder(owner)) == "TABLE":  # the node's table before
        spark.sql(f"DROP TABLE {name}")
    spark.sql(
        f"CREATE OR REPLACE VIEW {name} "
        f"TBLPROPERTIES ({literal(PROPERTY)} = {literal(_folder(owner))}) "
        f"AS {tree.sql(dialect='spark')}"
    )
    return None
