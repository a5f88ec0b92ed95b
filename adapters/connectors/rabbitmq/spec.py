"""The rabbitmq connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig, _with_metadata
from rivc.compiler.loading.secrets import (
    SecretEnv,
    SecretUrl,
)
from rivc.compiler.payload import Carries, MessageSource


class RabbitmqSinkConfig(Carries, SinkConfig):
    """Rows as persistent JSON messages to a RabbitMQ exchange, confirmed by the broker, each with
    a `message_id` that reruns send unchanged (docs/sinks.md)."""

    url: SecretUrl = Field(pattern=r"^amqps?://")  # amqp://user@host:5672/vhost (vhost / is %2F)
    password_env: SecretEnv | None = None  # the password, from the environment (not in the url)
    exchange: str = ""  # "" is the default exchange: routing_key names the queue
    routing_key: str
    queue: str | None = None  # declared durable (and bound to the exchange) before publishing
    max_in_flight: int = Field(1_000, ge=1, le=100_000)  # messages awaiting the broker's confirm


class RabbitmqSourceConfig(MessageSource):
    """A RabbitMQ queue, consumed by rivc: a message is acknowledged once the sink committed the
    batch that holds it (docs/streaming.md)."""

    url: SecretUrl = Field(pattern=r"^amqps?://")  # amqp://user@host:5672/vhost (vhost / is %2F)
    password_env: SecretEnv | None = None
    queue: str = Field(min_length=1)  # an existing queue
    max_messages_per_trigger: int = Field(10_000, gt=0)
    stream: Literal[True] = True


RABBITMQ_METADATA = {
    "rabbitmq_exchange": "string",
    "rabbitmq_routing_key": "string",
    "rabbitmq_message_id": "string",
    "rabbitmq_redelivered": "boolean",
    "rabbitmq_timestamp": "timestamp",
}


ENTRIES = (
    ConnectorInfo(
        "rabbitmq",
        "source",
        "stream",
        RabbitmqSourceConfig,
        "a RabbitMQ queue (JSON payloads), acknowledged after the sink commits; streaming",
        f"{RUNTIME}.rabbitmq.source:read",
        columns=_with_metadata(RABBITMQ_METADATA),
        probe=f"{RUNTIME}.rabbitmq.sink:probe",
        lag=f"{RUNTIME}.rabbitmq.sink:lag",
        single_consumer=True,
    ),
    ConnectorInfo(
        "rabbitmq",
        "sink",
        "message",
        RabbitmqSinkConfig,
        "JSON messages to a RabbitMQ exchange, publisher confirms, stable message ids; "
        "at least once",
        f"{RUNTIME}.rabbitmq.sink:RabbitmqSink",
        holds="files",
        probe=f"{RUNTIME}.rabbitmq.sink:probe",
    ),
)
