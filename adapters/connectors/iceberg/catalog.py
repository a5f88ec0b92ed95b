"""Iceberg catalogs (SQL, REST) and FileIO for rivc's stores, and what the sink, source and
housekeeping share about an Iceberg table's files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from rivc.compiler.loading.locate import STATE_DIR
from rivc.compiler.loading.secrets import mask_url

from ...util.storage import Store
from .spec import IcebergCatalog, IcebergSinkConfig

if TYPE_CHECKING:
    pass


CODECS = {
    "zstd": "zstd",
    "snappy": "snappy",
    "gzip": "gzip",
    "lz4": "lz4",
    "brotli": "brotli",
    "none": "uncompressed",
}


# rivc's storage options (the stores' environment-variable names) as pyiceberg's FileIO properties
FILE_IO = {
    "AWS_ENDPOINT_URL": "s3.endpoint",
    "AWS_ACCESS_KEY_ID": "s3.access-key-id",
    "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
    "AWS_SESSION_TOKEN": "s3.session-token",
    "AWS_REGION": "s3.region",
    "GOOGLE_CLOUD_PROJECT": "gcs.project-id",
    "AZURE_STORAGE_ACCOUNT_NAME": "adls.account-name",
    "AZURE_STORAGE_ACCOUNT_KEY": "adls.account-key",
    "AZURE_STORAGE_SAS_TOKEN": "adls.sas-token",
}


def bare(path: str) -> str:
    """A file's path without its scheme and bucket prefix style, to compare listings with the
    paths a manifest holds (file:///x, file:/x, /x; s3://b/k and b/k)."""
    rest = path.split("://", 1)[-1] if "://" in path else path.removeprefix("file:")
    return "/" + rest.lstrip("/")


def spark_arrow_schema(table: Any) -> Any:
    """The table's schema in Arrow as Spark gives and takes it: pyiceberg's has large strings
    and binaries, which a Python data source may not return to Spark."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    return to_arrow_schema(from_arrow_schema(table.schema().as_arrow()), timezone="UTC")


def store_path(path: str) -> str:
    """A data file's path as the filesystem layer takes it: a local path, or the URI."""
    parsed = urlparse(path)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else path


def footer_data_file(
    table: Any, metadata: Any, path: str, spec_id: int, partition: Callable[[Any], Any]
) -> Any:
    """The data file at `path`, with its statistics from its footer and the partition values
    `partition` gives from those statistics."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    source = table.io.new_input(path)
    with source.open() as stream:
        footer = pq.read_metadata(stream)
    schema = metadata.schema()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition(stats)),
        file_size_in_bytes=len(source),
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )


def replace_files(tx: Any, old: list[Any], new: list[Any], props: dict[str, str]) -> None:
    """In `tx`: one snapshot that removes the data files `old` (an overwrite; none: an append)
    and adds `new`."""
    from pyiceberg.table import TableProperties

    if tx.table_metadata.name_mapping() is None:  # files Spark wrote have no field ids
        tx.set_properties(
            **{
                TableProperties.DEFAULT_NAME_MAPPING: (
                    tx.table_metadata.schema().name_mapping.model_dump_json()
                )
            }
        )
    snapshot = tx.update_snapshot(snapshot_properties=props)
    with snapshot.overwrite() if old else snapshot.fast_append() as producer:
        for data_file in old:
            producer.delete_data_file(data_file)
        for data_file in new:
            producer.append_data_file(data_file)


def file_io(store: Store) -> dict[str, str]:
    """pyiceberg's FileIO properties for the store's options."""
    props = {FILE_IO[k]: v for k, v in store.options.items() if k in FILE_IO}
    if "s3.endpoint" in props and "s3.region" not in props:
        props["s3.region"] = "us-east-1"  # an endpoint of one's own has no region to discover
    return props


def open_catalog(c: IcebergCatalog, root: Path, store: Store) -> Any:
    """The catalog a config names: REST, Glue, a Hive metastore, or SQL (by default rivc's
    SQLite catalog in .rivc/iceberg/, with its warehouse beside it); relative warehouses are
    under the project."""
    io = file_io(store)
    if c.type == "hive":  # a Hive metastore's Thrift API: tables under its databases
        from pyiceberg.catalog.hive import HiveCatalog

        # Hive 2's column types (a timestamptz is `timestamp` there): the metastore's copy of
        # the schema is informational, Iceberg's metadata holds the types
        hive = {"uri": str(c.uri), "hive.hive2-compatible": "true"}
        if c.warehouse:
            hive["warehouse"] = (
                c.warehouse if "://" in c.warehouse else (root / c.warehouse).resolve().as_uri()
            )
        return HiveCatalog(c.name, **{**hive, **io, **c.properties})
    if c.type == "glue":  # AWS Glue: the region and credentials of the store, as boto3 finds them
        from pyiceberg.catalog.glue import GlueCatalog

        given = {"warehouse": c.warehouse} if c.warehouse else {}
        if "AWS_REGION" in store.options:
            given["glue.region"] = store.options["AWS_REGION"]
        return GlueCatalog(c.name, **{**given, **io, **c.properties})
    if c.type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        props = {
            "uri": c.uri,
            "warehouse": c.warehouse,
            "credential": c.credential,
            "token": c.token,
        }
        given = {k: v for k, v in props.items() if v}
        return RestCatalog(c.name, **{**given, **io, **c.properties})  # the user's last
    from pyiceberg.catalog.sql import SqlCatalog

    home = root / STATE_DIR / "iceberg"
    home.mkdir(parents=True, exist_ok=True)
    warehouse = c.warehouse or str(home / "warehouse")
    if "://" not in warehouse:
        warehouse = (root / warehouse).resolve().as_uri()
    return SqlCatalog(
        c.name,
        uri=c.uri or f"sqlite:///{home / 'catalog.db'}",
        warehouse=warehouse,
        **{**io, **c.properties},
    )


def probe(config: IcebergSinkConfig, root: Path, storage: Mapping[str, str]) -> tuple[bool, str]:
    """Doctor: the sink's catalog opens and lists its namespaces."""
    c = config.catalog
    where = f"{c.type} catalog {c.name}" + (f" at {mask_url(c.uri)}" if c.uri else "")
    try:
        store = Store.of(c.warehouse or "", storage, config.storage_options)
        namespaces = open_catalog(c, root, store).list_namespaces()
    except Exception as exc:  # noqa: BLE001  (any client's error is the answer)
        return False, f"{where}: {str(exc).strip().splitlines()[0][:300] or type(exc).__name__}"
    return True, f"{where} lists {len(namespaces)} namespace(s)"


def transform_of(p: Any) -> Any:
    """pyiceberg's transform of a configured partition field."""
    from pyiceberg import transforms as T

    make: dict[str, Callable[[Any], Any]] = {
        "identity": lambda p: T.IdentityTransform(),
        "bucket": lambda p: T.BucketTransform(p.buckets),
        "truncate": lambda p: T.TruncateTransform(p.width),
        "year": lambda p: T.YearTransform(),
        "month": lambda p: T.MonthTransform(),
        "day": lambda p: T.DayTransform(),
        "hour": lambda p: T.HourTransform(),
    }
    return make[p.transform](p)
