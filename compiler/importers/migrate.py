"""`rivc import rivet <rivet.yaml>` and `rivc import rivven <file>`: another tool's config as a
rivc project's files (docs/migrate.md).

Rivet's source becomes a profile connection and a source whose tables are its exports (rivc's
relational sources keep Rivet's modes, tuning profiles, meta columns and skip_empty under the
same names); each export's destination becomes a files sink of the landed table. What has no
equivalent is listed, never dropped silently. Pure YAML in, YAML out: no JVM, no database.

A Rivven Connect file's CDC sources become profile connections and sources of their tables, and
each sink becomes one sink per source table whose topic it consumes (rivc has no broker: a sink
names what it delivers); its `config:` is kept as it is, since compile reads Rivven's names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from rivc.adapters.connectors.webhook.spec import PUBLIC_HEADERS

from ..errors import ProjectError
from ..loading.yamlio import YamlDoc, YamlPath
from . import aliases

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
            f"lists {kind} (`- name: ...`, no broker or topics); `rivc import rivven <file>` "
            "writes it as rivc's files (docs/migrate.md)",
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
    elif "compression" in export:  # a text file compressed whole
        config["compression"] = export["compression"]
    if "compression_level" in export:
        if config.get("compression") in ("zstd", "gzip"):
            config["compression_level"] = export["compression_level"]
        else:
            unmapped.append("compression_level: rivc takes a level for gzip and zstd files")
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
    "url_file": 'a file\'s URL is `url: "${file:PATH}"` in profiles.yml (docs/project.md)',
}


_ENV_REF = re.compile(r"^\$\{(\w+)(:-.*)?\}$")
_VAULT_REF = re.compile(r"^vault:[^#}]+#[^}]+$")  # Rivven's secret reference
CDC = {"postgres-cdc": "postgres", "mysql-cdc": "mysql"}
CDC_CONFIG = {
    "postgres-cdc": (
        "slot_name",
        "publication_name",
        "auto_create_slot",
        "auto_create_publication",
    ),
    "mysql-cdc": ("server_id",),
}
STREAMS = ("mqtt", "kafka")  # sources whose config compiles as it is; their columns do not
CONNECTION_KEYS = ("host", "port", "database", "user")
SSLMODES = ("disable", "prefer", "require", "verify-ca", "verify-full")


def import_rivven(doc: YamlDoc) -> Imported:
    """The project files for the Rivven Connect file `doc` (read without expanding ${VAR})."""
    data = doc.data
    if not isinstance(data, dict) or not any(
        isinstance(data.get(k), dict) for k in ("sources", "sinks")
    ):
        raise ProjectError(
            "not a Rivven Connect file: it needs `sources:` or `sinks:` as a map of names",
            doc.location(()),
        )
    out = Imported({})
    for key in data:
        if key not in ("sources", "sinks"):
            out.unmapped.append(f"{key}: {_RIVVEN_WHY.get(key, 'rivc has no such setting')}")
    connections: dict[str, Any] = {}
    sources: list[dict[str, Any]] = []
    topics: dict[str, list[tuple[str, str]]] = {}  # topic -> (input, table) it carries
    for name, src in (data.get("sources") or {}).items():
        at = f"sources.{name}"
        if not isinstance(src, dict):
            raise ProjectError(f"{at} must be a map", doc.location(("sources", name)))
        spec, carried = _rivven_source(str(name), src, connections, out.unmapped)
        if spec is None:
            continue
        sources.append(spec)
        if src.get("topic"):
            topics.setdefault(str(src["topic"]), []).extend(carried)
    sinks: list[dict[str, Any]] = []
    for name, sink in (data.get("sinks") or {}).items():
        if not isinstance(sink, dict):
            raise ProjectError(f"sinks.{name} must be a map", doc.location(("sinks", name)))
        sinks += _rivven_sink(str(name), sink, topics, out.unmapped)
    if connections:
        out.files["profiles.yml"] = _dump({"default": {"connections": connections}})
    if sources:
        out.files["sources/rivven.yml"] = _dump({"sources": sources})
    if sinks:
        out.files["sinks/rivven.yml"] = _dump({"sinks": sinks})
    return out


_RIVVEN_WHY = {
    "version": "rivc's files have no version",
    "broker": "rivc has no broker between sources and sinks: a sink names what it delivers",
    "settings": "rivc has no topics to create",
    "pipelines": "a sink's `from:` is its pipeline",
    "topic_config": "rivc has no topics to create",
    "dead_letter_topic": "rivc's dead letters are a sink's `dead_letter` (a sink of their own)",
    "consumer_group": "a sink's place is committed with its own data, not in a consumer group",
    "topics": "the import wired the sink to the source tables that publish these topics",
    "secrets": "rivc reaches Vault as its CLI does: set VAULT_ADDR and VAULT_TOKEN (a .env beside "
    "profiles.yml); a `vault:PATH#FIELD` password became ${vault:PATH#FIELD}",
}


def _rivven_source(
    name: str,
    src: dict[str, Any],
    connections: dict[str, Any],
    unmapped: list[str],
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    """The rivc source of one Rivven source, and the (input, table) pairs its topic carries."""
    at = f"sources.{name}"
    connector = str(src.get("connector", ""))
    config = dict(src.get("config") or {})
    for key in src:
        if key not in ("connector", "topic", "config", "rate_limit"):
            unmapped.append(f"{at}.{key}: {_RIVVEN_WHY.get(key, 'rivc has no such setting')}")
    if connector in CDC:
        connections[name] = _connection(CDC[connector], config, f"{at}.config", unmapped)
        listed = config.get("publication_tables" if connector == "postgres-cdc" else "tables")
        tables = [str(t) for t in listed or []]
        if not tables:
            unmapped.append(
                f"{at}.config: no tables listed (Rivven: every table); list the tables to land "
                "under the source's `tables:`"
            )
        keep = CDC_CONFIG[connector]
        known = (*keep, *CONNECTION_KEYS, "password", "tls", "publication_tables", "tables")
        for key in config:
            if key not in known:
                unmapped.append(f"{at}.config.{key}: rivc has no such setting")
        spec: dict[str, Any] = {"name": name, "connector": connector, "connection": name}
        if any(k in config for k in keep):
            spec["config"] = {k: config[k] for k in keep if k in config}
        spec["tables"] = [{"name": t.rsplit(".", 1)[-1], "table": t, **_rate(src)} for t in tables]
        return spec, [
            (f"source:{name}.{t.rsplit('.', 1)[-1]}", t.rsplit(".", 1)[-1]) for t in tables
        ]
    if connector in STREAMS:
        unmapped.append(
            f"{at}: declare the columns of its JSON payloads under `columns:` (rivc parses each "
            "payload into the table's declared columns)"
        )
        table = {"name": name, "config": config, "columns": {}, **_rate(src)}
        return {"name": name, "connector": connector, "tables": [table]}, [
            (f"source:{name}.{name}", name)
        ]
    unmapped.append(f"{at}: connector {connector}: rivc has no such source")
    return None, []


def _rate(item: dict[str, Any]) -> dict[str, Any]:
    return {"rate_limit": item["rate_limit"]} if "rate_limit" in item else {}


def _connection(kind: str, config: dict[str, Any], at: str, unmapped: list[str]) -> dict[str, Any]:
    """A profile connection from a CDC source's config; a password given as ${VAR} becomes
    password_env, one given as a Vault reference (`vault:PATH#FIELD`) rivc's `${vault:...}`
    (a literal one is kept, and listed)."""
    conn: dict[str, Any] = {"type": kind, **{k: config[k] for k in CONNECTION_KEYS if k in config}}
    password = config.get("password")
    ref = _ENV_REF.match(password) if isinstance(password, str) else None
    if ref is not None:
        conn["password_env"] = ref.group(1)
    elif isinstance(password, str) and _VAULT_REF.match(password):
        conn["password"] = "${" + password + "}"
    elif password is not None:
        conn["password"] = password
        unmapped.append(f"{at}.password: written into profiles.yml as it is; prefer password_env")
    tls = config.get("tls")
    if isinstance(tls, dict):
        for key, value in tls.items():
            if key == "mode" and value in SSLMODES:
                conn["sslmode"] = value
            elif key in ("ca_path", "ca_cert", "root_cert"):
                conn["sslrootcert"] = value
            else:
                unmapped.append(f"{at}.tls.{key}: rivc takes sslmode, sslrootcert, sslcert, sslkey")
    return conn


def _rivven_sink(
    name: str, sink: dict[str, Any], topics: dict[str, list[tuple[str, str]]], unmapped: list[str]
) -> list[dict[str, Any]]:
    """One rivc sink per source table the sink's topics carry."""
    at = f"sinks.{name}"
    from ..registry import connector as known  # the registry imports what imports this module

    connector = aliases.connector_name(str(sink.get("connector", "")))
    if known("sink", connector) is None:
        unmapped.append(f"{at}: connector {sink.get('connector')}: rivc has no such sink")
        return []
    for key in sink:
        if key not in ("connector", "topics", "config", "transforms", "rate_limit"):
            unmapped.append(f"{at}.{key}: {_RIVVEN_WHY.get(key, 'rivc has no such setting')}")
    for t in sink.get("transforms") or []:
        kind = t.get("type") if isinstance(t, dict) else t
        unmapped.append(
            f"{at}.transforms {kind}: write it as rivc's "
            + aliases.TRANSFORMS.get(str(kind), "transform of that name (docs/transforms.md)")
        )
    wanted = [str(t) for t in sink.get("topics") or []]
    inputs = [pair for t in wanted for pair in topics.get(t, [])]
    for t in wanted:
        if t not in topics:
            unmapped.append(f"{at}.topics {t}: no source in this file publishes it")
    out = []
    for source, table in inputs:
        config = _secrets_from_env(dict(sink.get("config") or {}), known("sink", connector))
        if connector == "webhook":
            config = _headers_from_env(config, f"{at}.config", unmapped)
        one = len(inputs) == 1
        if not one and connector == "delta" and "table_uri" in config:
            config["table_uri"] = f"{str(config['table_uri']).rstrip('/')}/{table}"
        if not one and connector == "iceberg" and "table" in config:
            config["table"] = f"{config['table']}_{table}"
        spec = {"name": name if one else f"{name}_{table}", "from": source, "connector": connector}
        out.append({**spec, "config": config, **_rate(sink)})
    return out


