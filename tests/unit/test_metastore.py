"""What a metastore entry of a Delta table is made of (adapters/lake/metastore.py): the glob of
the snapshot's files and the columns in Spark's names. The entries themselves are tested against
a Hive metastore and the Spark Thrift Server in tests/integration/test_metastore.py."""

from __future__ import annotations

import fnmatch

import pyarrow as pa
import pytest

from rivc.adapters.lake.metastore import EMPTY, _columns, _location
from rivc.compiler.loading.specs import SparkSpec


def test_a_files_name_is_one_literal_alternative_of_the_glob():
    """A partition value may hold any of Hadoop's glob characters: each is escaped, so the
    glob names exactly the snapshot's files."""
    files = [
        "/w/t/rivc-batch-1/k=a, b/part-0.parquet",
        "/w/t/rivc-batch-1/k={x}[y]*?^\\/part-1.parquet",
        "file:///w/t/part-2.parquet",
    ]
    where = _location("/w/t", files)
    assert where.startswith("/w/t/{") and where.endswith("}")
    body = where.removeprefix("/w/t/{").removesuffix("}")
    parts, cur, escaped = [], "", False
    for c in body:  # split at the commas the glob reads as its own
        if escaped:
            cur, escaped = cur + c, False
        elif c == "\\":
            escaped = True
        elif c == ",":
            parts, cur = [*parts, cur], ""
        else:
            cur += c
    parts.append(cur)
    assert parts == [
        "rivc-batch-1/k=a, b/part-0.parquet",
        "rivc-batch-1/k={x}[y]*?^\\/part-1.parquet",
        "part-2.parquet",
    ]
    assert not fnmatch.fnmatch("x", where)  # sanity: the glob is not a catch-all


def test_an_empty_table_points_at_an_empty_folder_of_its_own(tmp_path):
    where = _location(str(tmp_path), [])
    assert where == str(tmp_path / EMPTY)
    assert (tmp_path / EMPTY).is_dir() and not any((tmp_path / EMPTY).iterdir())


def test_columns_keep_their_types_and_partition_columns_come_last():
    schema = pa.schema(
        [
            ("day", pa.date32()),
            ("id", pa.int64()),
            ("amount", pa.decimal128(12, 3)),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us")),
            ("tags", pa.list_(pa.string())),
        ]
    )
    assert _columns(schema, ["day"]) == [
        ("id", "bigint"),
        ("amount", "decimal(12,3)"),
        ("at", "timestamp"),
        ("local", "timestamp_ntz"),
        ("tags", "array<string>"),
        ("day", "date"),
    ]


def test_the_metastore_is_a_thrift_uri_or_embedded():
    assert SparkSpec(metastore="thrift://h:9083").hive
    assert SparkSpec(metastore="embedded").hive
    assert SparkSpec(conf={"spark.sql.catalogImplementation": "hive"}).hive
    assert not SparkSpec().hive
    with pytest.raises(ValueError, match="thrift://<host>:<port> or embedded"):
        SparkSpec(metastore="h:9083")


def test_spark_reaches_the_metastore_the_profile_names(tmp_path):
    from rivc.adapters.spark.session import session_conf

    service = session_conf(SparkSpec(metastore="thrift://h:9083"), tmp_path)
    assert service["spark.sql.catalogImplementation"] == "hive"
    assert service["spark.hadoop.hive.metastore.uris"] == "thrift://h:9083"
    embedded = session_conf(SparkSpec(metastore="embedded"), tmp_path)
    url = embedded["spark.hadoop.javax.jdo.option.ConnectionURL"]
    assert url == f"jdbc:derby:;databaseName={tmp_path.resolve() / 'metastore'};create=true"
    assert "spark.sql.catalogImplementation" not in session_conf(SparkSpec(), tmp_path)
