"""The datagen connectors' compile half: their `config:` specs and registry entries (read by compile
without Spark; the runtime half is beside it in this package)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from rivc.compiler.connector import RUNTIME, ConnectorInfo
from rivc.compiler.loading.specbase import Spec


class DatagenConfig(Spec):
    pattern: Literal["orders", "users", "pageviews"]
    events_per_second: float = Field(1, ge=0)
    max_events: int = Field(0, ge=0)
    stream_name: str = "datagen"
    seed: int | None = None
    cdc_mode: bool = False
    stream: bool = False


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


def _datagen(config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    return dict(columns) or datagen_columns(config)


ENTRIES = (
    ConnectorInfo(
        "datagen",
        "source",
        "generate",
        DatagenConfig,
        "synthetic orders, users or pageviews; batch or stream",
        f"{RUNTIME}.datagen.source:read",
        columns=_datagen,
    ),
)
