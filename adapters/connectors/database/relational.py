"""PostgreSQL and MySQL/MariaDB sources: their columns' deliveries, retries and the JDBC reader
(connections: engine.py; windows and cursors: windows.py).

Control queries (high-water marks, chunk bounds, EXPLAIN, connection checks, column probes) go
through the Python drivers (psycopg, pymysql). Rows go through PostgreSQL's COPY (postgres/copy.py)
where it can carry every column, else through Spark's JDBC reader (read_query). Extraction
itself (modes, windows, staging, positions) is adapters/ingest/extract.py; `read` here is the plain read
of a source's whole query that previews, tests and unselected upstream sources use.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rivc.compiler import dbtypes
from rivc.compiler.dbtypes import DbColumn, Delivery
from rivc.compiler.dialects import dialect
from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import quote

from ...plane.base import SourceContext
from ...util.errortext import CATEGORIES, classify, rivc_error_inside
from .engine import Conn, ExtractError, connection, database
from .spec import RelationalConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def retried(category: str) -> tuple[bool, float]:
    for name, retry, extra, _ in CATEGORIES:
        if name == category:
            return retry, extra
    return False, 0


def with_retries(
    fn: Callable[[], Any],
    tuning: dict[str, int],
    errors: tuple[type[BaseException], ...],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Any, int]:
    """Run `fn`, retrying classified transient errors with exponential backoff.

    Each attempt runs a new Spark read, so it opens fresh connections. Returns (result, retries).
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn(), attempt - 1
        except errors as exc:
            message = str(exc)
            inner = rivc_error_inside(message)
            if inner:  # a value refused inside Spark: the user's to fix, never retried
                raise ConnectorError(inner) from None
            category = exc.category if isinstance(exc, ExtractError) else classify(message)
            retry, extra = retried(category)
            if not retry or attempt > tuning["max_retries"]:
                if isinstance(exc, ExtractError):
                    raise exc.after(attempt) from exc.__cause__
                raise ExtractError(category, message, attempt) from exc
            sleep(tuning["retry_backoff_ms"] / 1000 * 2 ** (attempt - 1) + extra)


# --------------------------------------------------------------------------- column types


def deliveries(
    kind: str, columns: list[DbColumn], declared: dict[str, str], label: str
) -> list[Delivery]:
    """How each column is read (docs/types.md); a declared type wins."""
    missing = [c for c in declared if c not in {col.name for col in columns}]
    if missing:
        raise ConnectorError(f"{label}: declared column {missing[0]} is not selected by the source")
    dialect = database(kind)
    out = []
    for col in columns:
        try:
            out.append(dialect.delivery(col, declared.get(col.name)))
        except ValueError as exc:
            raise ConnectorError(f"{label}: {exc}") from exc
    return out


def select_list(kind: str, plan: list[Delivery]) -> str:
    """Each column's select expression, and beside it its check where it has one."""
    return ", ".join(
        f"{d.expr} AS {dialect(kind).quote(d.name)}"
        + (f", {d.check} AS {dialect(kind).quote(dbtypes.check_name(d))}" if d.check else "")
        for d in plan
    )


def jdbc_reader(spark: SparkSession, conn: Conn, tuning: dict[str, int], parallel: int = 1) -> Any:
    reader = (
        spark.read.format("jdbc")
        .option("url", conn.jdbc_url)
        .option("driver", conn.engine.jdbc_driver)
        .option("fetchsize", str(tuning["batch_size"]))  # never 0: that buffers everything
        .option("sessionInitStatement", conn.engine.session_init(tuning))
        .option("numPartitions", str(parallel))
    )
    if tuning["statement_timeout_s"]:
        reader = reader.option("queryTimeout", str(tuning["statement_timeout_s"]))
    if conn.user:
        reader = reader.option("user", conn.user)
    if conn.password:
        reader = reader.option("password", conn.password)
    return reader


def read(spark: SparkSession, ctx: SourceContext[RelationalConfig]) -> DataFrame:
    """The registry's entry point: the whole query, read when used, with no state involved."""
    if ctx.connection is None or ctx.query is None:
        raise ConnectorError(f"source {ctx.name}: its connection is not in the profile")
    conn = Conn.resolve(ctx.connection, os.environ)
    label = f"source {ctx.name}"
    with connection(conn) as db:
        plan = deliveries(conn.kind, conn.engine.probe(db, ctx.query), ctx.columns, label)
    return read_query(spark, conn, ctx.tuning, ctx.query, [], plan, label)


def read_query(
    spark: SparkSession,
    conn: Conn,
    tuning: dict[str, int],
    base: str,
    predicates: list[str],
    plan: list[Delivery],
    label: str,
) -> DataFrame:
    """Rows of `base` under each predicate (one JDBC query each), delivered as `plan` says:
    text-carried columns are converted exactly or their values refused by name."""
    wrapped = f"({base}) AS _rivc"
    select = select_list(conn.kind, plan)
    parts = []
    for predicate in predicates or [""]:
        where = f" WHERE {predicate}" if predicate else ""
        parts.append(
            jdbc_reader(spark, conn, tuning)
            .option("dbtable", f"(SELECT {select} FROM {wrapped}{where}) AS _rivc_w")
            .load()
        )
    df = parts[0]
    for part in parts[1:]:
        df = df.unionAll(part)
    out: DataFrame = df.selectExpr(
        *(f"{dbtypes.spark_convert(label, d)} AS {quote(d.name)}" for d in plan)
    )
    return out
