"""The nats connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig, _with_metadata
from rivc.compiler.loading.secrets import (
    SecretEnv,
    SecretStr,
    SecretUrl,
)
from rivc.compiler.loading.specbase import Spec, StrList, _as_tuple
from rivc.compiler.payload import Carries, MessageSource


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


class NatsSourceConfig(MessageSource, NatsServer):
    """A JetStream stream read by sequence: a stream's messages stay on the server, so a
    failed batch is read again from it; the server's durable consumer follows the commits."""

    subjects: StrList = ()  # filters (with * and >); default: every subject of the stream
    durable: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]+$")  # default rivc-<project>-<table>
    start: Literal["first", "new"] = "first"  # where a stream with no checkpoint starts
    max_messages_per_trigger: int = Field(10_000, gt=0)

    _tuple = field_validator("subjects", mode="before")(_as_tuple)

    @field_validator("subjects")
    @classmethod
    def _filters(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for one in value:
            if not re.match(_FILTER, one):
                raise ValueError(f"subject filter {one!r} is not tokens separated by dots")
        return value


class NatsSinkConfig(Carries, SinkConfig, NatsServer):
    """Each row a JSON message on `subject` of a JetStream stream, exactly once per batch: the
    batch id is committed in the server's `rivc_commits` key-value bucket (docs/sinks.md)."""

    subject: str = Field(pattern=_SUBJECT)
    auto_create_stream: bool = True  # a missing stream is created with `subject` (else refused)


NATS_METADATA = {"nats_subject": "string", "nats_seq": "bigint", "nats_time": "timestamp"}


ENTRIES = (
    ConnectorInfo(
        "nats",
        "source",
        "stream",
        NatsSourceConfig,
        "a NATS JetStream stream (JSON payloads), read by sequence; streaming",
        f"{RUNTIME}.nats.source:read",
        columns=_with_metadata(NATS_METADATA),
        probe=f"{RUNTIME}.nats.sink:probe",
        lag=f"{RUNTIME}.nats.sink:lag",
        single_consumer=True,
    ),
    ConnectorInfo(
        "nats",
        "sink",
        "message",
        NatsSinkConfig,
        "JSON messages on a NATS JetStream subject, exactly-once per batch",
        f"{RUNTIME}.nats.sink:JetStreamSink",
        probe=f"{RUNTIME}.nats.sink:probe",
        holds="files",
    ),
)
