"""A change-log source's (postgres-cdc, mysql-cdc) reader for a table that has not landed yet:
its changes are read and landed when it runs (adapters/connectors/postgres/log.py, mysqlcdc.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError

from ..plane.base import SourceContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read(spark: SparkSession, ctx: SourceContext[Any]) -> DataFrame:
    raise ConnectorError(
        f"source {ctx.name} has landed no changes yet: run it first "
        f"(rivc run --select source:{ctx.name})"
    )
