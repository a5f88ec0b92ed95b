"""The sqs connectors' compile half: their `config:` specs and registry entries (read by compile without
Spark or boto3; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig, _with_metadata
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import SecretStr
from rivc.compiler.loading.specbase import Spec
from rivc.compiler.payload import Carries, MessageSource


class SqsAuth(Spec):
    """Keys for SQS; without them, boto3's own chain (AWS_ACCESS_KEY_ID, a profile, a role)."""

    access_key_id: str
    secret_access_key: SecretStr
    session_token: SecretStr | None = None


class SqsQueue(Spec):
    """An SQS queue and how to reach it."""

    queue_url: str = Field(pattern=r"^https?://[^\s/]+/\S+$")  # .../<account>/<queue>[.fifo]
    region: str = "us-east-1"
    endpoint_url: str | None = Field(None, pattern=r"^https?://")  # a local SQS (moto, LocalStack)
    auth: SqsAuth | None = None

    @property
    def fifo(self) -> bool:
        return self.queue_url.endswith(".fifo")


class SqsSourceConfig(MessageSource, SqsQueue):
    """An SQS queue read by rivc: each message spooled under .rivc/spool/ as it is received and
    deleted from the queue once the sink committed the batch that holds it (docs/streaming.md)."""

    # how long a received message stays invisible to other consumers; a message seen again
    # (the time ran out) is recognised by its id and not spooled twice
    visibility_timeout_s: int = Field(300, ge=1, le=43_200)
    wait_time_s: int = Field(1, ge=0, le=20)  # long polling, per ReceiveMessage
    max_messages_per_trigger: int = Field(10_000, gt=0)
    stream: Literal[True] = True


class SqsSinkConfig(Carries, SqsQueue, SinkConfig):
    """Rows as messages to an SQS queue with SendMessageBatch: each with its row's id, the same on
    every rerun (the `rivc_id` attribute; a FIFO queue's deduplication id), and exactly once on a
    FIFO queue within SQS's deduplication window (docs/sinks.md)."""

    batch_size: int = Field(10, ge=1, le=10)  # messages per SendMessageBatch request
    message_group_id: str | None = Field(None, min_length=1, max_length=128)  # FIFO: one group
    message_group_id_field: str | None = Field(None, min_length=1)  # FIFO: a column's value
    deduplication_id_field: str | None = Field(None, min_length=1)  # FIFO: default the row's id
    delay_seconds: int = Field(0, ge=0, le=900)
    max_attempts: int = Field(5, ge=1)  # per message that SQS failed on its side

    @model_validator(mode="after")
    def _queue_kind(self) -> SqsSinkConfig:
        group = self.message_group_id or self.message_group_id_field
        if self.fifo and not group:
            raise ValueError("a FIFO queue needs message_group_id or message_group_id_field")
        if not self.fifo and (group or self.deduplication_id_field):
            raise ValueError(
                "message_group_id, message_group_id_field and deduplication_id_field are for "
                "FIFO queues (a queue_url ending in .fifo)"
            )
        if self.message_group_id and self.message_group_id_field:
            raise ValueError("give message_group_id or message_group_id_field, not both")
        if self.fifo and self.delay_seconds:
            raise ValueError("delay_seconds is per queue on a FIFO queue, not per message")
        if self.payload.format not in ("json", "text"):
            raise ValueError(
                f"an SQS message body is text: payload format {self.payload.format} cannot be "
                "one (json or text)"
            )
        return self

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        return {
            k: (v,)
            for k, v in (
                ("message_group_id_field", self.message_group_id_field),
                ("deduplication_id_field", self.deduplication_id_field),
            )
            if v
        }


def _dataset(config: Any) -> str | None:
    return str(config.get("queue_url")) if config.get("queue_url") else None


SQS_METADATA = {
    "sqs_message_id": "string",
    "sqs_sent_at": "timestamp",
    "sqs_group_id": "string",
    "sqs_receive_count": "int",
}


ENTRIES = (
    ConnectorInfo(
        "sqs",
        "source",
        "stream",
        SqsSourceConfig,
        "an Amazon SQS queue; messages deleted after the sink's commit; streaming",
        f"{RUNTIME}.sqs.source:read",
        columns=_with_metadata(SQS_METADATA),
        single_consumer=True,
    ),
    ConnectorInfo(
        "sqs",
        "sink",
        "message",
        SqsSinkConfig,
        "rows as messages to an Amazon SQS queue; exactly once on FIFO queues",
        f"{RUNTIME}.sqs.sink:SqsSink",
        holds="files",
        aliases=aliases.sqs_sink,
        dataset=_dataset,
    ),
)
