"""A dbt project's dbt_project.yml read as rivc's project spec (docs/dbt.md).

What maps: name, profile, the folders of models, seeds, tests and macros, `vars` (global and
scoped to this project), and the per-folder `models:` and `seeds:` configs (with or without
dbt's `+`). What dbt has and rivc does not need (its version pins, target-path, clean-targets,
dbt Cloud's ids, ...) is accepted and left alone; a key dbt does not know either is an error at
its line, as in rivc_project.yml.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import ProjectError
from ..loading.specs import ProjectSpec, validate_doc
from ..loading.yamlio import YamlDoc

DBT_PROJECT_FILE = "dbt_project.yml"

# dbt_project.yml keys rivc accepts and does not act on (docs/dbt.md says why for each)
IGNORED = frozenset(
    {
        "config-version",
        "require-dbt-version",
        "target-path",
        "log-path",
        "docs-paths",
        "asset-paths",
        "analysis-paths",
        "dbt-cloud",
        "quoting",
        "query-comment",
        "restrict-access",
        "flags",
        "data_tests",
        "tests",
        "sources",
        "metrics",
        "semantic-models",
        "saved-queries",
        "exposures",
        "analyses",
        "unit_tests",
    }
)
PATHS = {
    "model-paths": "models",
    "seed-paths": "seeds",
    "test-paths": "tests",
    "macro-paths": "macros",
    "snapshot-paths": "snapshots",
}


def dbt_project_spec(doc: YamlDoc, env: Mapping[str, str]) -> ProjectSpec:
    """dbt_project.yml as rivc's ProjectSpec; errors name the file, line and key."""
    data = doc.data
    if not isinstance(data, dict):
        raise ProjectError(f"{DBT_PROJECT_FILE} must be a mapping", doc.location(()))
    spec: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("name", "profile", "version"):
            spec[key] = value
        elif key in PATHS:
            spec.setdefault("paths", {})[PATHS[key]] = _one_folder(doc, key, value)
        elif key == "vars":
            spec["vars"] = _vars(doc, value, str(data.get("name", "")))
        elif key in ("models", "seeds", "snapshots"):
            spec[key] = value if value is not None else {}
        elif key == "dispatch":
            spec["dispatch"] = value or []
        elif key == "clean-targets":
            spec["clean_targets"] = value or []
        elif key in ("on-run-start", "on-run-end"):
            spec[key.replace("-", "_")] = value
        elif key == "packages-install-path":
            spec.setdefault("paths", {})["packages"] = str(value).rstrip("/")
        elif key not in IGNORED:
            from ..errors import did_you_mean

            known = [*PATHS, "name", "profile", "version", "vars", "models", "seeds", "snapshots"]
            known += ["dispatch"]
            known += ["packages-install-path", "clean-targets", "on-run-start", "on-run-end"]
            known += IGNORED
            raise ProjectError(
                f"unknown key {key!r} in {DBT_PROJECT_FILE}{did_you_mean(str(key), known)}",
                doc.location((key,)),
            )
    if "profile" not in spec:
        spec["profile"] = "default"
    return validate_doc(ProjectSpec, doc, (), spec)  # type: ignore[no-any-return]


def _one_folder(doc: YamlDoc, key: str, value: Any) -> str:
    folders = [value] if isinstance(value, str) else value
    if not isinstance(folders, list) or not folders or not all(isinstance(f, str) for f in folders):
        raise ProjectError(f"{key} must be a list of folders", doc.location((key,)))
    if len(folders) > 1:
        raise ProjectError(
            f"{key}: rivc reads one folder of each kind, got {len(folders)}; keep one "
            "(subfolders are read too)",
            doc.location((key,)),
        )
    return str(folders[0]).rstrip("/")


def _vars(doc: YamlDoc, value: Any, project: str) -> dict[str, Any]:
    """dbt's vars: global ones, and those scoped to this project (`vars: {proj: {x: 1}}`);
    vars scoped to a package apply inside the package only, so they are left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProjectError("vars must be a mapping", doc.location(("vars",)))
    out: dict[str, Any] = {}
    scoped: dict[str, Any] = {}
    for key, item in value.items():
        if key == project and isinstance(item, dict):
            scoped = item
        elif not isinstance(item, dict) or ":" in str(key):
            out[str(key)] = item
    return {**out, **scoped}


# dbt-spark target keys that name a thrift/ODBC connection or dbt's own behaviour: rivc talks
# to Spark through PySpark, so they are left alone
DBT_TARGET_KEYS = frozenset(
    {
        "type",
        "method",
        "host",
        "port",
        "database",
        "user",
        "token",
        "cluster",
        "organization",
        "endpoint",
        "driver",
        "auth",
        "kerberos_service_name",
        "use_ssl",
        "connect_retries",
        "connect_timeout",
        "retry_all",
        "poll_interval",
        "query_retries",
        "server_side_parameters",
    }
)


def dbt_target(doc: YamlDoc, at: tuple[str | int, ...], entry: dict[str, Any]) -> dict[str, Any]:
    """A dbt profiles.yml target as rivc's profile: `type: spark` with `method: session` runs on
    local Spark (or the cluster `master:` names), a `host` of the form sc://... is Spark Connect,
    `server_side_parameters` are Spark confs; rivc's own keys (warehouse, storage, connections,
    spark) may sit beside them."""
    kind = entry.get("type")
    if kind != "spark":
        raise ProjectError(
            f"this target is a dbt target of type {kind!r}: rivc runs models on Spark; add a "
            "target of type spark (method: session), or a rivc profile (docs/dbt.md)",
            doc.location((*at, "type")),
        )
    method = str(entry.get("method", "session"))
    host = str(entry.get("host", ""))
    out = {k: v for k, v in entry.items() if k not in DBT_TARGET_KEYS}
    spark = dict(out.get("spark") or {})
    if host.startswith("sc://"):
        spark.setdefault("remote", host)
    elif method != "session":
        raise ProjectError(
            f"method {method!r}: rivc reaches Spark through PySpark, not {method}; use "
            "method: session (local Spark or the cluster `master:` names) or a Spark Connect "
            "host (host: sc://...:15002)",
            doc.location((*at, "method")),
        )
    params = entry.get("server_side_parameters") or {}
    if params:
        spark["conf"] = {**params, **spark.get("conf", {})}
    if spark:
        out["spark"] = spark
    return out


DBT_ONLY = {  # what rivc does with dbt's other resources in properties YAML (docs/dbt.md)
    "analyses": "analyses are not compiled",
    "macros": "macro properties are documentation only",
    "exposures": "exposures are documentation only",
    "metrics": "the semantic layer is not run",
    "semantic_models": "the semantic layer is not run",
    "saved_queries": "the semantic layer is not run",
    "groups": "groups (access control between models) are not enforced",
}


_SNAPSHOT = re.compile(r"\{%-?\s*snapshot\s+(\w+)\s*-?%\}(.*?)\{%-?\s*endsnapshot\s*-?%\}", re.S)


def snapshot_blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of each `{% snapshot name %}...{% endsnapshot %}` block, the body padded
    with the newlines before it so that its lines are the file's."""
    return [
        (m.group(1), "\n" * text.count("\n", 0, m.start(2)) + m.group(2))
        for m in _SNAPSHOT.finditer(text)
    ]
