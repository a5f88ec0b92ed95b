"""The iceberg connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, Scd2Columns, SinkConfig, _valid_size
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import (
    SecretStr,
    SecretUrl,
    StorageOptions,
    secret_keys,
)
from rivc.compiler.loading.specbase import Location, Spec, StrList, _as_tuple

# pyiceberg's catalog properties that carry credentials (its documentation's)
IcebergProperties = Annotated[
    dict[str, str],
    secret_keys(
        "credential",
        "token",
        "header.authorization",
        "header.cookie",
        "header.x-api-key",
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "client.access-key-id",
        "client.secret-access-key",
        "client.session-token",
        "adls.account-key",
        "adls.sas-token",
        "adls.client-secret",
        "adls.connection-string",
        "gcs.oauth2.token",
        "hive.kerberos-keytab",
        "oauth2-client-secret",
    ),
]


class IcebergCatalog(Spec):
    type: Literal["sql", "rest", "glue", "hive"] = "sql"
    name: str = "rivc"  # a SQL catalog keeps its tables under its name (Spark's catalog name)
    uri: SecretUrl | None = None
    warehouse: Location | None = None
    credential: SecretStr | None = None  # client_id:client_secret (OAuth2)
    token: SecretStr | None = None
    # pyiceberg's own catalog properties, passed as they are (an OAuth2 server's
    # `oauth2-server-uri` and `scope`, `header.*`, `rest.sigv4-enabled`, ...)
    properties: IcebergProperties = {}

    @model_validator(mode="after")
    def _hive_needs_uri(self) -> IcebergCatalog:
        if self.type == "hive" and not self.uri:
            raise ValueError("a hive catalog needs uri: thrift://<metastore host>:<port>")
        return self


class IcebergPartition(Spec):
    field: str
    transform: Literal["identity", "bucket", "truncate", "year", "month", "day", "hour"] = (
        "identity"
    )
    buckets: int | None = Field(None, gt=0)
    width: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _args(self) -> IcebergPartition:
        if self.transform == "bucket" and not self.buckets:
            raise ValueError("transform bucket needs buckets")
        if self.transform == "truncate" and not self.width:
            raise ValueError("transform truncate needs width")
        return self


class IcebergSourceConfig(Spec):
    """An Iceberg table that exists: its current snapshot, read by Spark's tasks."""

    catalog: IcebergCatalog = IcebergCatalog()
    namespace: str
    table: str
    storage_options: StorageOptions = {}


class IcebergSinkConfig(SinkConfig):
    catalog: IcebergCatalog = IcebergCatalog()
    namespace: str
    table: str
    mode: Literal["append", "overwrite", "upsert", "scd2"] = "append"
    # overwrite: the whole table, or only the partitions the batch writes (the seed's)
    overwrite_scope: Literal["table", "partitions"] = "table"
    key_fields: StrList = ()
    scd2: Scd2Columns = Scd2Columns()
    partitioning: tuple[IcebergPartition, ...] = ()
    schema_evolution: Literal["strict", "add_columns", "full"] = "strict"
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"
    target_file_size: int | None = Field(None, gt=0)  # bytes a data file rolls over at
    storage_options: StorageOptions = {}  # as for delta: on top of the profile's storage:
    spark_write_threshold: int | str = "64MB"  # as for delta

    _size = field_validator("spark_write_threshold")(_valid_size)

    _tuple = field_validator("key_fields", mode="before")(_as_tuple)

    @model_validator(mode="after")
    def _keys(self) -> IcebergSinkConfig:
        if self.mode in ("upsert", "scd2") and not self.key_fields:
            raise ValueError(f"mode {self.mode} needs key_fields")
        if self.overwrite_scope == "partitions" and self.mode != "overwrite":
            raise ValueError("overwrite_scope partitions needs mode overwrite")
        return self

    def merge_by(self) -> tuple[str, ...]:
        return self.key_fields if self.mode in ("upsert", "scd2") else ()

    def history(self) -> Scd2Columns | None:
        return self.scd2 if self.mode == "scd2" else None

    def partitions_overwrite(self) -> bool:
        return self.mode == "overwrite" and self.overwrite_scope == "partitions"

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        out = super().input_columns()
        if self.partitioning:
            out["partitioning"] = tuple(p.field for p in self.partitioning)
        return out


ENTRIES = (
    ConnectorInfo(
        "iceberg",
        "source",
        "lakehouse",
        IcebergSourceConfig,
        "an existing Iceberg table (its current snapshot), read by Spark's tasks",
        f"{RUNTIME}.iceberg.source:read_source",
    ),
    ConnectorInfo(
        "iceberg",
        "sink",
        "lakehouse",
        IcebergSinkConfig,
        "Apache Iceberg tables (pyiceberg), exactly-once per batch",
        f"{RUNTIME}.iceberg.sink:IcebergSink",
        probe=f"{RUNTIME}.iceberg.catalog:probe",
        dataset=lambda config: f"{config.get('namespace')}.{config.get('table')}",
        holds="table",
        aliases=aliases.iceberg_sink,
    ),
)
