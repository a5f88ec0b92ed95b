"""The connectors: one entry each, read by compile, run, `rivc check`, `rivc doctor` and
`rivc connectors`.

An entry holds the compile half of a connector (its `config:` spec class, the columns a source
table produces, the config fields that name input columns, where a sink writes) and names its
runtime half by import path. rivc.adapters.plane.registry imports that path when a run
needs it, so compile never imports Spark or an adapter, and nothing registers by the side
effect of an import.

Adding a connector takes three pieces (docs/architecture.md): a spec class in
loading/connector_specs.py (loading/message_specs.py), a runtime module under
adapters/connectors/ (a `Sink` subclass, or a `read(spark, ctx)` function for a source) and one
entry in CONNECTORS. Connectors are not
loaded from Python entry points: a connector changes what compile accepts, so it ships with
rivc.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .errors import did_you_mean
from .importers import aliases
from .importers.aliases import Translator
from .loading.connector_specs import (
    KAFKA_METADATA,
    MQTT_METADATA,
    DatagenConfig,
    DeltaSinkConfig,
    DeltaSourceConfig,
    FilesSinkConfig,
    FilesSourceConfig,
    IcebergSinkConfig,
    IcebergSourceConfig,
    KafkaSourceConfig,
    MqttSourceConfig,
    MysqlCdcConfig,
    MysqlSinkConfig,
    PostgresCdcConfig,
    PostgresSinkConfig,
    RelationalConfig,
    SinkConfig,
    StdoutSinkConfig,
    TableSourceConfig,
    cdc_columns,
    datagen_columns,
    mysql_cdc_columns,
)
from .loading.message_specs import (
    NATS_METADATA,
    RABBITMQ_METADATA,
    NatsSinkConfig,
    NatsSourceConfig,
    RabbitmqSinkConfig,
    RabbitmqSourceConfig,
    WebhookSinkConfig,
)
from .loading.specbase import Spec

Columns = Callable[[Any, Mapping[str, str]], "dict[str, str] | None"]


def declared(_config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    """The table's declared columns; None (unknown until run) when none are declared."""
    return dict(columns) or None


