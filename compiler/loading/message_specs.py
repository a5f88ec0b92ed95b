"""Compile-time specs of the message connectors' `config:` blocks: NATS JetStream, RabbitMQ and
HTTP webhooks (the rest is in connector_specs.py)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from .connector_specs import SinkConfig
from .secrets import SecretEnv, SecretEnvMap, SecretPathUrl, SecretStr, SecretUrl, secret_keys
from .specbase import Spec, StrList, _as_tuple

# a webhook's headers: Authorization, Cookie, X-Api-Key... are credentials; these are not
PUBLIC_HEADERS = ("content-type", "accept", "accept-encoding", "content-encoding", "user-agent")
WebhookHeaders = Annotated[dict[str, str], secret_keys(*PUBLIC_HEADERS, public=True)]


class NatsServer(Spec):
    """A NATS server with JetStream, and how to authenticate to it."""

    url: SecretUrl  # nats://host:4222 (tls://host:4222 for TLS); several, comma-separated
    stream: str = Field(pattern=r"^[A-Za-z0-9_-]+$")  # the JetStream stream
    username: str | None = None
    password: SecretStr | None = None
    password_env: SecretEnv | None = None
    token_env: SecretEnv | None = None  # an auth token, from the environment

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        for one in value.split(","):
            if not re.match(r"^(nats|tls)://[^/:,\s]+(:\d+)?/?$", one.strip()):
                raise ValueError(f"{one.strip()!r} is not nats://host[:port] or tls://host[:port]")
        return value


_SUBJECT = r"^[^.\s*>]+(\.[^.\s*>]+)*$"  # tokens, no wildcards
_FILTER = r"^[^.\s]+(\.[^.\s]+)*$"  # tokens; * and > allowed


class NatsSourceConfig(NatsServer):
    """A JetStream stream read by sequence: a stream's messages stay on the server, so a
    failed batch is read again from it; the server's durable consumer follows the commits."""

    subjects: StrList = ()  # filters (with * and >); default: every subject of the stream
    durable: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]+$")  # default rivc-<project>-<table>
    start: Literal["first", "new"] = "first"  # where a stream with no checkpoint starts
    metadata_columns: bool = False  # adds nats_subject, nats_seq, nats_time
    max_messages_per_trigger: int = Field(10_000, gt=0)

    _tuple = field_validator("subjects", mode="before")(_as_tuple)

    @field_validator("subjects")
    @classmethod
    def _filters(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for one in value:
            if not re.match(_FILTER, one):
                raise ValueError(f"subject filter {one!r} is not tokens separated by dots")
        return value


class NatsSinkConfig(SinkConfig, NatsServer):
    """Each row a JSON message on `subject` of a JetStream stream, exactly once per batch: the
    batch id is committed in the server's `rivc_commits` key-value bucket (docs/sinks.md)."""

    subject: str = Field(pattern=_SUBJECT)
    auto_create_stream: bool = True  # a missing stream is created with `subject` (else refused)


class WebhookSinkConfig(SinkConfig):
    """Rows as JSON to an HTTP endpoint, each request with an `Idempotency-Key` that a retry or
    a rerun sends again unchanged (docs/sinks.md)."""

    url: SecretPathUrl = Field(pattern=r"^https?://[^\s/]+")  # its path may be the secret
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    headers: WebhookHeaders = {}  # every value secret but those of plainly public headers
    # header -> the environment variable holding its value, or a text naming variables as
    # `{NAME}` ("Bearer {TOKEN}"), filled in at run time
    headers_env: SecretEnvMap = {}
    batch_size: int = Field(1, ge=1, le=10_000)  # rows per request; above 1 a JSON array
    # each row's own id (its idempotency key) under this field of its JSON object; none: only
    # the request's Idempotency-Key header
    id_field: str | None = Field(None, min_length=1)
    timeout_s: float = Field(30, gt=0)
    max_in_flight: int = Field(4, ge=1, le=64)  # requests at once
    max_attempts: int = Field(5, ge=1)  # per request: 408, 429, 5xx, timeouts, lost connections
    initial_backoff_ms: int = Field(500, ge=0)
    max_backoff_ms: int = Field(30_000, ge=0)


class RabbitmqSinkConfig(SinkConfig):
    """Rows as persistent JSON messages to a RabbitMQ exchange, confirmed by the broker, each with
    a `message_id` that reruns send unchanged (docs/sinks.md)."""

    url: SecretUrl = Field(pattern=r"^amqps?://")  # amqp://user@host:5672/vhost (vhost / is %2F)
    password_env: SecretEnv | None = None  # the password, from the environment (not in the url)
    exchange: str = ""  # "" is the default exchange: routing_key names the queue
    routing_key: str
    queue: str | None = None  # declared durable (and bound to the exchange) before publishing
    max_in_flight: int = Field(1_000, ge=1, le=100_000)  # messages awaiting the broker's confirm


class RabbitmqSourceConfig(Spec):
    """A RabbitMQ queue, consumed by rivc: a message is acknowledged once the sink committed the
    batch that holds it (docs/streaming.md)."""

    url: SecretUrl = Field(pattern=r"^amqps?://")  # amqp://user@host:5672/vhost (vhost / is %2F)
    password_env: SecretEnv | None = None
    queue: str = Field(min_length=1)  # an existing queue
    metadata_columns: bool = False  # adds rabbitmq_routing_key, _message_id, _redelivered, ...
    max_messages_per_trigger: int = Field(10_000, gt=0)
    stream: Literal[True] = True


RABBITMQ_METADATA = {
    "rabbitmq_exchange": "string",
    "rabbitmq_routing_key": "string",
    "rabbitmq_message_id": "string",
    "rabbitmq_redelivered": "boolean",
    "rabbitmq_timestamp": "timestamp",
}
NATS_METADATA = {"nats_subject": "string", "nats_seq": "bigint", "nats_time": "timestamp"}
