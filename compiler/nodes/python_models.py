"""dbt's Python models (models/*.py), as dbt-spark runs them: `def model(dbt, session)` returns
a DataFrame. Compile reads the file with Python's `ast` and runs nothing: `dbt.ref('m')` and
`dbt.source('s', 't')` calls place it in the DAG, `dbt.config(...)` with literal values sets its
config. Its columns are not known at compile. It is a table or an incremental model.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..analysis import rules
from ..analysis.rules import Finding
from ..dag.graph import Node, node_id, ref_id
from ..errors import GraphError, ProjectError, RivcError, SourceLocation, did_you_mean
from ..loading.folders import folder_config
from ..loading.project import Project, SqlFile
from ..loading.specs import ModelConfig, NodeId
from ..materializations import MATERIALIZATIONS, foreign_config, materialization


def python_model_nodes(
    project: Project,
    names: frozenset[str],
    variables: Mapping[str, Any],
    env: Mapping[str, str],
    findings: list[Finding],
) -> list[Node]:
    out = []
    for _, model in sorted(project.python_models.items()):
        try:
            node = python_model_node(project, model, names, variables, env)
        except RivcError as exc:
            findings.append(rules.from_error(exc))
            node = Node(
                id=node_id("model", model.name), kind="model", name=model.name, path=model.path
            )
        if node.config.get("enabled", True):
            out.append(node)
    return out


def python_model_node(
    project: Project,
    model: SqlFile,
    names: frozenset[str],
    variables: Mapping[str, Any],
    env: Mapping[str, str],
) -> Node:
    path = model.path
    try:
        tree = ast.parse(model.text, filename=path.as_posix())
    except SyntaxError as exc:
        raise ProjectError(
            f"not valid Python: {exc.msg}", SourceLocation(path, exc.lineno)
        ) from None
    if not any(
        isinstance(n, ast.FunctionDef) and n.name == "model" and len(n.args.args) == 2
        for n in tree.body
    ):
        raise ProjectError("a Python model defines model(dbt, session)", SourceLocation(path, 1))
    deps: list[NodeId] = []
    given: dict[str, Any] = {}
    config_at = SourceLocation(path, 1)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        func = call.func
        if not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "dbt"
            and func.attr in ("ref", "source", "config")
        ):
            continue
        at = SourceLocation(path, call.lineno, call.col_offset + 1)
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        except ValueError:
            raise ProjectError(
                f"dbt.{func.attr}() takes literal values, so that compile can read them", at
            ) from None
        if func.attr == "config":
            given.update(kwargs)
            config_at = at
        elif func.attr == "ref":
            name = str(args[0]) if args else ""
            if name not in names:
                raise GraphError(f"dbt.ref({name!r}): no such model{did_you_mean(name, names)}", at)
            deps.append(ref_id(name, project.seeds))
        else:
            fqn = ".".join(map(str, args[:2]))
            seed = project.source_seeds.get(fqn) if fqn not in project.sources else None
            if seed is not None:
                deps.append(node_id("seed", seed))
            elif fqn in project.sources:
                deps.append(node_id("source", fqn))
            else:
                raise GraphError(
                    f"dbt.source({fqn!r}): no such source table{did_you_mean(fqn, project.sources)}",
                    at,
                )
    folders = path.relative_to(Path(project.spec.paths.models)).parent.parts
    config = project.spec.defaults.model_dump(mode="json", exclude_unset=True)
    config.update({"materialized": "table"})
    config.update(
        folder_config(
            project.spec.models,
            "models",
            project.name,
            folders,
            model.name,
            variables,
            env,
            project.target_context,
        )
    )
    props = project.properties.get(model.name)
    if props:
        config.update(props[0].config.model_dump(mode="json", exclude_unset=True))
    config.update(given)
    config["language"] = "python"
    try:
        spec = ModelConfig.model_validate(config)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise ProjectError(
            f"invalid config {'.'.join(map(str, err['loc']))}: {err['msg']}", config_at
        ) from None
    if not materialization(spec.materialized).python:
        allowed = " or ".join(n for n, m in MATERIALIZATIONS.items() if m.python)
        raise ProjectError(
            f"a Python model is materialized as {allowed}, not {spec.materialized!r}",
            config_at,
        )
    return Node(
        id=node_id("model", model.name),
        kind="model",
        name=model.name,
        path=path,
        depends_on=list(dict.fromkeys(deps)),
        tags=spec.tags,
        config=spec.model_dump(mode="json", exclude=set(foreign_config(spec.materialized))),
        description=props[0].description if props else "",
        sql=model.text,
        columns=None,
        checksum=hashlib.sha256(model.text.encode()).hexdigest(),
    )
