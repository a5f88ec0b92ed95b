"""target/rivc_manifest.json: the typed hand-off from compile to run (target/manifest.json is
the same project in dbt's format, dbt_manifest.py).

codegen writes a Manifest, the runtime reads one back; both sides share these classes, so mypy
checks every field the runtime uses. Connector configs appear redacted (secrets as `****`);
the runtime takes them, with their secrets, from the project's specs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from ..loading.specs import ModelConfig
from ..materializations import INCREMENTAL, Materialization, of_node

SCHEMA_VERSION = 3  # 3: named SQL variants (compiled_variants)
MANIFEST_FILE = "rivc_manifest.json"  # under target/; manifest.json is dbt's (dbt_manifest.py)

Kind = Literal["source", "seed", "model", "sink", "test"]

InputKind = Literal["batches", "whole", "stream"]


@dataclass(frozen=True, kw_only=True)
class SinkInput:
    """What a sink consumes (compiler/nodes/consumers.py): `batches` of landed incremental
    sources, the `whole` relation when a `tracked` input has a newer version, or a `stream`."""

    kind: InputKind
    changing: tuple[str, ...] = ()  # landed incremental sources: they grow by batches
    tracked: tuple[str, ...] = ()  # inputs with versions: landed sources and stored models
    untracked: bool = False  # reads an input without versions: delivered on every run
    through: str | None = None  # `whole` past a view new batches cannot pass: that view
    why: str | None = None  # and why they cannot

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "changing": list(self.changing),
            "tracked": list(self.tracked),
            "untracked": self.untracked,
        }
        if self.through is not None:
            out.update(through=self.through, why=self.why)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SinkInput:
        return cls(
            kind=cast(InputKind, data["kind"]),
            changing=tuple(data.get("changing", ())),
            tracked=tuple(data.get("tracked", ())),
            untracked=bool(data.get("untracked", False)),
            through=data.get("through"),
            why=data.get("why"),
        )


@dataclass(frozen=True, kw_only=True)
class SourceFacts:
    """What a source table's node carries from compile to run, beside every node's fields."""

    connector: str
    connection: str | None  # relational sources: the profile's connection
    relation: str  # the view `source()` reads
    table: dict[str, Any]  # the table's spec, redacted
    tuning: dict[str, int] | None = None  # relational sources
    freshness: dict[str, Any] | None = None  # a dbt source's loaded_at_field and freshness

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "connector": self.connector,
            "connection": self.connection,
            "relation": self.relation,
            "table": self.table,
        }
        if self.tuning is not None:
            out["tuning"] = self.tuning
        if self.freshness is not None:
            out["freshness"] = self.freshness
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceFacts:
        return cls(
            connector=data["connector"],
            connection=data.get("connection"),
            relation=data["relation"],
            table=dict(data["table"]),
            tuning=data.get("tuning"),
            freshness=data.get("freshness"),
        )


@dataclass(frozen=True, kw_only=True)
class SinkFacts:
    """What a sink's node carries from compile to run, beside every node's fields."""

    connector: str
    from_: str  # `from:`
    relation: str  # the relation it reads
    config: dict[str, Any]  # the connector config, redacted
    trigger: str | dict[str, Any]
    targets: dict[str, Any]  # route and dead-letter targets
    input: SinkInput | None = None  # None: a sink that reads nothing (no `from:`)
    compiled_batches_path: str | None = None  # sinks of new batches: their batch SQL

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "connector": self.connector,
            "from": self.from_,
            "relation": self.relation,
            "sink_config": self.config,
            "trigger": self.trigger,
            "targets": self.targets,
        }
        if self.input is not None:
            out["input"] = self.input.to_json()
        if self.compiled_batches_path is not None:
            out["compiled_batches_path"] = self.compiled_batches_path
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SinkFacts:
        given = data.get("input")
        return cls(
            connector=data["connector"],
            from_=data["from"],
            relation=data["relation"],
            config=dict(data["sink_config"]),
            trigger=data["trigger"],
            targets=dict(data["targets"]),
            input=None if given is None else SinkInput.from_json(given),
            compiled_batches_path=data.get("compiled_batches_path"),
        )


Facts = SourceFacts | SinkFacts | None


@dataclass(frozen=True, slots=True)
class Placed:
    """A node's relation in dbt's terms (compiler/dbt/naming.py): `<schema>.<alias>`, as
    dbt-spark names it."""

    database: str | None
    schema: str
    alias: str

    @property
    def relation_name(self) -> str:
        return f"{self.schema}.{self.alias}"


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
    # its named SQL variants' files under target/ (compiler/materializations.py: INCREMENTAL)
    compiled_variants: dict[str, str] = field(default_factory=dict)
    facts: Facts = None  # sources and sinks: what only their kind has
    line: int | None = None  # sources, sinks, generic tests: the line of their YAML entry
    # models: column -> [(node id, column, copied|transformed|aggregated)]; None: not known
    lineage: dict[str, list[tuple[str, str, str]]] | None = None
    filters: tuple[tuple[str, str], ...] = ()  # (node id, column) filtering its rows
    uses: dict[str, str] = field(default_factory=dict)  # "var:x"/"macro:p.m" -> hash
    placed: Placed | None = None  # models, seeds, data tests: dbt's name of its relation
    versioned: str | None = None  # a version of a dbt versioned model: that model's name

    @property
    def source(self) -> SourceFacts:
        """A source table's facts; asking a node of another kind is a bug."""
        if not isinstance(self.facts, SourceFacts):
            raise TypeError(f"{self.id} is not a source")
        return self.facts

    @property
    def sink(self) -> SinkFacts:
        """A sink's facts; asking a node of another kind is a bug."""
        if not isinstance(self.facts, SinkFacts):
            raise TypeError(f"{self.id} is not a sink")
        return self.facts

    @property
    def relation(self) -> str:
        """The view a source's `source()` reads, or the relation a sink reads."""
        return self.facts.relation if self.facts is not None else ""

    @property
    def model_config(self) -> ModelConfig:
        """A model's config as the spec it was compiled from (its defaults included)."""
        return ModelConfig.model_validate(self.config)

    @property
    def materialized(self) -> str:
        return self.materialization.name

    @property
    def materialization(self) -> Materialization:
        """How it is built: its entry of the materialization table (a source or a sink is
        read as a view)."""
        return of_node(self.kind, self.config)

    @property
    def stored(self) -> bool:
        """A table in the warehouse (Materialization.stored)."""
        return self.materialization.stored

    @property
    def unique_key(self) -> tuple[str, ...]:
        return self.model_config.unique_key

    @property
    def incremental_strategy(self) -> str:
        return self.model_config.merge_strategy

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
        if self.facts is not None:
            out.update(self.facts.to_json())
        if self.line is not None:
            out["line"] = self.line
        if self.compiled_variants:
            out["compiled_variants"] = self.compiled_variants
        if self.lineage is not None:
            out["lineage"] = {
                "columns": {c: [list(o) for o in origins] for c, origins in self.lineage.items()},
                "filters": [list(f) for f in self.filters],
            }
        if self.uses:
            out["uses"] = self.uses
        if self.placed is not None:
            out["placed"] = [self.placed.database, self.placed.schema, self.placed.alias]
        if self.versioned is not None:
            out["versioned"] = self.versioned
        return out

    @classmethod
    def from_json(cls, nid: str, data: dict[str, Any]) -> ManifestNode:
        kind = cast(Kind, data["kind"])
        facts: Facts = None
        if kind == "source":
            facts = SourceFacts.from_json(data)
        elif kind == "sink":
            facts = SinkFacts.from_json(data)
        return cls(
            id=nid,
            kind=kind,
            name=data["name"],
            path=data["path"],
            description=data.get("description", ""),
            tags=tuple(data.get("tags", ())),
            config=dict(data.get("config", {})),
            depends_on=tuple(data.get("depends_on", ())),
            checksum=data.get("checksum", ""),
            columns=data.get("columns"),
            compiled_path=data.get("compiled_path"),
            compiled_variants=dict(data.get("compiled_variants") or {}),
            facts=facts,
            line=data.get("line"),
            lineage=None
            if "lineage" not in data
            else {
                c: [(o[0], o[1], o[2]) for o in origins]
                for c, origins in data["lineage"]["columns"].items()
            },
            filters=tuple((f[0], f[1]) for f in data.get("lineage", {}).get("filters", ())),
            uses=dict(data.get("uses", {})),
            placed=None if "placed" not in data else Placed(*data["placed"]),
            versioned=data.get("versioned"),
        )


