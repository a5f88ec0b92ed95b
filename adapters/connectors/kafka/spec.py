"""The kafka connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, _with_metadata
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import (
    SecretEnv,
    SecretStr,
    secret_keys,
)
from rivc.compiler.loading.specbase import Spec, StrList, _as_tuple
from rivc.compiler.payload import MessageSource

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


class KafkaOAuth(Spec):
    """SASL/OAUTHBEARER with the client credentials grant (KIP-768): the client gets its token
    from the identity provider's token endpoint."""

    token_endpoint_url: str = Field(pattern=r"^https?://")
    client_id: str
    client_secret: SecretStr | None = None
    client_secret_env: SecretEnv | None = None
    scope: str | None = None


class KafkaKerberos(Spec):
    """SASL/GSSAPI: a principal and its keytab on every machine that reads."""

    principal: str
    keytab: str
    service_name: str = "kafka"


class KafkaSecurity(Spec):
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"] | None
    ) = None
    username: str | None = None
    password: SecretStr | None = None
    password_env: SecretEnv | None = None
    oauth: KafkaOAuth | None = None  # OAUTHBEARER
    kerberos: KafkaKerberos | None = None  # GSSAPI

    @model_validator(mode="after")
    def _sasl(self) -> KafkaSecurity:
        mechanism = self.sasl_mechanism
        if self.protocol.startswith("SASL") and not mechanism:
            raise ValueError(f"protocol {self.protocol} needs sasl_mechanism")
        if mechanism and not self.protocol.startswith("SASL"):
            raise ValueError("sasl_mechanism needs protocol SASL_SSL or SASL_PLAINTEXT")
        needs = {"OAUTHBEARER": ("oauth", self.oauth), "GSSAPI": ("kerberos", self.kerberos)}
        if mechanism in needs and needs[mechanism][1] is None:
            raise ValueError(f"sasl_mechanism {mechanism} needs {needs[mechanism][0]}")
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not self.username:
            raise ValueError(f"sasl_mechanism {mechanism} needs username")
        return self


class KafkaSourceConfig(MessageSource):
    """Spark's own Kafka source; values are JSON parsed into the declared columns."""

    brokers: StrList = Field(min_length=1)  # host:port
    topic: str | None = None
    topics: StrList = ()
    pattern: str | None = None
    # earliest, latest, or an offset per partition: {topic: {partition: offset}} (-2 earliest,
    # -1 latest, as Spark's startingOffsets); where a new stream (no checkpoint) starts
    starting_offsets: Literal["earliest", "latest"] | dict[str, dict[str, int]] = "latest"
    starting_timestamp: int | None = Field(None, ge=0)  # ms: the first offset at or after it
    consumer_group: str | None = Field(None, min_length=1)  # kafka.group.id (ACLs, quotas)
    max_offsets_per_trigger: int | None = Field(None, gt=0)
    fail_on_data_loss: bool = True
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
        if self.starting_timestamp is not None and self.starting_offsets != "latest":
            raise ValueError("give starting_offsets or starting_timestamp, not both")
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern is not a regular expression: {exc}") from None
        return self


KAFKA_METADATA = {
    "kafka_key": "string",
    "kafka_topic": "string",
    "kafka_partition": "int",
    "kafka_offset": "bigint",
    "kafka_timestamp": "timestamp",
}


ENTRIES = (
    ConnectorInfo(
        "kafka",
        "source",
        "stream",
        KafkaSourceConfig,
        "Kafka topics (JSON values) through Spark's Kafka connector; streaming",
        f"{RUNTIME}.kafka.source:read",
        columns=_with_metadata(KAFKA_METADATA),
        aliases=aliases.kafka_source,
    ),
)
