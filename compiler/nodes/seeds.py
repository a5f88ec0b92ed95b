"""Seed nodes: one per seeds/*.csv, with every column's type known at compile (compiler/seeds.py)."""

from __future__ import annotations

import hashlib

from .. import rules
from ..errors import RivcError, SqlError
from ..graph import Node, node_id
from ..project import Project, SqlFile
from ..rules import Finding
from ..seeds import column_types, read_csv
from ..specs import SeedConfig
from ..transforms import spark_type
from .common import suggest


def seed_nodes(project: Project, findings: list[Finding]) -> list[Node]:
    return [seed_node(project, seed, findings) for _, seed in sorted(project.seeds.items())]


def seed_node(project: Project, seed: SqlFile, findings: list[Finding]) -> Node:
    props = project.seed_properties.get(seed.name)
    config = props[0].config if props else SeedConfig()
    columns: dict[str, str] | None = None
    try:
        data = read_csv(seed.text, seed.path, config.delimiter)
    except RivcError as exc:
        findings.append(rules.from_error(exc))
    else:
        overrides: dict[str, str] = {}
        for name, text in config.column_types.items():
            assert props is not None  # overrides come from properties
            where = props[1].location("config", "column_types", name)
            if name.lower() not in (h.lower() for h in data.header):
                findings.append(
                    rules.unknown_column(
                        SqlError(
                            f"column_types: {name!r} is not a column of seed {seed.name!r}"
                            f"{suggest(name, list(data.header))}",
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
        columns = column_types(data, overrides)
    return Node(
        id=node_id("seed", seed.name),
        kind="seed",
        name=seed.name,
        path=seed.path,
        tags=config.tags,
        config=config.model_dump(mode="json"),
        description=props[0].description if props else "",
        columns=columns,
        checksum=hashlib.sha256(seed.text.encode()).hexdigest(),
    )
