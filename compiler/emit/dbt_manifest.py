"""target/manifest.json in dbt's format (manifest v12, as dbt-core 1.11 writes it), for the tools
dbt users run on it: dagster-dbt, Recce, Elementary, dbt-artifacts-parser.

It is a view of rivc's own manifest (target/rivc_manifest.json, emit/manifest.py), made at
compile: models, snapshots, seeds and data tests are dbt's nodes under dbt's ids
(`model.<project>.<name>`), named as dbt-spark names them (dbt/naming.py); unit tests are
`unit_tests`; every source table rivc reads (a dbt source, or a table rivc extracts) is a
source; and a sink, which delivers a relation to a system outside the project, is an exposure
(type `application`). What only rivc knows (a source's connector, a sink's config with its
secrets masked, a model's materialization options) sits in `config` and in `meta.rivc`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any, Protocol

from ..dbt.naming import fqn, resource_type, version_of
from ..version import VERSION
from .manifest import Manifest, ManifestNode

DBT_FILE = "manifest.json"
DBT_VERSION = "1.11.0"  # the dbt-core whose manifest this one is shaped as


def dbt_metadata(artifact: str, invocation_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """The `metadata` block a dbt artifact opens with; `artifact`: its schema's name and
    version as dbt publishes it (`manifest/v12`, `run-results/v6`, `catalog/v1`,
    `sources/v3`)."""
    return {
        "dbt_schema_version": f"https://schemas.getdbt.com/dbt/{artifact}.json",
        "dbt_version": DBT_VERSION,
        "generated_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        **({} if invocation_id is None else {"invocation_id": invocation_id}),
        "env": {},
        **extra,
    }


class Named(Protocol):
    """What a node's dbt id is made of (a compiled Node or a ManifestNode)."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def versioned(self) -> str | None: ...


def unique_id(project: str, node: Named) -> str:
    """A node's id in dbt's artifacts."""
    kind = resource_type(node.kind, node.config)
    if kind == "unit_test":
        return f"{kind}.{project}.{node.config.get('model')}.{node.name}"
    version = version_of(node.name, node.versioned)
    if version is not None:
        return f"{kind}.{project}.{node.versioned}.v{version}"
    return f"{kind}.{project}.{node.name}"


def dbt_manifest(
    manifest: Manifest,
    files: Mapping[str, str],
    raw: Mapping[str, str],
    invocation_id: str | None = None,
) -> str:
    """The dbt-format manifest of `manifest`; `files`: what compile writes under target/
    (the compiled SQL), `raw`: each node's source text by node id."""
    import json

    project = manifest.project
    ids = {nid: unique_id(project, node) for nid, node in manifest.nodes.items()}
    out: dict[str, Any] = {
        "metadata": dbt_metadata(
            "manifest/v12",
            invocation_id or str(uuid.uuid4()),
            env={"rivc_version": VERSION},
            project_name=project,
            project_id=hashlib.md5(project.encode()).hexdigest(),
            adapter_type="spark",
        ),
        "nodes": {},
        "sources": {},
        "macros": {},
        "docs": {},
        "exposures": {},
        "metrics": {},
        "groups": {},
        "selectors": {},
        "disabled": {},
        "parent_map": {},
        "child_map": {},
        "group_map": {},
        "saved_queries": {},
        "semantic_models": {},
        "unit_tests": {},
    }
    for nid, node in manifest.nodes.items():
        uid = ids[nid]
        parents = [ids[p] for p in node.depends_on if p in ids]
        if node.kind == "source":
            out["sources"][uid] = _source(project, node, uid)
        elif node.kind == "sink":
            out["exposures"][uid] = _exposure(project, node, uid, parents)
        elif uid.startswith("unit_test."):
            model = f"model.{project}.{node.config.get('model')}"
            out["unit_tests"][uid] = _unit_test(project, node, uid, model)
            continue  # dbt keeps unit tests out of the parent and child maps
        else:
            out["nodes"][uid] = _node(project, node, uid, parents, files, raw.get(nid, ""))
        out["parent_map"][uid] = parents
        out["child_map"].setdefault(uid, [])
        for parent in parents:
            out["child_map"].setdefault(parent, []).append(uid)
    for children in out["child_map"].values():
        children.sort()
    return json.dumps(out, separators=(",", ":")) + "\n"


def _common(project: str, node: ManifestNode, uid: str, name: str) -> dict[str, Any]:
    path = PurePosixPath(node.path)
    return {
        "name": name,
        "resource_type": uid.split(".", 1)[0],
        "package_name": project,
        "path": node.path if len(path.parts) < 2 else PurePosixPath(*path.parts[1:]).as_posix(),
        "original_file_path": node.path,
        "unique_id": uid,
        "description": node.description,
        "tags": list(node.tags),
        "meta": {},
    }


def _columns(node: ManifestNode) -> dict[str, Any]:
    return {
        c: {
            "name": c,
            "description": "",
            "meta": {},
            "data_type": t or None,
            "constraints": [],
            "quote": None,
            "tags": [],
        }
        for c, t in (node.columns or {}).items()
    }


# rivc's config keys whose dbt namesakes have another shape: kept under these names
_RENAMED = {"pre_hook": "rivc_pre_hook", "post_hook": "rivc_post_hook", "contract": "rivc_contract"}