def _with_metadata(extra: Mapping[str, str]) -> Columns:
    def columns(config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
        return {**columns, **(extra if config.metadata_columns else {})}

    return columns


def _datagen(config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    return dict(columns) or datagen_columns(config)


def _nowhere(_config: Any) -> str | None:
    return None


def _named(config: Mapping[str, Any]) -> str | None:
    """A sink's dataset as lineage names it: its table or path, from the manifest's config."""
    return next((str(config[k]) for k in ("table_uri", "path", "table") if config.get(k)), None)


@dataclass(frozen=True, slots=True)
class ConnectorInfo:
    name: str
    kind: Literal["source", "sink"]
    category: str
    config: type[Spec]
    description: str
    runtime: str  # "module:attribute": a Sink class, or a source's read(spark, ctx) function
    relational: bool = False  # extracted through a profile connection (adapters/ingest/extract.py)
    # the database it reads or writes through a profile connection (compiler/dialects.py), whose
    # connection `type:` must be this
    database: str | None = None
    # "module:attribute": a change log (a ChangeLog class, adapters/ingest/changelog.py) its
    # tables are read from, through a profile connection when `database` is set; its `config:`
    # is the source's, its tables name a table of the log each
    log: str | None = None
    columns: Columns = declared  # a source table's columns, known at compile time
    location: Callable[[Any], str | None] = _nowhere  # a sink's path or URI (doctor, preflight)
    # a sink's dataset name in OpenLineage events, from its config as the manifest holds it
    dataset: Callable[[Mapping[str, Any]], str | None] = _named
    # what a sink stores values in, for the check of the types it can hold (dbtypes.unwritable):
    # "table" (Delta, Iceberg), "files" (of its config's `format`), None (no typed store)
    holds: Literal["table", "files"] | None = None
    # the config names users bring from the systems rivc replaces: renamed, or refused with a
    # pointer (compiler/importers/aliases.py)
    aliases: Translator | None = None
    # "module:attribute": doctor's reach check, (config, root, storage) -> (ok, detail)
    probe: str | None = None
    # "module:attribute": a stream source's messages waiting for its sink, read from the broker
    # for the scrape endpoint, (config, project, "source.table") -> count or None
    lag: str | None = None
    # "module:attribute": `rivc source freshness` of a source table without Spark, (config,
    # root, storage, column) -> the column's newest value (None: the table is empty)
    newest: str | None = None
    # "module:attribute": `rivc check` of a change-log table, (conn, tables of its source,
    # table) -> what stops it from running, each named (empty: ready)
    preflight: str | None = None
    # a stream whose place is held on the broker for one consumer (an MQTT session and spool, a
    # NATS durable consumer): one sink reads it
    single_consumer: bool = False

    def key_columns(self, config: Any) -> dict[str, tuple[str, ...]]:
        """Config fields that name input columns, for compile-time checks (a sink's spec says
        which: SinkConfig.input_columns)."""
        return config.input_columns() if isinstance(config, SinkConfig) else {}


_RUNTIME = "rivc.adapters.connectors"

CONNECTORS: dict[tuple[str, str], ConnectorInfo] = {
    (c.kind, c.name): c
    for c in (
        ConnectorInfo(
            "postgres",
            "source",
            "database",
            RelationalConfig,
            "PostgreSQL tables and queries (COPY or JDBC), source-safe modes",
            f"{_RUNTIME}.relational:read",
            relational=True,
            database="postgres",
        ),
        ConnectorInfo(
            "mysql",
            "source",
            "database",
            RelationalConfig,
            "MySQL and MariaDB tables and queries (JDBC), source-safe modes",
            f"{_RUNTIME}.relational:read",
            relational=True,
            database="mysql",
        ),
        ConnectorInfo(
            "postgres-cdc",
            "source",
            "database",
            PostgresCdcConfig,
            "PostgreSQL's change log (logical replication, pgoutput): inserts, updates, deletes",
            f"{_RUNTIME}.logsource:read",
            log="rivc.adapters.ingest.cdc:PgOutputLog",
            database="postgres",
            columns=cdc_columns,
            preflight=f"{_RUNTIME}.pgslot:preflight",
        ),
        ConnectorInfo(
            "mysql-cdc",
            "source",
            "database",
            MysqlCdcConfig,
            "MySQL's and MariaDB's binary log (row-based): inserts, updates, deletes",
            f"{_RUNTIME}.logsource:read",
            log="rivc.adapters.ingest.mysqlcdc:BinlogLog",
            database="mysql",
            columns=mysql_cdc_columns,
            preflight=f"{_RUNTIME}.binlog:preflight",
        ),
        ConnectorInfo(
            "datagen",
            "source",
            "generate",
            DatagenConfig,
            "synthetic orders, users or pageviews; batch or stream",
            f"{_RUNTIME}.datagen:read",
            columns=_datagen,
        ),
        ConnectorInfo(
            "files",
            "source",
            "storage",
            FilesSourceConfig,
            "a directory of json, csv or parquet files; batch or stream",
            f"{_RUNTIME}.files_source:read",
        ),
        ConnectorInfo(
            "delta",
            "source",
            "lakehouse",
            DeltaSourceConfig,
            "an existing Delta table (its current version), read by Spark's tasks",
            f"{_RUNTIME}.delta:read_source",
            newest=f"{_RUNTIME}.delta:newest",
        ),
        ConnectorInfo(
            "table",
            "source",
            "lakehouse",
            TableSourceConfig,
            "a table in Spark's catalog (a dbt source), read as it is now by Spark's tasks",
            f"{_RUNTIME}.catalog_table:read_source",
        ),
        ConnectorInfo(
            "iceberg",
            "source",
            "lakehouse",
            IcebergSourceConfig,
            "an existing Iceberg table (its current snapshot), read by Spark's tasks",
            f"{_RUNTIME}.iceberg_source:read_source",
        ),
        ConnectorInfo(
            "mqtt",
            "source",
            "stream",
            MqttSourceConfig,
            "MQTT topics (JSON payloads), with a durable local spool; streaming",
            f"{_RUNTIME}.mqtt:read",
            columns=_with_metadata(MQTT_METADATA),
            probe=f"{_RUNTIME}.mqtt:probe",
            aliases=aliases.mqtt_source,
            single_consumer=True,
        ),
        ConnectorInfo(
            "nats",
            "source",
            "stream",
            NatsSourceConfig,
            "a NATS JetStream stream (JSON payloads), read by sequence; streaming",
            f"{_RUNTIME}.jetstream_source:read",
            columns=_with_metadata(NATS_METADATA),
            probe=f"{_RUNTIME}.jetstream:probe",
            lag=f"{_RUNTIME}.jetstream:lag",
            single_consumer=True,
        ),
        ConnectorInfo(
            "rabbitmq",
            "source",
            "stream",
            RabbitmqSourceConfig,
            "a RabbitMQ queue (JSON payloads), acknowledged after the sink commits; streaming",
            f"{_RUNTIME}.rabbitmq_source:read",
            columns=_with_metadata(RABBITMQ_METADATA),
            probe=f"{_RUNTIME}.rabbitmq:probe",
            lag=f"{_RUNTIME}.rabbitmq:lag",
            single_consumer=True,
        ),
        ConnectorInfo(
            "kafka",
            "source",
            "stream",
            KafkaSourceConfig,
            "Kafka topics (JSON values) through Spark's Kafka connector; streaming",
            f"{_RUNTIME}.kafka:read",
            columns=_with_metadata(KAFKA_METADATA),
        ),
        ConnectorInfo(
            "delta",
            "sink",
            "lakehouse",
            DeltaSinkConfig,
            "Delta Lake tables (delta-rs), exactly-once per batch",
            f"{_RUNTIME}.delta:DeltaSink",
            location=lambda config: config.table_uri,
            holds="table",
            aliases=aliases.delta_sink,
        ),
        ConnectorInfo(
            "iceberg",
            "sink",
            "lakehouse",
            IcebergSinkConfig,
            "Apache Iceberg tables (pyiceberg), exactly-once per batch",
            f"{_RUNTIME}.iceberg:IcebergSink",
            probe=f"{_RUNTIME}.iceberg_catalog:probe",
            dataset=lambda config: f"{config.get('namespace')}.{config.get('table')}",
            holds="table",
            aliases=aliases.iceberg_sink,
        ),
        ConnectorInfo(
            "files",
            "sink",
            "storage",
            FilesSinkConfig,
            "parquet, csv, jsonl, json or avro files, local or s3://",
            f"{_RUNTIME}.files:FilesSink",
            location=lambda config: config.path,
            holds="files",
        ),
        ConnectorInfo(
            "postgres",
            "sink",
            "database",
            PostgresSinkConfig,
            "PostgreSQL tables (COPY by Spark's tasks), exactly-once per batch",
            f"{_RUNTIME}.pgsink:PostgresSink",
            database="postgres",
            holds="table",
        ),
        ConnectorInfo(
            "mysql",
            "sink",
            "database",
            MysqlSinkConfig,
            "MySQL and MariaDB tables (multi-row INSERTs by Spark's tasks), exactly-once per batch",
            f"{_RUNTIME}.mysqlsink:MysqlSink",
            database="mysql",
            holds="table",
        ),
        ConnectorInfo(
            "nats",
            "sink",
            "message",
            NatsSinkConfig,
            "JSON messages on a NATS JetStream subject, exactly-once per batch",
            f"{_RUNTIME}.jetstream:JetStreamSink",
            probe=f"{_RUNTIME}.jetstream:probe",
            holds="files",
        ),
        ConnectorInfo(
            "rabbitmq",
            "sink",
            "message",
            RabbitmqSinkConfig,
            "JSON messages to a RabbitMQ exchange, publisher confirms, stable message ids; "
            "at least once",
            f"{_RUNTIME}.rabbitmq:RabbitmqSink",
            holds="files",
            probe=f"{_RUNTIME}.rabbitmq:probe",
        ),
        ConnectorInfo(
            "webhook",
            "sink",
            "message",
            WebhookSinkConfig,
            "rows as JSON to an HTTP endpoint, with idempotency keys; at least once",
            f"{_RUNTIME}.webhook:WebhookSink",
            holds="files",
            aliases=aliases.webhook_sink,
        ),
        ConnectorInfo(
            "stdout",
            "sink",
            "debug",
            StdoutSinkConfig,
            "JSON lines on standard output",
            f"{_RUNTIME}.stdout:StdoutSink",
        ),
    )
}


def connector(kind: Literal["source", "sink"], name: str) -> ConnectorInfo | None:
    return CONNECTORS.get((kind, name))


def unknown(kind: Literal["source", "sink"], name: str) -> str:
    """The error text for a connector name that is not in the registry."""
    known = sorted(n for k, n in CONNECTORS if k == kind)
    return (
        f"unknown {kind} connector {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})"
    )
