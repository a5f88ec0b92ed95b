"""Compile-time specs of connector `config:` blocks, and the columns a source is known to produce.

The runtime side of each connector lives in rivc.adapters.connectors; this module only knows
what a valid configuration looks like, so `rivc compile` can check it without Spark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from .secrets import SecretEnv, SecretStr, SecretUrl, StorageOptions, secret_keys
from .specbase import Location, Spec, StrList, _as_tuple

# --------------------------------------------------------------------------- sources


# Kafka's settings that carry credentials (its documentation's), with or without `kafka.`
_KAFKA_CREDENTIALS = (
    "sasl.jaas.config",
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.password",
)
KafkaOptions = Annotated[
    dict[str, str],
    secret_keys(*_KAFKA_CREDENTIALS, *(f"kafka.{k}" for k in _KAFKA_CREDENTIALS)),
]
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


class DatagenConfig(Spec):
    pattern: Literal["orders", "users", "pageviews"]
    events_per_second: float = Field(1, ge=0)
    max_events: int = Field(0, ge=0)
    stream_name: str = "datagen"
    seed: int | None = None
    cdc_mode: bool = False
    stream: bool = False


class DeltaSourceConfig(Spec):
    """A Delta table that exists: its current version, read by Spark's tasks."""

    table_uri: Location
    storage_options: StorageOptions = {}


class TableSourceConfig(Spec):
    """A table in Spark's catalog, read as it is now: `table`, `schema.table` or
    `catalog.schema.table`."""

    name: str = Field(min_length=1)


class FilesSourceConfig(Spec):
    path: Location
    format: Literal["json", "jsonl", "csv", "parquet"] = "parquet"
    stream: bool = False
    max_files_per_trigger: int | None = Field(None, gt=0)
    header: bool = True
    delimiter: str = ","
    options: dict[str, str | int | bool] = {}


class MqttSourceConfig(Spec):
    """An MQTT subscription; JSON payloads are parsed into the table's declared columns."""

    url: SecretUrl  # mqtt://host:1883 or mqtts://host:8883
    topics: StrList = Field(min_length=1)  # patterns with + and #
    qos: Literal[0, 1, 2] = 1
    client_id: str | None = None  # default: rivc-<project>-<source>-<table>
    clean_session: bool = False  # False: the broker keeps the subscription and queues messages
    username: str | None = None
    password: SecretStr | None = None
    password_env: SecretEnv | None = None
    ca_file: str | None = None  # mqtts: a CA bundle instead of the system's
    keepalive_s: int = Field(30, gt=0)
    metadata_columns: bool = False  # adds mqtt_topic, mqtt_qos, mqtt_received_at
    max_messages_per_trigger: int = Field(10_000, gt=0)
    drain_ms: int = Field(1_000, ge=0)  # available_now: quiet time that ends the catch-up
    stream: Literal[True] = True

    _tuple = field_validator("topics", mode="before")(_as_tuple)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^mqtts?://[^/:]+(:\d+)?/?$", value):
            raise ValueError("expected mqtt://host[:port] or mqtts://host[:port]")
        return value


class KafkaSecurity(Spec):
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = None
    password: SecretStr | None = None
    password_env: SecretEnv | None = None

    @model_validator(mode="after")
    def _sasl(self) -> KafkaSecurity:
        if self.protocol.startswith("SASL") and not (self.sasl_mechanism and self.username):
            raise ValueError(f"protocol {self.protocol} needs sasl_mechanism and username")
        return self


