"""The mqtt connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, _with_metadata
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import (
    SecretEnv,
    SecretStr,
    SecretUrl,
)
from rivc.compiler.loading.specbase import Spec, StrList, _as_tuple
from rivc.compiler.payload import MessageSource


class LastWill(Spec):
    """What the broker publishes for the receiver when its connection ends without a
    DISCONNECT (a killed process, a lost network): connection monitoring."""

    topic: str = Field(min_length=1)
    message: str = ""
    qos: Literal[0, 1, 2] = 0
    retain: bool = False


class MqttSourceConfig(MessageSource):
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
    protocol_version: Literal["5", "3.1.1"] = "5"  # 3.1.1 for a broker without MQTT 5
    connect_timeout_s: float = Field(10.0, gt=0)  # for the connection and the broker's CONNACK
    # messages the broker may send before the receiver's acknowledgements (MQTT 5's Receive
    # Maximum; a 3.1.1 broker decides this itself)
    max_inflight: int = Field(65_535, ge=1, le=65_535)
    # a lost connection is made again after retry_initial_ms, each next wait multiplied, up to
    # retry_max_ms; a broker that refuses the client (credentials, protocol) stops the stream
    retry_initial_ms: int = Field(100, gt=0)
    retry_max_ms: int = Field(10_000, gt=0)
    retry_multiplier: float = Field(2.0, ge=1.0)
    last_will: LastWill | None = None
    max_messages_per_trigger: int = Field(10_000, gt=0)
    drain_ms: int = Field(1_000, ge=0)  # available_now: quiet time that ends the catch-up
    stream: Literal[True] = True

    _tuple = field_validator("topics", mode="before")(_as_tuple)

    @field_validator("protocol_version", mode="before")
    @classmethod
    def _version(cls, value: object) -> object:
        return str(value) if isinstance(value, int | float) else value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^mqtts?://[^/:]+(:\d+)?/?$", value):
            raise ValueError("expected mqtt://host[:port] or mqtts://host[:port]")
        return value


MQTT_METADATA = {"mqtt_topic": "string", "mqtt_qos": "int", "mqtt_received_at": "timestamp"}


ENTRIES = (
    ConnectorInfo(
        "mqtt",
        "source",
        "stream",
        MqttSourceConfig,
        "MQTT topics (JSON payloads), with a durable local spool; streaming",
        f"{RUNTIME}.mqtt.source:read",
        columns=_with_metadata(MQTT_METADATA),
        probe=f"{RUNTIME}.mqtt.source:probe",
        aliases=aliases.mqtt_source,
        single_consumer=True,
    ),
)