def _config(node: ManifestNode, kind: str) -> dict[str, Any]:
    given = {_RENAMED.get(k, k): v for k, v in node.config.items()}
    placed = {"schema": None, "alias": None, "database": None}
    if kind == "test":
        return {
            **{k: v for k, v in given.items() if k not in ("test", "model")},
            **placed,
            "enabled": True,
            "materialized": "test",
            "severity": str(node.config.get("severity", "error")).upper(),
            "tags": list(node.tags),
            "meta": {},
        }
    contract = node.config.get("contract") or {}
    return {
        "enabled": True,
        **placed,
        "tags": list(node.tags),
        "meta": {},
        "materialized": node.materialized if node.kind == "model" else kind,
        "persist_docs": {},
        "post-hook": [
            {"sql": s, "transaction": True, "index": None}
            for s in node.config.get("post_hook") or ()
        ],
        "pre-hook": [
            {"sql": s, "transaction": True, "index": None}
            for s in node.config.get("pre_hook") or ()
        ],
        "quoting": {},
        "column_types": node.config.get("column_types") or {},
        "contract": {
            "enforced": bool(contract.get("enforced", False)),
            "alias_types": bool(contract.get("alias_types", True)),
        },
        **{k: v for k, v in given.items() if k not in ("enabled", "tags", "materialized")},
        **{k: node.config.get(k) for k in placed if node.config.get(k) is not None},
    }


def _node(
    project: str,
    node: ManifestNode,
    uid: str,
    parents: list[str],
    files: Mapping[str, str],
    raw: str,
) -> dict[str, Any]:
    kind = uid.split(".", 1)[0]
    version = version_of(node.name, node.versioned)
    name = node.versioned or node.name
    placed = node.placed
    out = _common(project, node, uid, name)
    out.update(
        database=placed.database if placed else None,
        schema=placed.schema if placed else "default",
        fqn=fqn(project, node.path, name, kind, version),
        alias=placed.alias if placed else name,
        checksum={"name": "sha256", "checksum": node.checksum or _sha(raw)},
        config=_config(node, kind),
        columns=_columns(node),
        relation_name=placed.relation_name if placed and kind != "test" else None,
        raw_code=raw,
        language=str(node.config.get("language", "sql")),
        refs=_refs(node),
        sources=_sources(node),
        metrics=[],
        depends_on={"macros": [], "nodes": parents},
        compiled_path=None if node.compiled_path is None else f"target/{node.compiled_path}",
        compiled=node.compiled_path is not None,
        compiled_code=files.get(node.compiled_path or "", None),
        extra_ctes_injected=True,
        extra_ctes=[],
    )
    if kind == "model" and version is not None:
        out.update(version=int(version) if version.isdigit() else version)
    if kind == "seed":
        for key in ("refs", "sources", "metrics", "compiled", "compiled_code", "language"):
            out.pop(key)
        for key in ("extra_ctes_injected", "extra_ctes", "compiled_path"):
            out.pop(key)
        out.update(raw_code="", root_path=None, depends_on={"macros": []})
    if kind == "test" and node.path.endswith((".yml", ".yaml")):
        out["path"] = f"{out['alias']}.sql"
        out["column_name"] = None
        out["attached_node"] = next((p for p in parents if not p.startswith("source.")), None)
    if node.lineage is not None:
        out["meta"] = {
            "rivc": {
                "lineage": {c: [list(o) for o in origins] for c, origins in node.lineage.items()}
            }
        }
    return out


def _refs(node: ManifestNode) -> list[dict[str, Any]]:
    return [
        {"name": p.split(":", 1)[1], "package": None, "version": None}
        for p in node.depends_on
        if p.startswith(("model:", "seed:"))
    ]


def _sources(node: ManifestNode) -> list[list[str]]:
    return [p.split(":", 1)[1].split(".", 1) for p in node.depends_on if p.startswith("source:")]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _source(project: str, node: ManifestNode, uid: str) -> dict[str, Any]:
    facts = node.source
    source, _, table = node.name.partition(".")
    out = _common(project, node, uid, table)
    out.update(
        database=None,
        schema=source,
        fqn=[project, source, table],
        source_name=source,
        source_description="",
        loader="",
        identifier=table,
        columns=_columns(node),
        relation_name=facts.relation,
        config={"enabled": True},
    )
    out["meta"] = {"rivc": {"connector": facts.connector, "table": facts.table}}
    if facts.freshness:
        out["loaded_at_field"] = facts.freshness.get("loaded_at_field")
    return out


def _exposure(project: str, node: ManifestNode, uid: str, parents: list[str]) -> dict[str, Any]:
    facts = node.sink
    out = _common(project, node, uid, node.name)
    out.update(
        fqn=[project, node.name],
        type="application",
        owner={"name": project},
        label=node.name,
        depends_on={"macros": [], "nodes": parents},
        refs=_refs(node),
        sources=_sources(node),
        config={"enabled": True},
    )
    out["meta"] = {
        "rivc": {"connector": facts.connector, "config": facts.config, "trigger": facts.trigger}
    }
    return out


def _unit_test(project: str, node: ManifestNode, uid: str, model: str) -> dict[str, Any]:
    out = _common(project, node, uid, node.name)
    del out["tags"], out["meta"]  # a unit test's are in its config
    out.update(
        model=str(node.config.get("model")),
        given=[],
        expect={"rows": node.config.get("expect_rows"), "format": "dict", "fixture": None},
        fqn=[project, str(node.config.get("model")), node.name],
        depends_on={"macros": [], "nodes": [model]},
        config={"tags": list(node.tags), "meta": {}, "enabled": True},
    )
    return out