class KafkaSourceConfig(Spec):
    """Spark's own Kafka source; values are JSON parsed into the declared columns."""

    brokers: StrList = Field(min_length=1)  # host:port
    topic: str | None = None
    topics: StrList = ()
    pattern: str | None = None
    starting_offsets: Literal["earliest", "latest"] = "latest"
    max_offsets_per_trigger: int | None = Field(None, gt=0)
    fail_on_data_loss: bool = True
    metadata_columns: bool = False  # adds kafka_key, kafka_topic, kafka_partition, ...
    security: KafkaSecurity = KafkaSecurity()
    options: KafkaOptions = {}  # more kafka.* consumer settings
    stream: Literal[True] = True

    _tuple = field_validator("brokers", "topics", mode="before")(_as_tuple)

    @field_validator("brokers")
    @classmethod
    def _brokers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for broker in value:
            if not re.match(r"^[^:/\s]+:\d+$", broker):
                raise ValueError(f"broker {broker!r} is not host:port")
        return value

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSourceConfig:
        if sum(bool(x) for x in (self.topic, self.topics, self.pattern)) != 1:
            raise ValueError("set exactly one of topic, topics or pattern")
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern is not a regular expression: {exc}") from None
        return self


MQTT_METADATA = {"mqtt_topic": "string", "mqtt_qos": "int", "mqtt_received_at": "timestamp"}
KAFKA_METADATA = {
    "kafka_key": "string",
    "kafka_topic": "string",
    "kafka_partition": "int",
    "kafka_offset": "bigint",
    "kafka_timestamp": "timestamp",
}


class RelationalConfig(Spec):
    """postgres and mysql take their settings on the table itself; `config:` stays empty."""


class PostgresCdcConfig(Spec):
    """postgres-cdc's settings, on the source (one slot and publication serve its tables):
    the seed's names (docs/cdc.md). The defaults name both after the project and source."""

    slot_name: str | None = Field(None, pattern=r"^[a-z0-9_]{1,63}$")
    publication_name: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    auto_create_slot: bool = True
    auto_create_publication: bool = True
    # rows a first snapshot lands at a time, in primary-key order: a killed run's next run
    # reads on from the last landed part (docs/cdc.md)
    snapshot_chunk_size: int = Field(1_000_000, ge=1)


class MysqlCdcConfig(Spec):
    """mysql-cdc's settings, on the source: the seed's `server_id`, the id rivc's binlog reader
    takes among the server's replicas (default: one derived from project and source)."""

    server_id: int | None = Field(None, ge=1, le=2**32 - 1)


def envelope(
    columns: Mapping[str, str], position: Mapping[str, str], transaction: Mapping[str, str]
) -> dict[str, str] | None:
    """A change log's landed columns (unwrap_cdc reads them): the kind of change (r: read by
    the snapshot, c, u, d), the row before and after, the log's own columns for where the
    change's commit is (`position`), an order of all changes (`sequence_by: seq`), the log's
    columns of its transaction, and its time. None (unknown until run) when no columns are
    declared."""
    if not columns:
        return None
    image = "struct<" + ",".join(f"{k}:{v}" for k, v in columns.items()) + ">"
    head = {"op": "string", "before": image, "after": image, **position}
    return {**head, "seq": "decimal(38,0)", **transaction, "commit_time": "timestamp"}


