"""profiles.yml: the profile's output for the target (rivc's format, or a dbt target of type
spark), and whether it names a Spark that runs elsewhere."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..dbt.project import dbt_target
from ..errors import ProjectError, did_you_mean
from .locate import TARGET_ENV, find_profiles, read_project_file
from .secretrefs import resolve
from .specbase import is_uri
from .specs import ProfileSpec, validate_doc
from .yamlio import YamlDoc, YamlPath, parse_yaml

DEFAULT_TARGET = "default"  # the name of a profile without outputs:


def load_profile(
    root: Path, name: str, env: Mapping[str, str], used: dict[str, str | None] | None = None
) -> tuple[ProfileSpec, Path | None, str]:
    """The profile's output for the target (`--target`, else $RIVC_TARGET, else the profile's
    `target:`), the file it came from and the target's name. A profile without `outputs:` is
    one output, named `default`. `used` gets the variables its values read (a compile's
    fingerprint: a changed or unset one compiles again)."""
    chosen = env.get(TARGET_ENV) or None
    path = find_profiles(root, env)
    if path is None:
        if chosen and chosen != DEFAULT_TARGET:
            raise ProjectError(f"target {chosen!r}: no profiles.yml found (docs/project.md)")
        return ProfileSpec(), None, DEFAULT_TARGET
    rel = path.relative_to(root) if path.is_relative_to(root) else path
    doc = parse_yaml(read_project_file(root, rel), rel, env)
    doc.data = _render(doc, (), doc.data, env, path.parent)
    if used is not None:
        used.update(doc.env_used)
    data = doc.data or {}
    if not isinstance(data, dict) or name not in data:
        names = list(data) if isinstance(data, dict) else []
        raise ProjectError(
            f"profile {name!r} not found in {path}{did_you_mean(name, names)}", doc.location(())
        )
    entry = data[name]
    at: YamlPath = (name,)
    target = DEFAULT_TARGET
    if isinstance(entry, dict) and "outputs" in entry:
        outputs = entry["outputs"]
        extra = sorted(set(entry) - {"outputs", "target"})
        if extra:
            raise ProjectError(
                f"unknown key {'.'.join((name, extra[0]))!r}: a profile with outputs holds "
                "only target and outputs",
                doc.location((name, extra[0])),
            )
        if not isinstance(outputs, dict) or not outputs:
            raise ProjectError("outputs must map target names to settings", doc.location(at))
        target = chosen or entry.get("target") or ""
        if not target:
            raise ProjectError(
                f"profile {name!r} has outputs {', '.join(map(str, outputs))} and no target: "
                f"set target: or pass --target",
                doc.location(at),
            )
        if target not in outputs:
            where = ("target",) if not chosen and "target" in entry else ()
            raise ProjectError(
                f"target {target!r} is not an output of profile {name!r}"
                f"{did_you_mean(str(target), outputs)} (outputs: {', '.join(map(str, outputs))})",
                doc.location((*at, *where)),
            )
        entry, at = outputs[target], (name, "outputs", str(target))
    elif chosen and chosen != DEFAULT_TARGET:
        raise ProjectError(
            f"target {chosen!r}: profile {name!r} has no outputs: (docs/project.md, Targets)",
            doc.location(at),
        )
    if isinstance(entry, dict) and "type" in entry:  # a dbt target
        entry = dbt_target(doc, at, entry)
    spec: ProfileSpec = validate_doc(ProfileSpec, doc, at, entry)
    far = remote_spark(spec, env)
    if far and not is_uri(spec.warehouse):
        given = isinstance(entry, dict) and "warehouse" in entry
        raise ProjectError(
            f"warehouse: {'this' if given else 'the default'} path is on this machine, which "
            f"{far} cannot reach; {URI_HINT}",
            doc.location((*at, "warehouse" if given else "spark")),
        )
    return spec, path, str(target)


def _render(doc: YamlDoc, at: YamlPath, value: Any, env: Mapping[str, str], base: Path) -> Any:
    """`{{ env_var('X') }}` in profiles.yml's values, as dbt renders them (a secret variable is
    allowed here), and the references to secrets (`${file:PATH}`, `${vault:PATH#FIELD}`:
    secretrefs.py), each failure at its line."""
    from ..rendering.sandbox import render_value

    if isinstance(value, dict):
        return {k: _render(doc, (*at, str(k)), v, env, base) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(doc, (*at, i), v, env, base) for i, v in enumerate(value)]
    try:
        return resolve(render_value(value, env, secrets=True, used=doc.env_used), base, env)
    except ValueError as exc:
        raise ProjectError(str(exc), doc.location(at)) from None


DOTENV = ".env"
_DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def dotenv(root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables of the `.env` file beside the profiles.yml the project uses (found as
    find_profiles finds it) that the environment does not set already: the environment wins,
    as with docker compose. `NAME=value`, `export NAME=value`, '...' or "..." around a value,
    `#` comments; a line of another shape is refused naming the file and line."""
    profiles = find_profiles(root, env)
    path = (profiles.parent if profiles is not None else root) / DOTENV
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _DOTENV_LINE.match(line)
        if m is None:
            raise ProjectError(f"{path}:{n}: expected NAME=value")
        name, value = m.group(1), m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if name not in env:
            out[name] = value
    return out


URI_HINT = (
    "use a URI its executors reach (s3://, gs://, abfss://, or file:// on a disk they all mount)"
)


def remote_spark(profile: ProfileSpec, env: Mapping[str, str]) -> str | None:
    """What Spark the profile names when it does not run on this machine, else None."""
    s = profile.spark
    remote = s.remote or env.get("SPARK_REMOTE")
    if remote and not remote.startswith("local"):  # `local[2]`: PySpark's own server, here
        return "a Spark Connect server"
    if s.master and not s.master.startswith("local"):
        return f"the cluster at {s.master}"
    return None


def check_connection(
    profile: ProfileSpec,
    profile_path: Path | None,
    name: str,
    kind: str,
    doc: YamlDoc,
    at: YamlPath,
) -> None:
    """A source's or sink's `connection` names one of the profile's, of its database."""
    if profile_path is None:
        return
    given = profile.connections.get(name)
    if given is None:
        raise ProjectError(
            f"connection {name!r} is not in {profile_path}"
            f"{did_you_mean(name, profile.connections)}",
            doc.location(at),
        )
    if given.type != kind:
        raise ProjectError(
            f"connection {name!r} is a {given.type} connection, not {kind}", doc.location(at)
        )
