"""Spark's tasks write Iceberg partitions only for the spec the table has: a configured
partitioning that differs from the table's sends the batch to pyiceberg, which follows the
table."""

from __future__ import annotations

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, TruncateTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from rivc.adapters.connectors.iceberg.sink import _spec, _transform_name
from rivc.adapters.connectors.iceberg.spec import IcebergPartition


def test_the_configured_partitioning_is_compared_with_the_tables(tmp_path):
    catalog = SqlCatalog(
        "t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri()
    )
    catalog.create_namespace("n")
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "name", StringType()),
        NestedField(3, "at", TimestamptzType()),
    )
    spec = PartitionSpec(
        PartitionField(1, 1000, BucketTransform(8), "id_bucket"),
        PartitionField(2, 1001, TruncateTransform(2), "name_trunc"),
        PartitionField(3, 1002, DayTransform(), "at_day"),
    )
    table = catalog.create_table("n.t", schema=schema, partition_spec=spec)
    same = [
        IcebergPartition(field="id", transform="bucket", buckets=8),
        IcebergPartition(field="name", transform="truncate", width=2),
        IcebergPartition(field="at", transform="day"),
    ]
    assert _spec(table) == [_transform_name(p) for p in same]
    for changed in (
        [*same[:2], IcebergPartition(field="at", transform="hour")],
        [IcebergPartition(field="id", transform="bucket", buckets=16), *same[1:]],
        same[:2],
        [IcebergPartition(field="name"), *same[1:]],
    ):
        assert _spec(table) != [_transform_name(p) for p in changed]