def cdc_columns(_config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    """postgres-cdc's (and datagen's cdc_mode) envelope: the commit's LSN and transaction id."""
    return envelope(columns, {"commit_lsn": "decimal(20,0)"}, {"txid": "bigint"})


def mysql_cdc_columns(_config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    """mysql-cdc's envelope: the binlog coordinates of the commit, and its GTID."""
    position = {"binlog_file": "string", "binlog_pos": "bigint"}
    return envelope(columns, position, {"gtid": "string"})


# Columns each datagen pattern produces (Spark SQL types); cdc_mode wraps them in an envelope.
DATAGEN_COLUMNS: dict[str, dict[str, str]] = {
    "orders": {
        "order_id": "bigint",
        "customer_id": "bigint",
        "product": "string",
        "quantity": "int",
        "total": "decimal(10,2)",
        "status": "string",
        "created_at": "timestamp",
    },
    "users": {"user_id": "bigint", "name": "string", "email": "string", "created_at": "timestamp"},
    "pageviews": {
        "page_url": "string",
        "user_id": "bigint",
        "timestamp": "timestamp",
        "referrer": "string",
    },
}


def datagen_columns(config: DatagenConfig) -> dict[str, str]:
    cols = DATAGEN_COLUMNS[config.pattern]
    if not config.cdc_mode:
        return dict(cols)
    struct = "struct<" + ",".join(f"{k}:{v}" for k, v in cols.items()) + ">"
    return {"op": "string", "before": struct, "after": struct, "ts": "timestamp"}


# --------------------------------------------------------------------------- sinks

Compression = Literal["snappy", "gzip", "lz4", "zstd", "none"]
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B|B)?\s*$", re.I)
_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_size(value: int | str) -> int:
    """'128MB' -> 128000000; plain integers are bytes."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a size such as 128MB")
    return int(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]


def _valid_size(value: int | str) -> int | str:
    parse_size(value)
    return value


class Scd2Columns(Spec):
    """The columns in which a `mode: scd2` sink keeps each version's validity: from and to hold
    unwrap_cdc's `sequence_by` values (to is null for the current version)."""

    valid_from: str = "valid_from"
    valid_to: str = "valid_to"
    is_current: str = "is_current"

    @model_validator(mode="after")
    def _distinct(self) -> Scd2Columns:
        if len({self.valid_from, self.valid_to, self.is_current}) < 3:
            raise ValueError("valid_from, valid_to and is_current need three different names")
        return self


class SinkConfig(Spec):
    """What every sink's `config:` can say about itself, for compile and the run: override these
    in a connector's spec (docs/architecture.md, "A connector")."""

    def merge_by(self) -> tuple[str, ...]:
        """The keys the sink merges or upserts each batch by; () when it appends or overwrites."""
        return ()

    def history(self) -> Scd2Columns | None:
        """The validity columns when the sink keeps every version of a key (`mode: scd2`)."""
        return None

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        """The config fields that name columns of the sink's input (checked at compile)."""
        out: dict[str, tuple[str, ...]] = {}
        for name in ("merge_keys", "partition_by", "key_fields", "key_columns", "time_column"):
            value = getattr(self, name, None)
            if value:
                out[name] = (value,) if isinstance(value, str) else tuple(value)
        return out


class DeltaSinkConfig(SinkConfig):
    table_uri: Location
    mode: Literal["append", "overwrite", "merge", "scd2"] = "append"
    merge_keys: StrList = ()
    scd2: Scd2Columns = Scd2Columns()
    partition_by: StrList = ()
    compression: Compression = "snappy"
    target_file_size: int | None = Field(None, gt=0)
    table_properties: dict[str, str] = {}
    schema_evolution: Literal["strict", "add_columns"] = "strict"
    storage_options: StorageOptions = {}
    auto_create_table: bool = True  # false: a missing table is refused, never made
    spark_write_threshold: int | str = "64MB"  # batches Spark estimates at least this big are
    # written by its executors; smaller ones go through the driver as one file

    _tuple = field_validator("merge_keys", "partition_by", mode="before")(_as_tuple)
    _size = field_validator("spark_write_threshold")(_valid_size)

    @model_validator(mode="after")
    def _keys(self) -> DeltaSinkConfig:
        if self.mode in ("merge", "scd2") and not self.merge_keys:
            raise ValueError(f"mode {self.mode} needs merge_keys")
        return self

    def merge_by(self) -> tuple[str, ...]:
        return self.merge_keys if self.mode in ("merge", "scd2") else ()

    def history(self) -> Scd2Columns | None:
        return self.scd2 if self.mode == "scd2" else None


class CsvOptions(Spec):
    delimiter: str = Field(",", min_length=1, max_length=1)
    header: bool = True
    quote: str = Field('"', min_length=1, max_length=1)
    null_value: str = ""


class FilesSinkConfig(SinkConfig):
    path: Location
    format: Literal["parquet", "csv", "jsonl", "json", "avro"] = "parquet"
    # append: every batch adds its files; overwrite: a batch's files replace the earlier ones
    mode: Literal["append", "overwrite"] = "append"
    compression: Literal["snappy", "zstd", "gzip", "lz4", "brotli", "none"] | None = None
    row_group_size: int | None = Field(None, gt=0)
    partitioning: Literal["none", "day", "hour", "columns"] = "none"
    partition_by: StrList = ()
    time_column: str | None = None
    max_file_size: int | str | None = None
    csv: CsvOptions = CsvOptions()
    avro_namespace: str = "rivc"
    avro_record_name: str | None = None
    storage_options: StorageOptions = {}

    _tuple = field_validator("partition_by", mode="before")(_as_tuple)

    @field_validator("max_file_size")
    @classmethod
    def _size(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            parse_size(value)
        return value

    @model_validator(mode="after")
    def _combination(self) -> FilesSinkConfig:
        if self.partitioning == "columns" and not self.partition_by:
            raise ValueError("partitioning columns needs partition_by")
        if self.partition_by and self.partitioning != "columns":
            raise ValueError("partition_by needs partitioning: columns")
        text = self.format in ("csv", "jsonl", "json")
        if text and self.compression not in (None, "none", "gzip", "zstd"):
            raise ValueError(f"{self.format} files take compression gzip, zstd or none")
        if self.format == "avro" and self.compression not in (None, "none", "snappy", "zstd"):
            raise ValueError("avro files take compression snappy, zstd or none")
        return self


class StdoutSinkConfig(SinkConfig):
    pretty: bool = False
    limit: int | None = Field(None, gt=0)


class IcebergCatalog(Spec):
    type: Literal["sql", "rest", "glue"] = "sql"
    name: str = "rivc"  # a SQL catalog keeps its tables under its name (Spark's catalog name)
    uri: SecretUrl | None = None
    warehouse: Location | None = None
    credential: SecretStr | None = None  # client_id:client_secret (OAuth2)
    token: SecretStr | None = None
    # pyiceberg's own catalog properties, passed as they are (an OAuth2 server's
    # `oauth2-server-uri` and `scope`, `header.*`, `rest.sigv4-enabled`, ...)
    properties: IcebergProperties = {}


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


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"


class DatabaseSinkConfig(SinkConfig):
    """A database table, written through a staging table and applied in one transaction with
    the batch id and places (docs/sinks.md): the postgres and mysql sinks."""

    connection: str = Field(min_length=1)  # a profile connection of the sink's database
    table: str = Field(pattern=rf"^({_IDENTIFIER}\.)?{_IDENTIFIER}$")  # [schema.]table
    mode: Literal["append", "overwrite", "upsert"] = "append"
    key_columns: StrList = ()
    schema_evolution: Literal["strict", "add_columns"] = "strict"
    auto_create_table: bool = True  # false: a missing table is refused, never made

    _tuple = field_validator("key_columns", mode="before")(_as_tuple)

    @model_validator(mode="after")
    def _keys(self) -> DatabaseSinkConfig:
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode upsert needs key_columns")
        if self.key_columns and self.mode != "upsert":
            raise ValueError("key_columns is for mode upsert")
        return self

    def merge_by(self) -> tuple[str, ...]:
        return self.key_columns

    def qualified(self) -> tuple[str | None, str]:
        """(schema, table): the schema (a MySQL database) None when the table names none."""
        schema, _, name = self.table.rpartition(".")
        return schema or None, name


class PostgresSinkConfig(DatabaseSinkConfig):
    """A PostgreSQL table (a table without a schema is in `public`)."""


class MysqlSinkConfig(DatabaseSinkConfig):
    """A MySQL or MariaDB table (a table without a database is in the connection's)."""


def merge_keys_of(config: Any) -> tuple[str, ...]:
    """The keys a sink merges or upserts by; () for a sink that only appends or overwrites."""
    return config.merge_by() if isinstance(config, SinkConfig) else ()


def history_of(config: Any) -> Scd2Columns | None:
    """The validity columns of a sink that keeps every version (`mode: scd2`), else None."""
    return config.history() if isinstance(config, SinkConfig) else None


def sink_mode(config: Any) -> str | None:
    """How a sink applies a batch: `append`, `overwrite` or `merge` (by key); None for sinks that
    only show or send rows (stdout, a connector without a mode)."""
    if merge_keys_of(config):
        return "merge"
    mode = getattr(config, "mode", None)
    return mode if mode in ("append", "overwrite") else None
