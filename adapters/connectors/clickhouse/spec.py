"""The clickhouse connector's compile half: its `config:` spec, the column types it cannot hold,
and its registry entry (read by compile without Spark; the runtime half is sink.py beside it)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rivc.compiler.connector import RUNTIME, ConnectorInfo, SinkConfig
from rivc.compiler.importers import aliases
from rivc.compiler.loading.secrets import SecretEnv, SecretStr
from rivc.compiler.loading.specbase import StrList, _as_tuple

_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


class ClickHouseSinkConfig(SinkConfig):
    """A ClickHouse table over the HTTP interface: each row carries its batch id
    (`_rivc_batch`), and a batch counts once its marker is in `_rivc_commits` beside the table;
    a rerun deletes what an unfinished attempt inserted before inserting again (docs/sinks.md)."""

    url: str = Field(pattern=r"^https?://[^\s/]+/?$")  # the HTTP interface: http://host:8123
    database: str = Field("default", pattern=_IDENTIFIER)
    table: str = Field(pattern=_IDENTIFIER)
    username: str = "default"
    password: SecretStr | None = None
    password_env: SecretEnv | None = None  # the password, from this environment variable
    access_token: SecretStr | None = None  # a bearer token (ClickHouse Cloud), not a password
    mode: Literal["append", "upsert"] = "append"
    # upsert: a ReplacingMergeTree ordered by these, the batch id its version
    key_columns: StrList = ()
    auto_create_table: bool = True  # false: a missing table is refused, never made
    batch_size: int = Field(100_000, ge=1, le=1_000_000)  # rows per INSERT request
    compression: Literal["gzip", "none"] = "gzip"  # of each INSERT's body
    timeout_s: float = Field(300, gt=0)  # per request; also the wait for a delete to finish
    max_retries: int = Field(3, ge=0)  # a batch begun again after a lost connection or a 5xx
    initial_backoff_ms: int = Field(200, ge=0)
    max_backoff_ms: int = Field(5_000, ge=0)

    _tuple = field_validator("key_columns", mode="before")(_as_tuple)

    @model_validator(mode="after")
    def _checks(self) -> ClickHouseSinkConfig:
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode upsert needs key_columns")
        if self.key_columns and self.mode != "upsert":
            raise ValueError("key_columns is for mode upsert")
        given = [k for k in ("password", "password_env", "access_token") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"give one of password, password_env and access_token, not {given}")
        return self

    def merge_by(self) -> tuple[str, ...]:
        return self.key_columns


_NESTED = re.compile(r"\b(struct|map)<")
_INTERVAL = re.compile(r"\binterval\b")
_VOID = re.compile(r"\b(void|null)\b")


def cannot_hold(spark_type: str) -> str | None:
    """Why a ClickHouse column cannot hold a Spark type exactly, with the fix; None when it can.
    Timestamps outside 1970-2105 or with fractions of a second (on a server without DateTime64)
    are refused at run time, by value."""
    t = spark_type.strip().lower()
    if _NESTED.search(t):
        return (
            "the ClickHouse sink writes no struct or map column (its Tuple and Map types differ "
            "by server version); flatten it, or to_json it in the model"
        )
    if _INTERVAL.search(t):
        return "ClickHouse has no interval type; cast it in the model, e.g. to bigint seconds"
    if _VOID.search(t):
        return "an untyped NULL column has no type to store; cast it, e.g. CAST(NULL AS string)"
    return None


def _dataset(config: Any) -> str | None:
    return f"{config.get('database') or 'default'}.{config.get('table')}"


ENTRIES = (
    ConnectorInfo(
        "clickhouse",
        "sink",
        "warehouse",
        ClickHouseSinkConfig,
        "a ClickHouse table over HTTP: append, or upsert into a ReplacingMergeTree; exactly once",
        f"{RUNTIME}.clickhouse.sink:ClickHouseSink",
        aliases=aliases.clickhouse_sink,
        dataset=_dataset,
        cannot_hold=cannot_hold,
        probe=f"{RUNTIME}.clickhouse.sink:probe",
    ),
)
