"""The connectors: one entry each, read by compile, run, `rivc check`, `rivc doctor` and
`rivc connectors`.

An entry holds the compile half of a connector (its `config:` spec class, the columns a source
table produces, the config fields that name input columns, where a sink writes) and names its
runtime half by import path. rivc.adapters.plane.registry imports that path when a run
needs it, so compile never imports Spark or an adapter, and nothing registers by the side
effect of an import.

A connector is a package (docs/architecture.md, "A connector"): the built-in ones are listed in
BUILT_IN; an installed distribution adds its own through the `rivc.connectors` entry point group,
each entry point naming a sequence of ConnectorInfo (its package's `ENTRIES`). They are read
once, checked like the built-in ones (each a ConnectorInfo with a spec class and runtime paths,
no name taken twice), and a plugin that fails is named with its distribution, never skipped in
silence: `rivc connectors` lists it, and a project naming a connector it would have added is
told why the name is unknown."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from importlib.metadata import EntryPoint, entry_points
from typing import Literal

from rivc.adapters.connectors.clickhouse.spec import ENTRIES as CLICKHOUSE
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
from rivc.adapters.connectors.sqs.spec import ENTRIES as SQS
from rivc.adapters.connectors.stdout.spec import ENTRIES as STDOUT
from rivc.adapters.connectors.table.spec import ENTRIES as TABLE
from rivc.adapters.connectors.webhook.spec import ENTRIES as WEBHOOK

from .connector import ConnectorInfo, SinkConfig
from .errors import did_you_mean
from .loading.specbase import Spec

# the built-in connectors' entries, each from its package's spec
BUILT_IN = (
    CLICKHOUSE,
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
    SQS,
    STDOUT,
    TABLE,
    WEBHOOK,
)

GROUP = "rivc.connectors"  # the entry point group an installed package adds connectors through

Key = tuple[str, str]  # (kind, name)


@dataclass(frozen=True, slots=True)
class Plugin:
    """An installed distribution's entry point in GROUP: what it added, or why it added nothing."""

    entry_point: str  # its name in the group
    distribution: str  # "name version"
    adds: tuple[Key, ...] = ()
    broken: str | None = None  # the reason none of its connectors were taken


@dataclass(slots=True)
class Catalog:
    connectors: dict[Key, ConnectorInfo]
    plugins: list[Plugin]


_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_PATHS = ("runtime", "log", "probe", "lag", "newest", "preflight")


def _distribution(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "(no distribution)"


def _entries(ep: EntryPoint) -> tuple[ConnectorInfo, ...]:
    """The entries an entry point names, each checked as compile would use it (its runtime is
    imported only when a run needs it)."""
    loaded = ep.load()
    if isinstance(loaded, ConnectorInfo) or not isinstance(loaded, Iterable):
        loaded = (loaded,)
    out: list[ConnectorInfo] = []
    for info in loaded:
        if not isinstance(info, ConnectorInfo):
            raise TypeError(f"{ep.value} holds {type(info).__name__}, not a ConnectorInfo")
        if not (isinstance(info.config, type) and issubclass(info.config, Spec)):
            raise TypeError(f"{info.kind} {info.name!r}: config is not a spec class (Spec)")
        if info.kind == "sink" and not issubclass(info.config, SinkConfig):
            raise TypeError(f"sink {info.name!r}: its config does not extend SinkConfig")
        for f in fields(info):
            path = getattr(info, f.name) if f.name in _PATHS else None
            if path is not None and not (isinstance(path, str) and _PATH.match(path)):
                raise TypeError(f"{info.kind} {info.name!r}: {f.name} {path!r} is not module:name")
        out.append(info)
    return tuple(out)


def _load() -> Catalog:
    table: dict[Key, ConnectorInfo] = {(c.kind, c.name): c for e in BUILT_IN for c in e}
    plugins: list[Plugin] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        dist = _distribution(ep)
        try:
            infos = _entries(ep)
        except Exception as exc:  # a plugin's own code failed: named, never a traceback
            plugins.append(Plugin(ep.name, dist, broken=f"{type(exc).__name__}: {exc}"))
            continue
        keys = [(c.kind, c.name) for c in infos]
        taken = [k for k in keys if k in table] + [k for k in set(keys) if keys.count(k) > 1]
        if taken:
            kind, name = taken[0]
            plugins.append(Plugin(ep.name, dist, broken=f"{kind} {name!r} is already taken"))
            continue
        table.update(zip(keys, infos, strict=True))
        plugins.append(Plugin(ep.name, dist, adds=tuple(keys)))
    return Catalog(table, plugins)


@functools.cache
def catalog() -> Catalog:
    """The built-in connectors and the installed plugins', read once per process."""
    return _load()


def connectors() -> dict[Key, ConnectorInfo]:
    return catalog().connectors


def connector(kind: Literal["source", "sink"], name: str) -> ConnectorInfo | None:
    return connectors().get((kind, name))


def unknown(kind: Literal["source", "sink"], name: str) -> str:
    """The error text for a connector name that is not in the registry, with each plugin that
    failed to load (it may have been the one to add it)."""
    known = sorted(n for k, n in connectors() if k == kind)
    text = (
        f"unknown {kind} connector {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})"
    )
    broken = [p for p in catalog().plugins if p.broken]
    for p in broken:
        text += f"; plugin {p.entry_point!r} ({p.distribution}) did not load: {p.broken}"
    return text
