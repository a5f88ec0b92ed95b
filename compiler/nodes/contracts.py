"""dbt's enforced model contracts (`contract: {enforced: true}`), checked at compile without a
warehouse and written into the node's config for the run's check (docs/dbt.md, "Contracts").

At compile: every column the properties declare has a `data_type`, the model's SQL gives
exactly the declared columns, and each column whose type compile knows has the declared type
(Spark's names; `integer`, `long`, `varchar`... as Spark reads them). The node's `contract`
config then holds the declared types, the columns with a `not_null` constraint and the `check`
constraints' expressions: the run checks the model's DataFrame against them before anything is
written (adapters/models/contracts.py). Other constraint types (unique, primary_key,
foreign_key) are not enforced, as dbt-spark does not enforce them.
"""

from __future__ import annotations

import re
from typing import Any

from ..analysis import rules
from ..analysis.rules import Finding
from ..analysis.workers import ModelResult
from ..dag.graph import Node, node_id
from ..errors import ProjectError, SourceLocation
from ..loading.project import Project

_SYNONYMS = {
    "integer": "int",
    "long": "bigint",
    "short": "smallint",
    "byte": "tinyint",
    "real": "float",
    "dec": "decimal",
    "numeric": "decimal",
    "bool": "boolean",
    "varchar": "string",
    "text": "string",
}
_WORD = re.compile(r"[a-z_]+")


def spark_type(text: str) -> str:
    """A type as Spark names it, for comparing: lower case, no spaces, synonyms resolved, a
    bare decimal decimal(10,0), a varchar(n) or char(n) a string."""
    t = text.strip().lower().replace(" ", "")
    t = re.sub(r"\b(var)?char\(\d+\)", "string", t)
    t = _WORD.sub(lambda m: _SYNONYMS.get(m.group(0), m.group(0)), t)
    return re.sub(r"\bdecimal(?!\()", "decimal(10,0)", t)


def check_contracts(
    project: Project,
    models: dict[str, ModelResult],
    types: dict[str, dict[str, str]],
    nodes: dict[Any, Node],
    findings: list[Finding],
) -> None:
    """`types`: each model's column types as compile inferred them ("" or absent: unknown)."""
    for name, res in models.items():
        contract = (res.config or {}).get("contract")
        node = nodes.get(node_id("model", name))
        if contract and contract.get("enforced") and node is not None:
            _check(project, name, res, types.get(name, {}), node, contract, findings)


def _check(
    project: Project,
    name: str,
    res: ModelResult,
    known: dict[str, str],
    node: Node,
    contract: dict[str, Any],
    findings: list[Finding],
) -> None:
    props = project.properties.get(name)
    path = project.models[name].path

    def error(text: str, where: SourceLocation | None = None) -> None:
        findings.append(rules.render(ProjectError(text, where or SourceLocation(path, 1))))

    if props is None or not props[0].columns:
        error(f"model {name!r} has an enforced contract, and its properties declare no columns")
        return
    spec, located = props
    declared: dict[str, str] = {}
    not_null: list[str] = []
    checks: list[str] = []
    for i, column in enumerate(spec.columns):
        if not column.data_type:
            error(
                f"model {name!r} has an enforced contract: column {column.name!r} needs a "
                "data_type",
                located.location("columns", i, "name"),
            )
            continue
        declared[column.name] = column.data_type
        for constraint in column.constraints or ():
            kind = constraint.get("type") if isinstance(constraint, dict) else None
            if kind == "not_null":
                not_null.append(column.name)
            elif kind == "check" and constraint.get("expression"):
                checks.append(str(constraint["expression"]))
    for constraint in spec.constraints or ():
        if isinstance(constraint, dict) and constraint.get("type") == "check":
            checks.append(str(constraint.get("expression", "")))
    if len(declared) < len(spec.columns):
        return
    if res.columns is not None:
        missing = [c for c in declared if c not in res.columns]
        extra = [c for c in res.columns if c not in declared]
        if missing or extra:
            said = "; ".join(
                p
                for p in (
                    f"declared, not in its SQL: {', '.join(missing)}" if missing else "",
                    f"in its SQL, not declared: {', '.join(extra)}" if extra else "",
                )
                if p
            )
            error(f"model {name!r} breaks its enforced contract: {said}")
            return
        wrong = [
            f"{c} is {known[c]}, declared {t}"
            for c, t in declared.items()
            if known.get(c) and "UNKNOWN" not in known[c] and spark_type(known[c]) != spark_type(t)
        ]
        if wrong:
            error(f"model {name!r} breaks its enforced contract: {'; '.join(wrong)}")
            return
    node.config["contract"] = {
        **contract,
        "columns": declared,
        "not_null": not_null,
        "checks": checks,
    }
