"""Seed nodes: one per seeds/*.csv, with every column's type known at compile (compiler/loading/seeds.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..analysis import rules
from ..analysis.rules import Finding
from ..dag.graph import Node, node_id
from ..errors import ProjectError, RivcError, SourceLocation, SqlError
from ..loading.folders import HOOKS, folder_config
from ..loading.project import Project, SqlFile
from ..loading.property_specs import SeedConfig
from ..loading.seeds import column_types, inferred, read_csv
from ..rendering.transforms import spark_type
from .common import suggest


def seed_nodes(
    project: Project,
    variables: Mapping[str, Any],
    env: Mapping[str, str],
    findings: list[Finding],
    known: dict[str, dict[str, str]],
) -> list[Node]:
    """Every enabled seed's node."""
    out = []
    for _, seed in sorted(project.seeds.items()):
        try:
            config = seed_config(project, seed, variables, env)
        except RivcError as exc:  # its node stays, so that the error is in the compile's scope
            findings.append(rules.from_error(exc))
            config = SeedConfig()
        if config.enabled:
            out.append(seed_node(project, seed, config, findings, known))
    return out


def seed_config(
    project: Project, seed: SqlFile, variables: Mapping[str, Any], env: Mapping[str, str]
) -> SeedConfig:
    """The folder configs (dbt_project.yml's `seeds:`), then the seed's properties."""
    folders = seed.path.relative_to(project.spec.paths.seeds).parent.parts
    tree = project.spec.seeds
    given = folder_config(
        tree, "seeds", project.name, folders, seed.name, variables, env, project.target_context
    )
    for hook in HOOKS:  # accepted and not run on seeds (docs/dbt.md)
        given.pop(hook, None)
    props = project.seed_properties.get(seed.name)
    if props:
        given.update(props[0].config.model_dump(mode="json", exclude_unset=True))
    if not given.get("event_time"):  # a dbt source this seed loads may name it
        given["event_time"] = next(
            (
                project.dbt_sources[fqn].event_time()
                for fqn, name in project.source_seeds.items()
                if name == seed.name and fqn in project.dbt_sources
            ),
            None,
        )
    try:
        return SeedConfig.model_validate(given)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise ProjectError(
            f"seed {seed.name}: config {'.'.join(map(str, err['loc']))}: {err['msg']}",
            SourceLocation(seed.path),
        ) from None


def seed_node(
    project: Project,
    seed: SqlFile,
    config: SeedConfig,
    findings: list[Finding],
    known: dict[str, dict[str, str]],
) -> Node:
    """`known`: inferred types by file content, kept between compiles (a seed can be large)."""
    props = project.seed_properties.get(seed.name)
    columns: dict[str, str] | None = None
    checksum = hashlib.sha256(seed.text.encode()).hexdigest()
    key = f"{checksum}:{config.delimiter}"
    try:
        if key not in known:
            known[key] = inferred(read_csv(seed.text, seed.path, config.delimiter))
    except RivcError as exc:
        findings.append(rules.from_error(exc))
    else:
        types = known[key]
        overrides: dict[str, str] = {}
        own = props is not None and "column_types" in props[0].config.model_fields_set
        for name, text in config.column_types.items():
            where = (
                props[1].location("config", "column_types", name)
                if props
                else SourceLocation(seed.path)  # from dbt_project.yml's seeds:
            )
            if name.lower() not in (h.lower() for h in types):
                if not own:
                    continue  # a folder's column_types name columns of some of its seeds
                findings.append(
                    rules.unknown_column(
                        SqlError(
                            f"column_types: {name!r} is not a column of seed {seed.name!r}"
                            f"{suggest(name, list(types))}",
                            where,
                        )
                    )
                )
                continue
            try:
                typ = spark_type(text, f"column_types.{name}").sql("spark").lower()
                overrides[name] = typ.replace(", ", ",")  # as Spark writes it
            except ValueError as exc:
                findings.append(rules.key_column(SqlError(str(exc), where)))
        columns = column_types(types, overrides)
    return Node(
        id=node_id("seed", seed.name),
        kind="seed",
        name=seed.name,
        path=seed.path,
        tags=config.tags,
        config=config.model_dump(mode="json"),
        description=props[0].description if props else "",
        columns=columns,
        checksum=checksum,
    )
