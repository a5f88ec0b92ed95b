"""The webhook connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import (
    SecretEnvMap,
    SecretPathUrl,
    secret_keys,
)

# a webhook's headers: Authorization, Cookie, X-Api-Key... are credentials; these are not
PUBLIC_HEADERS = ("content-type", "accept", "accept-encoding", "content-encoding", "user-agent")


WebhookHeaders = Annotated[dict[str, str], secret_keys(*PUBLIC_HEADERS, public=True)]


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


ENTRIES = (
    ConnectorInfo(
        "webhook",
        "sink",
        "message",
        WebhookSinkConfig,
        "rows as JSON to an HTTP endpoint, with idempotency keys; at least once",
        f"{RUNTIME}.webhook.sink:WebhookSink",
        holds="files",
        aliases=aliases.webhook_sink,
    ),
)
