"""Per-folder configs, as dbt_project.yml gives them (and rivc_project.yml may):

    models:
      +materialized: view            # every model
      jaffle_shop:                   # this project's models
        marts:
          +materialized: table       # models under models/marts/
          orders: {+tags: [daily]}   # models/marts/orders.sql

A key with dbt's `+` is a config; one without is a config when it names one and its value is not
a mapping, else a folder (or a file's name). Deeper levels win; tags add up. Configs that name
warehouse places rivc does not use (schema, database, alias, grants, ...) are accepted and
ignored (docs/dbt.md). A string value with `{{ }}` is rendered with `var()` and `env_var()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ProjectError
from .property_specs import SeedConfig
from .specs import IGNORED, ModelConfig
from .yamlio import YamlDoc

KEYS = {
    "models": ModelConfig.keys(),
    "seeds": SeedConfig.keys() | {"pre_hook", "post_hook"},  # not run on seeds
    "snapshots": ModelConfig.keys(),
}
HOOKS = ("pre_hook", "post_hook")  # dbt writes them pre-hook and post-hook in dbt_project.yml
ADDITIVE = ("tags", *HOOKS)  # configs that add up across levels instead of replacing


def config_key(raw: str) -> str:
    """A config key as rivc names it: without dbt's `+`, `pre-hook` as `pre_hook`."""
    return raw.removeprefix("+").replace("-hook", "_hook")


def merge(out: dict[str, Any], more: Mapping[str, Any]) -> None:
    """`more`'s configs over `out`'s: deeper levels win, tags and hooks add up."""
    for key, value in more.items():
        if key in ADDITIVE:
            given = [value] if isinstance(value, str) else list(value or ())
            have = list(out.get(key) or ())
            out[key] = [*have, *(v for v in given if key != "tags" or v not in have)]
        else:
            out[key] = value


def check_tree(doc: YamlDoc, kind: str, tree: Any) -> None:
    """Refuse a `+key` that is no config of `kind`, and a value the sandbox refuses
    (compiler/rendering/sandbox.py), at its line."""
    from ..rendering.sandbox import refused

    keys = KEYS[kind] | IGNORED

    def walk(level: Any, at: tuple[str | int, ...]) -> None:
        if not isinstance(level, dict):
            raise ProjectError(
                f"{kind}: expected a mapping of folders and configs", doc.location(at)
            )
        for key, value in level.items():
            name = str(key)
            if name.startswith("+"):
                if config_key(name) not in keys:
                    from ..errors import did_you_mean

                    raise ProjectError(
                        f"unknown {kind[:-1]} config {name!r}{did_you_mean(name[1:], keys)}",
                        doc.location((*at, key)),
                    )
            elif isinstance(value, dict):
                walk(value, (*at, key))
                continue
            texts = value if isinstance(value, list) else [value]
            for text in texts:
                why = refused(text) if isinstance(text, str) and "{{" in text else None
                if why is not None:
                    raise ProjectError(why, doc.location((*at, key)))

    walk(tree, (kind,))


def folder_config(
    tree: Mapping[str, Any],
    kind: str,
    project: str,
    folders: tuple[str, ...],
    name: str,
    variables: Mapping[str, Any],
    env: Mapping[str, str],
    target: Mapping[str, Any],
) -> dict[str, Any]:
    """The configs `tree` gives a node of `kind` named `name` in `folders` (relative to the kind's
    folder), outermost first; deeper levels win, tags add up. A templated value sees `var`,
    `env_var` and `target`, as in dbt."""
    keys = KEYS[kind]
    out: dict[str, Any] = {}
    level: Mapping[str, Any] = tree
    _take(level, keys, out, variables, env, target)
    for step in (project, *folders, name):
        deeper = level.get(step)
        if not isinstance(deeper, dict):
            break
        level = deeper
        _take(level, keys, out, variables, env, target)
    return out


def _take(
    level: Mapping[str, Any],
    keys: frozenset[str],
    out: dict[str, Any],
    variables: Mapping[str, Any],
    env: Mapping[str, str],
    target: Mapping[str, Any],
) -> None:
    for raw, value in level.items():
        key = config_key(str(raw))
        plus = str(raw).startswith("+")
        if not plus and (key not in keys or isinstance(value, dict)):
            continue  # a folder
        if key not in keys:
            continue  # a dbt config rivc ignores
        if key not in HOOKS:  # a hook is rendered with its model, `{{ this }}` and all
            value = _render(value, variables, env, target)
        merge(out, {key: value})


def _render(
    value: Any, variables: Mapping[str, Any], env: Mapping[str, str], target: Mapping[str, Any]
) -> Any:
    """`{{ var('x', default) }}` and `{{ env_var('X') }}` in a config value, as dbt renders them."""
    from ..rendering.sandbox import render_value

    def var(name: str, default: Any = None) -> Any:
        return variables.get(name, default)

    try:
        return render_value(value, env, var=var, target=target)
    except ValueError as exc:
        raise ProjectError(str(exc)) from None
