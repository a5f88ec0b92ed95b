"""The `iceberg` source: an Iceberg table's current snapshot, read by Spark's tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError

from ...plane.base import SourceContext
from ...util.storage import Store
from .catalog import open_catalog, spark_arrow_schema, store_path
from .spec import IcebergSourceConfig

if TYPE_CHECKING:
    pass


def read_source(spark: Any, ctx: SourceContext[IcebergSourceConfig]) -> Any:
    """The registry's entry point of the iceberg source: the table's current snapshot, read by
    Spark's tasks from its data files. A table rivc cannot read faithfully by column name is
    refused by name: one with delete files (equality or position deletes) or with a column
    renamed since any of its files was written."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyspark.sql.pandas.types import from_arrow_schema

    from ...plane.tableread import DataFile, read_files

    c = ctx.config
    name = f"{c.namespace}.{c.table}"
    store = Store.of(c.catalog.warehouse or "", dict(ctx.storage), dict(c.storage_options))
    try:
        table = open_catalog(c.catalog, ctx.root, store).load_table(name)
    except NoSuchTableError:
        raise ConnectorError(f"source {ctx.name}: no iceberg table {name}") from None
    tasks = list(table.scan().plan_files())
    if any(t.delete_files for t in tasks):
        raise ConnectorError(
            f"source {ctx.name}: iceberg table {name} has delete files (row-level deletes), "
            "which rivc does not apply; compact it first (e.g. Spark's rewrite_data_files)"
        )
    names: dict[int, set[str]] = {}
    for schema in table.schemas().values():
        for field in schema.fields:
            names.setdefault(field.field_id, set()).add(field.name)
    renamed = sorted("/".join(sorted(n)) for n in names.values() if len(n) > 1)
    if renamed:
        raise ConnectorError(
            f"source {ctx.name}: iceberg table {name} renamed column {renamed[0]}; rivc reads "
            "columns by name and would read its older files wrongly"
        )
    schema = spark_arrow_schema(table)
    missing = [col for col in ctx.columns if col not in schema.names]
    if missing:
        raise ConnectorError(f"source {ctx.name}: {name} has no column {', '.join(missing)}")
    if not tasks:
        return spark.createDataFrame([], from_arrow_schema(schema))
    files = [DataFile(store_path(t.file.file_path), t.file.file_size_in_bytes, {}) for t in tasks]
    location = table.location()
    located = Store.of(location, dict(ctx.storage), dict(c.storage_options))
    return read_files(spark, files, schema, located)
