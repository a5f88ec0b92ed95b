"""The `table` source: a table in Spark's catalog, read as it is now (a dbt source's table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rivc.compiler.errors import ConnectorError

from ...plane.base import SourceContext
from .spec import TableSourceConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_source(spark: SparkSession, ctx: SourceContext[TableSourceConfig]) -> DataFrame:
    """The registry's entry point. Declared columns, when given, must be in the table."""
    cfg: TableSourceConfig = ctx.config
    if not spark.catalog.tableExists(cfg.name):
        raise ConnectorError(f"source {ctx.name}: Spark's catalog has no table {cfg.name}")
    df = spark.table(cfg.name)
    missing = [c for c in ctx.columns if c not in df.columns]
    if missing:
        raise ConnectorError(f"source {ctx.name}: {cfg.name} has no column {', '.join(missing)}")
    return df
