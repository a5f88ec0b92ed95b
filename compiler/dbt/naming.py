"""The name dbt gives a node's relation: `database`, `schema` and `alias`, as dbt-spark makes them.

dbt asks three macros, which a project may override: `generate_schema_name(custom_schema_name,
node)` (default: the target's schema, or `<target schema>_<custom>` when the node's config
sets `schema`), `generate_alias_name(custom_alias_name, node)` (default: the `alias` config,
else the node's name, `<name>_v<version>` for a version) and `generate_database_name` (default:
the `database` config, else none: dbt-spark has no databases above schemas). A data test's
schema config defaults to `dbt_test__audit`, and a snapshot's legacy `target_schema` and
`target_database` are its schema and database as given, as in dbt. The relation's name is
`<schema>.<alias>`, as dbt-spark renders it (no database, no quotes).

The names go to the manifests (compiler/emit/); a node's table stays at its warehouse location.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ..emit.manifest import Placed
from ..errors import RenderError, RivcError, SourceLocation

if TYPE_CHECKING:
    from ..dag.graph import Node

TEST_SCHEMA = "dbt_test__audit"  # dbt's default `schema` config of a data test
MACROS = ("generate_database_name", "generate_schema_name", "generate_alias_name")
PLACED = frozenset({"model", "seed", "test"})  # the kinds of node a relation name is made for


def builtins(target: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """dbt's own versions of the three macros (and generate_schema_name_for_env), which a
    project's override may call."""

    def schema_name(custom: Any = None, node: Any = None) -> str:
        base = str(target.get("schema", "default"))
        return base if custom is None else f"{base}_{str(custom).strip()}"

    def schema_for_env(custom: Any = None, node: Any = None) -> str:
        if target.get("name") == "prod" and custom is not None:
            return str(custom).strip()
        return str(target.get("schema", "default"))

    def alias_name(custom: Any = None, node: Any = None) -> str:
        if custom is not None:
            return str(custom).strip()
        name = str(_get(node, "name"))
        version = _get(node, "version")
        return name if version in (None, "") else f"{name}_v{str(version).replace('.', '_')}"

    def database_name(custom: Any = None, node: Any = None) -> str | None:
        return None if custom is None else str(custom).strip()

    return {
        "generate_schema_name": schema_name,
        "generate_alias_name": alias_name,
        "generate_database_name": database_name,
        "default__generate_schema_name": schema_name,
        "generate_schema_name_for_env": schema_for_env,
        "default__generate_alias_name": alias_name,
        "default__generate_database_name": database_name,
    }


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, Mapping) else getattr(node, key, None)


def resource_type(kind: str, config: Mapping[str, Any]) -> str:
    """A node's resource type in dbt's terms."""
    if kind == "model" and config.get("materialized") == "snapshot":
        return "snapshot"
    if kind == "test" and config.get("test") == "unit":
        return "unit_test"
    return "exposure" if kind == "sink" else kind


def version_of(name: str, versioned: str | None) -> str | None:
    """The version a versioned model's node (`<model>_v<version>`) is, else None."""
    return None if versioned is None else name[len(versioned) + 2 :]


def fqn(project: str, path: str, name: str, kind: str, version: str | None = None) -> list[str]:
    """dbt's fully qualified name: the project, the folders under the resource's folder, the
    node's name (a snapshot's file stem before it; a version's `v<n>` after it)."""
    at = PurePosixPath(path)
    stem = [at.stem] if kind == "snapshot" else []
    return [project, *at.parent.parts[1:], *stem, name, *([f"v{version}"] if version else [])]


def node_context(project: str, node: Node) -> dict[str, Any]:
    """What dbt passes a naming macro as `node`: enough of its fields for the macros projects
    write (name, resource_type, fqn, path, config, tags, version)."""
    kind = resource_type(node.kind, node.config)
    version = version_of(node.name, node.versioned)
    name = node.versioned or node.name
    return {
        "name": name,
        "unique_id": f"{kind}.{project}.{name}" + (f".v{version}" if version else ""),
        "resource_type": kind,
        "package_name": project,
        "path": node.path.as_posix(),
        "original_file_path": node.path.as_posix(),
        "fqn": fqn(project, node.path.as_posix(), name, kind, version),
        "config": node.config,
        "tags": list(node.tags),
        "version": version,
    }


def place(
    project: str,
    nodes: Iterable[Node],
    target: Mapping[str, Any],
    macro: Callable[[str], Any],
) -> tuple[dict[str, Placed], list[RivcError]]:
    """Each model's, seed's and data test's relation name (by node id), from the project's own
    naming macros where it has them (`macro(name)`: the root project's macro, or None), else
    dbt's; and an error for each node a macro fails on, and for two relations of one name."""
    own = builtins(target)
    use = {name: macro(name) or own[name] for name in MACROS}
    placed: dict[str, Placed] = {}
    named: dict[tuple[str | None, str, str], Node] = {}
    errors: list[RivcError] = []
    for node in nodes:
        if node.kind not in PLACED or node.config.get("test") == "unit":
            continue
        given = node.config
        custom_schema = given.get("schema")
        if node.kind == "test" and custom_schema is None:
            custom_schema = TEST_SCHEMA
        custom_alias = given.get("alias")
        ctx = node_context(project, node)
        try:
            database = _text(use["generate_database_name"](given.get("database"), ctx))
            schema = _text(use["generate_schema_name"](custom_schema, ctx))
            alias = _text(use["generate_alias_name"](custom_alias, ctx))
        except Exception as exc:  # noqa: BLE001  (a project's macro: its error, at the node)
            message = exc.message if isinstance(exc, RivcError) else str(exc)
            errors.append(
                RenderError(
                    f"naming {node.kind} {node.name!r} (generate_*_name): {message}",
                    SourceLocation(node.path, node.line),
                )
            )
            continue
        if ctx["resource_type"] == "snapshot":  # dbt's legacy snapshot configs, taken as given
            schema = given.get("target_schema") or schema
            database = given.get("target_database") or database
        if not schema or not alias:
            errors.append(
                RenderError(
                    f"naming {node.kind} {node.name!r}: generate_"
                    f"{'schema' if not schema else 'alias'}_name gave an empty name",
                    SourceLocation(node.path, node.line),
                )
            )
            continue
        placed[node.id] = Placed(database or None, schema, alias)
        if node.kind != "test":
            first = named.setdefault((database, schema, alias), node)
            if first is not node:
                errors.append(
                    RenderError(
                        f"{node.kind} {node.name!r} and {first.kind} {first.name!r} are both "
                        f"named {placed[node.id].relation_name}: give one another alias or "
                        "schema",
                        SourceLocation(node.path, node.line),
                    )
                )
    return placed, errors


def _text(value: Any) -> str | None:
    """A macro's output as dbt reads it: its text stripped; `None` (or "None") is no name."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None") else text


def listing(
    placed: Mapping[str, Placed], nodes: Iterable[Node]
) -> tuple[tuple[str, str, str, str], ...]:
    """The project's models (SQL ones and snapshots; an ephemeral model has no relation) and
    seeds as information_schema.tables lists them: (schema, alias, table type, node name)."""
    rows = []
    for node in nodes:
        where = placed.get(node.id)
        if where is None or node.kind not in ("model", "seed"):
            continue
        materialized = node.config.get("materialized", "view")
        if materialized == "ephemeral" or node.config.get("language") == "python":
            continue
        kind = "VIEW" if node.kind == "model" and materialized == "view" else "BASE TABLE"
        rows.append((where.schema, where.alias, kind, node.name))
    return tuple(sorted(rows))