@dataclass(frozen=True)
class Manifest:
    rivc_version: str
    project: str
    profile: str
    params: dict[str, Any]  # as bound: a parameter is no secret (docs/security.md)
    selected: tuple[str, ...]
    nodes: dict[str, ManifestNode]
    schema_version: int = SCHEMA_VERSION
    hooks: dict[str, list[str]] = field(default_factory=dict)  # on_run_start/end: Spark SQL

    def dumps(self) -> str:
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "rivc_version": self.rivc_version,
            "project": self.project,
            "profile": self.profile,
            "params": self.params,
            "selected": list(self.selected),
            "nodes": {nid: node.to_json() for nid, node in self.nodes.items()},
        }
        if self.hooks:
            data["hooks"] = self.hooks
        # compact, as dbt's: a pretty one is twice the size and takes 5x as long to write
        return json.dumps(data, separators=(",", ":")) + "\n"

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
            {k: list(v) for k, v in data.get("hooks", {}).items()},
        )


def compiled_variants(data: Mapping[str, Any]) -> dict[str, str]:
    """A manifest node's named SQL variants and their files, as any version wrote them (a
    --state manifest of schema 2 holds the incremental one as `compiled_incremental_path`)."""
    found = dict(data.get("compiled_variants") or {})
    if data.get("compiled_incremental_path"):
        found.setdefault(INCREMENTAL, data["compiled_incremental_path"])
    return found
