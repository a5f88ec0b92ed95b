"""target/manifest.json: the typed hand-off from compile to run.

codegen writes a Manifest, the runtime reads one back; both sides share these classes, so mypy
checks every field the runtime uses. Connector configs appear redacted (secrets as `****`);
the runtime takes them, with their secrets, from the project's specs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .specs import ModelConfig

SCHEMA_VERSION = 2

Kind = Literal["source", "model", "sink", "test"]

# Fields only some kinds have, in the order they are written after `compiled_path`.
_OPTIONAL = (
    "connector",
    "connection",
    "from",
    "relation",
    "table",
    "tuning",
    "sink_config",
    "trigger",
    "targets",
    "input",
    "compiled_batches_path",
    "line",
)


@dataclass(frozen=True, kw_only=True)
class ManifestNode:
    id: str
    kind: Kind
    name: str
    path: str
    description: str = ""
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)  # the node's config, JSON
    depends_on: tuple[str, ...] = ()
    checksum: str = ""
    columns: dict[str, str] | None = None  # name -> Spark type ("" when not known)
    compiled_path: str | None = None  # under target/; None when not selected or no SQL
    compiled_incremental_path: str | None = None  # incremental models
    connector: str | None = None  # sources and sinks
    connection: str | None = None  # relational sources: the profile's connection
    relation: str = ""  # sources: their view; sinks: the relation they read
    table: dict[str, Any] | None = None  # sources: the table's spec (redacted)
    tuning: dict[str, int] | None = None  # relational sources
    from_: str | None = None  # sinks: `from:`
    sink_config: dict[str, Any] | None = None  # sinks: the config (redacted)
    trigger: str | dict[str, Any] | None = None  # sinks
    targets: dict[str, Any] | None = None  # sinks: route targets
    input: dict[str, Any] | None = None  # sinks: what they consume (compiler/nodes/consumers.py)
    compiled_batches_path: str | None = None  # sinks of new batches: their batch SQL
    line: int | None = None  # sources, sinks, generic tests: the line of their YAML entry

    @property
    def model_config(self) -> ModelConfig:
        """A model's config as the spec it was compiled from (its defaults included)."""
        return ModelConfig.model_validate(self.config)

    @property
    def materialized(self) -> str:
        return self.model_config.materialized if self.kind == "model" else "view"

    @property
    def unique_key(self) -> tuple[str, ...]:
        return self.model_config.unique_key

    @property
    def incremental_strategy(self) -> str:
        return self.model_config.strategy

    @property
    def severity(self) -> str:
        return str(self.config.get("severity", "error"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "path": self.path,
            "description": self.description,
            "tags": list(self.tags),
            "config": self.config,
            "depends_on": list(self.depends_on),
            "checksum": self.checksum,
            "columns": self.columns,
            "compiled_path": self.compiled_path,
        }
        for key in _OPTIONAL:
            value = getattr(self, "from_" if key == "from" else key)
            source_key = self.kind == "source" and key in ("connection", "relation")
            if (
                source_key
                or (self.kind == "sink" and key == "relation")
                or (value is not None and key != "relation")
            ):
                out[key] = value
        if self.compiled_incremental_path is not None:
            out["compiled_incremental_path"] = self.compiled_incremental_path
        return out

    @classmethod
    def from_json(cls, nid: str, data: dict[str, Any]) -> ManifestNode:
        extra = {("from_" if key == "from" else key): data[key] for key in _OPTIONAL if key in data}
        return cls(
            id=nid,
            kind=cast(Kind, data["kind"]),
            name=data["name"],
            path=data["path"],
            description=data.get("description", ""),
            tags=tuple(data.get("tags", ())),
            config=dict(data.get("config", {})),
            depends_on=tuple(data.get("depends_on", ())),
            checksum=data.get("checksum", ""),
            columns=data.get("columns"),
            compiled_path=data.get("compiled_path"),
            compiled_incremental_path=data.get("compiled_incremental_path"),
            **extra,
        )


@dataclass(frozen=True)
class Manifest:
    rivc_version: str
    project: str
    profile: str
    params: dict[str, Any]  # redacted
    selected: tuple[str, ...]
    nodes: dict[str, ManifestNode]
    schema_version: int = SCHEMA_VERSION

    def dumps(self) -> str:
        data = {
            "schema_version": self.schema_version,
            "rivc_version": self.rivc_version,
            "project": self.project,
            "profile": self.profile,
            "params": self.params,
            "selected": list(self.selected),
            "nodes": {nid: node.to_json() for nid, node in self.nodes.items()},
        }
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    @classmethod
    def loads(cls, text: str) -> Manifest:
        data = json.loads(text)
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"manifest schema version {version}, this rivc reads {SCHEMA_VERSION}: "
                "run `rivc compile` again"
            )
        return cls(
            data["rivc_version"],
            data["project"],
            data["profile"],
            dict(data.get("params", {})),
            tuple(data.get("selected", ())),
            {nid: ManifestNode.from_json(nid, n) for nid, n in data["nodes"].items()},
            version,
        )
