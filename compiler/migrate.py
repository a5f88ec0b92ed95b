"""`rivc import rivet <rivet.yaml>`: a Rivet config as a rivc project's files (docs/migrate.md).

Rivet's source becomes a profile connection and a source whose tables are its exports (rivc's
relational sources keep Rivet's modes, tuning profiles, meta columns and skip_empty under the
same names); each export's destination becomes a files sink of the landed table. What has no
equivalent is listed, never dropped silently. Pure YAML in, YAML out: no JVM, no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import ProjectError
from .yamlio import YamlDoc, YamlPath

SOURCE_KEYS = ("type", "url", "url_env", "host", "port", "user", "password", "password_env")
EXPORT_KEYS = (
    "query",
    "mode",
    "cursor_column",
    "chunk_column",
    "chunk_size",
    "parallel",
    "time_column",
    "days_window",
    "skip_empty",
    "meta_columns",
)
CODECS = ("zstd", "snappy", "gzip", "lz4", "none")


@dataclass
class Imported:
    files: dict[str, str]  # project-relative path -> YAML text
    unmapped: list[str] = field(default_factory=list)  # "key: why", in the config's order


def import_rivet(doc: YamlDoc, name: str) -> Imported:
    """The project files for Rivet config `doc`; `name` names the source and connection."""
    data = doc.data
    if not isinstance(data, dict) or "source" not in data or "exports" not in data:
        raise ProjectError(
            "not a Rivet config: it needs `source:` and `exports:`", doc.location(())
        )
    source, exports = data["source"], data["exports"]
    if not isinstance(source, dict) or source.get("type") not in ("postgres", "mysql"):
        raise ProjectError(
            "source.type must be postgres or mysql", doc.location(("source", "type"))
        )
    if not isinstance(exports, list) or not exports:
        raise ProjectError("exports must be a list of exports", doc.location(("exports",)))
    out = Imported({})
    connection = {k: source[k] for k in SOURCE_KEYS if k in source}
    if "database" in source:
        connection["database"] = source["database"]
    for key in source:
        if key not in (*SOURCE_KEYS, "database", "tuning"):
            out.unmapped.append(f"source.{key}: {_why(key)}")
    tables, sinks = [], []
    for i, export in enumerate(exports):
        at: YamlPath = ("exports", i)
        if not isinstance(export, dict) or not export.get("name"):
            raise ProjectError("an export needs a name", doc.location(at))
        table = {"name": export["name"], **{k: export[k] for k in EXPORT_KEYS if k in export}}
        tables.append(table)
        sink, unmapped = _files_sink(name, export)
        sinks.append(sink)
        known = (*EXPORT_KEYS, "name", "format", "compression", "compression_level", "destination")
        out.unmapped += [
            f"exports[{export['name']}].{k}: {_why(k)}" for k in export if k not in known
        ]
        out.unmapped += [f"exports[{export['name']}].{u}" for u in unmapped]
    spec: dict[str, Any] = {"name": name, "connector": source["type"], "connection": name}
    if "tuning" in source:
        spec["tuning"] = source["tuning"]
    spec["tables"] = tables
    out.files["profiles.yml"] = _dump({"default": {"connections": {name: connection}}})
    out.files[f"sources/{name}.yml"] = _dump({"sources": [spec]})
    out.files[f"sinks/{name}.yml"] = _dump({"sinks": sinks})
    return out


RIVVEN_KEYS = ("version", "broker", "settings", "pipelines")


def refuse_foreign(doc: YamlDoc, kind: str) -> None:
    """A Rivet config or a Rivven Connect file where rivc's `kind` (sources, sinks) file is:
    refused at its line, with where to go instead."""
    data = doc.data
    if not isinstance(data, dict):
        return
    if "source" in data and "exports" in data:
        raise ProjectError(
            "this is a Rivet config, not a rivc file: `rivc import rivet <file>` writes it as "
            "a connection, a source and its sinks (docs/migrate.md)",
            doc.location(("exports",)),
        )
    # dbt's property files say `version: 2`; Rivven's `version: "1.0"`
    rivven = next(
        (k for k in RIVVEN_KEYS if k in data and (k != "version" or isinstance(data[k], str))), None
    )
    mapped = isinstance(data.get(kind), dict)
    if rivven or mapped:
        raise ProjectError(
            f"this looks like a Rivven Connect file (`{rivven or kind}:`): rivc's {kind}/*.yml "
            f"lists {kind} (`- name: ...`, no broker or topics); docs/migrate.md maps Rivven's "
            "keys to rivc's",
            doc.location((rivven or kind,)),
        )


def _files_sink(source: str, export: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The files sink of one export: its format, compression and destination."""
    unmapped: list[str] = []
    name = export["name"]
    fmt = export.get("format", "parquet")
    config: dict[str, Any] = {"format": fmt}
    if fmt == "parquet":
        config["compression"] = export.get("compression", "zstd")  # Rivet's default
        if "compression_level" in export:
            unmapped.append("compression_level: rivc writes each codec at its default level")
    dest = export.get("destination") or {"type": "local", "path": "./output"}
    kind = dest.get("type", "local")
    if kind == "local":
        config["path"] = f"{str(dest.get('path', './output')).rstrip('/')}/{name}"
    elif kind in ("s3", "gcs"):
        prefix = str(dest.get("prefix", "")).strip("/")
        scheme = "s3" if kind == "s3" else "gs"
        config["path"] = "/".join(
            p for p in (f"{scheme}://{dest.get('bucket', '')}", prefix, name) if p
        )
        options = {}
        if dest.get("region"):
            options["AWS_REGION"] = str(dest["region"])
        if dest.get("endpoint"):
            options["AWS_ENDPOINT_URL" if kind == "s3" else "GOOGLE_STORAGE_ENDPOINT"] = str(
                dest["endpoint"]
            )
        if options:
            config["storage_options"] = options
        for key in ("access_key_env", "secret_key_env", "credentials_file"):
            if key in dest:
                unmapped.append(
                    f"destination.{key}: rivc takes the store's credentials from the environment "
                    "or the profile's storage: block (AWS_ACCESS_KEY_ID, "
                    "GOOGLE_APPLICATION_CREDENTIALS, ...)"
                )
    else:
        unmapped.append(
            f"destination.type {kind}: rivc's stdout sink writes JSON lines, not the file; "
            "the export is written to ./output instead"
        )
        config["path"] = f"./output/{name}"
    for key in dest:
        if key not in (
            "type",
            "path",
            "bucket",
            "prefix",
            "region",
            "endpoint",
            "access_key_env",
            "secret_key_env",
            "credentials_file",
        ):
            unmapped.append(f"destination.{key}: {_why(key)}")
    sink = {"name": name, "from": f"source:{source}.{name}", "connector": "files", "config": config}
    return sink, unmapped


_WHY = {
    "url_file": "rivc reads a URL from `url` or the variable `url_env`; put the file's text in one",
}


def _why(key: str) -> str:
    return _WHY.get(key, "rivc has no such setting")


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