def _secrets_from_env(config: dict[str, Any], info: Any) -> dict[str, Any]:
    """A secret given as `${VAR}` under a key whose spec has `<key>_env` (a password) becomes
    that: the variable's name, read when the sink runs (never written out expanded)."""
    fields = info.config.model_fields if info is not None else {}
    out = {}
    for key, value in config.items():
        ref = _ENV_REF.match(value) if isinstance(value, str) else None
        if ref is not None and f"{key}_env" in fields and f"{key}_env" not in config:
            out[f"{key}_env"] = ref.group(1)
        else:
            out[key] = value
    return out


def _headers_from_env(config: dict[str, Any], at: str, unmapped: list[str]) -> dict[str, Any]:
    """A webhook's headers whose values name `${VAR}`s go to `headers_env`, filled in at run
    time (never written out expanded); a literal secret header stays, and is listed."""
    headers = dict(config.get("headers") or {})
    from_env = dict(config.get("headers_env") or {})
    for header, value in list(headers.items()):
        text = str(value)
        if "${" in text:
            from_env[header] = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}", r"{\1}", text)
            del headers[header]
        elif header.lower() not in PUBLIC_HEADERS:
            unmapped.append(
                f"{at}.headers.{header}: a literal secret, written as it is; prefer "
                "headers_env (a variable that holds it)"
            )
    out = {k: v for k, v in config.items() if k not in ("headers", "headers_env")}
    if headers:
        out["headers"] = headers
    if from_env:
        out["headers_env"] = from_env
    return out


def _why(key: str) -> str:
    return _WHY.get(key, "rivc has no such setting")


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
