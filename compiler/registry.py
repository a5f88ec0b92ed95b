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
rivc."""

from __future__ import annotations

from typing import Literal

from rivc.adapters.connectors.datagen.spec import ENTRIES as DATAGEN
from rivc.adapters.connectors.delta.spec import ENTRIES as DELTA
from rivc.adapters.connectors.files.spec import ENTRIES as FILES
from rivc.adapters.connectors.iceberg.spec import ENTRIES as ICEBERG
from rivc.adapters.connectors.kafka.spec import ENTRIES as KAFKA
from rivc.adapters.connectors.mqtt.spec import ENTRIES as MQTT
from rivc.adapters.connectors.mysql.spec import ENTRIES as MYSQL
from rivc.adapters.connectors.nats.spec import ENTRIES as NATS
from rivc.adapters.connectors.postgres.spec import ENTRIES as POSTGRES
from rivc.adapters.connectors.rabbitmq.spec import ENTRIES as RABBITMQ
from rivc.adapters.connectors.stdout.spec import ENTRIES as STDOUT
from rivc.adapters.connectors.table.spec import ENTRIES as TABLE
from rivc.adapters.connectors.webhook.spec import ENTRIES as WEBHOOK

from .connector import ConnectorInfo
from .errors import did_you_mean

# the built-in connectors' entries, each from its package's spec
BUILT_IN = (
    DATAGEN,
    DELTA,
    FILES,
    ICEBERG,
    KAFKA,
    MQTT,
    MYSQL,
    NATS,
    POSTGRES,
    RABBITMQ,
    STDOUT,
    TABLE,
    WEBHOOK,
)

CONNECTORS: dict[tuple[str, str], ConnectorInfo] = {
    (c.kind, c.name): c for entries in BUILT_IN for c in entries
}


def connector(kind: Literal["source", "sink"], name: str) -> ConnectorInfo | None:
    return CONNECTORS.get((kind, name))


def unknown(kind: Literal["source", "sink"], name: str) -> str:
    """The error text for a connector name that is not in the registry."""
    known = sorted(n for k, n in CONNECTORS if k == kind)
    return (
        f"unknown {kind} connector {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})"
    )
