"""Config names users bring from the systems rivc replaces (Rivven's connectors; see
docs/sinks.md, "Configs from Rivven"): each is either an alias of rivc's own key, translated here
before validation, or refused with a pointer to what rivc does instead.

`translate` never raises: it returns the translated config and the refusals, each with the key
(path inside `config`) it is about, so that every one is reported at its file and line in one run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONNECTORS = {
    "delta-lake": "delta",
    "http-webhook": "webhook",
    "sqs-sink": "sqs",
}  # Rivven's names -> rivc's

# Rivven's transform types -> rivc's (docs/transforms.md), named in the refusal of the type
TRANSFORMS = {
    "ExtractNewRecordState": "unwrap_cdc (the after-image; deletes: apply and sequence_by merge "
    "deletes)",
    "MaskField": "mask (fields; char for mask_char)",
    "ReplaceField": "rename (map for rename) and drop (fields for exclude)",
    "InsertField": "insert (static; timestamp: a column name)",
    "Filter": "filter (condition in Spark SQL over the columns; action keep or drop)",
    "ContentRouter": "route (field, routes, default)",
}

Refusal = tuple[tuple[str, ...], str]  # (key path under config, message)

MIB = 1 << 20
QOS = {"at_most_once": 0, "at_least_once": 1, "exactly_once": 2}

# The object-store blocks of Rivven's sinks, as the environment-variable names rivc's storage
# options take (docs/cluster.md). A value of None: the key is accepted and needs no option.
STORE_BLOCKS: dict[str, dict[str, str | None]] = {
    "s3": {
        "region": "AWS_REGION",
        "endpoint": "AWS_ENDPOINT_URL",
        "access_key_id": "AWS_ACCESS_KEY_ID",
        "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
        "allow_http": "AWS_ALLOW_HTTP",
        "path_style_access": None,  # path-style requests are how rivc reaches an endpoint
    },
    "gcs": {
        "service_account_path": "GOOGLE_APPLICATION_CREDENTIALS",
        "service_account_key": "GOOGLE_SERVICE_ACCOUNT_KEY",
        "project_id": "GOOGLE_CLOUD_PROJECT",
    },
    "azure": {
        "account": "AZURE_STORAGE_ACCOUNT_NAME",
        "storage_account": "AZURE_STORAGE_ACCOUNT_NAME",
        "access_key": "AZURE_STORAGE_ACCOUNT_KEY",
        "sas_token": "AZURE_STORAGE_SAS_TOKEN",
    },
}

BATCHING = (
    "a batch is one run or one Spark micro-batch: set the sink's trigger "
    "(docs/streaming.md), not {key}"
)


def connector_name(name: str) -> str:
    return CONNECTORS.get(name, name)


Translator = Callable[[dict[str, Any], list[Refusal]], None]


def translate(fn: Translator | None, config: Any) -> tuple[Any, list[Refusal]]:
    """`config` with a connector's aliases translated (its registry entry names `fn`)."""
    if fn is None or not isinstance(config, dict):
        return config, []
    out = dict(config)
    refusals: list[Refusal] = []
    fn(out, refusals)
    return out, refusals


def _rename(
    out: dict[str, Any],
    refusals: list[Refusal],
    old: str,
    new: str,
    convert: Callable[[Any], Any] = lambda v: v,
) -> None:
    if old not in out:
        return
    if new in out:
        out.pop(old)
        refusals.append(((old,), f"{old} is rivc's {new}, which is given too: keep one"))
        return
    out[new] = convert(out.pop(old))


def _refuse(out: dict[str, Any], refusals: list[Refusal], key: str, why: str) -> None:
    if key in out:  # taken out: reported once, here, and not again as an unknown key
        out.pop(key)
        refusals.append(((key,), f"{key}: {why.format(key=key)}"))


def _stores(out: dict[str, Any], refusals: list[Refusal], target: str = "storage_options") -> None:
    for block, names in STORE_BLOCKS.items():
        given = out.pop(block, None)
        if given is None:
            continue
        if not isinstance(given, dict):
            refusals.append(((block,), f"{block} must be a mapping of the store's settings"))
            continue
        options = dict(out.get(target) or {})
        for key, value in given.items():
            if key not in names:
                known = ", ".join(sorted(names))
                refusals.append(((block, key), f"unknown key '{block}.{key}' (known: {known})"))
            elif names[key] is not None:
                text = str(value).lower() if isinstance(value, bool) else str(value)
                options.setdefault(str(names[key]), text)
        out[target] = options


def _flag(out: dict[str, Any], refusals: list[Refusal], key: str, needed: bool, why: str) -> None:
    """A switch whose one value is what rivc always does: accepted with that value."""
    if key not in out:
        return
    if out.pop(key) is not needed:
        refusals.append(((key,), f"{key}: {why}"))


def _lakehouse(out: dict[str, Any], refusals: list[Refusal]) -> None:
    """What Rivven's delta-lake and iceberg sinks share: batching keys, the store blocks."""
    for key in ("batch_size", "flush_interval_secs"):
        _refuse(out, refusals, key, BATCHING)
    _stores(out, refusals)


def delta_sink(out: dict[str, Any], refusals: list[Refusal]) -> None:
    _rename(out, refusals, "write_mode", "mode")
    _rename(out, refusals, "partition_columns", "partition_by")
    _rename(out, refusals, "target_file_size_mb", "target_file_size", _mib)
    _refuse(
        out,
        refusals,
        "max_commit_retries",
        "rivc retries a conflicting commit itself, after checking the batch id did not land",
    )
    _lakehouse(out, refusals)


def iceberg_sink(out: dict[str, Any], refusals: list[Refusal]) -> None:
    _rename(out, refusals, "commit_mode", "mode")
    catalog = out.get("catalog")
    if isinstance(catalog, dict):
        catalog = dict(catalog)
        kind = catalog.get("type")
        if kind == "memory":  # a catalog for local use: rivc's SQLite catalog is the one
            catalog["type"] = "sql"
        for block in ("rest", "glue", "sql", "hive", "memory"):
            nested = catalog.pop(block, None)
            if isinstance(nested, dict):
                for key, value in nested.items():
                    catalog.setdefault(key, value)
        out["catalog"] = catalog
    style = out.get("partitioning")
    if isinstance(style, str):
        out.pop("partitioning")
        fields = out.pop("partition_fields", [])
        if isinstance(fields, str):
            fields = [fields]
        if style == "none":
            pass
        elif style == "table_default":
            refusals.append(
                (
                    ("partitioning",),
                    "partitioning table_default: rivc creates "
                    "the table, so give its partition fields (docs/sinks.md)",
                )
            )
        elif style in ("identity", "bucket", "time"):
            transform = {"identity": "identity", "bucket": "bucket"}.get(
                style, str(out.pop("time_granularity", "day"))
            )
            extra = {"buckets": out.pop("num_buckets", None)} if style == "bucket" else {}
            out["partitioning"] = [{"field": f, "transform": transform, **extra} for f in fields]
        else:
            refusals.append(
                (
                    ("partitioning",),
                    f"partitioning {style!r}: expected none, "
                    "identity, bucket or time, or rivc's list of fields",
                )
            )
    _rename(out, refusals, "target_file_size_mb", "target_file_size", _mib)
    _lakehouse(out, refusals)


def files_sink(out: dict[str, Any], refusals: list[Refusal]) -> None:
    """Rivven's format blocks: csv's include_header and quote_char, the parquet block's codec
    and row group, the avro block's codec and names are rivc's keys; an Avro file has no
    Confluent wire format (a message's payload has: docs/streaming.md)."""
    for block, renames in (
        ("csv", {"include_header": "header", "quote_char": "quote"}),
        ("parquet", {"compression": "compression", "row_group_size": "row_group_size"}),
        ("avro", {"compression": "compression", "namespace": "avro_namespace",
                  "record_name": "avro_record_name"}),
    ):  # fmt: skip
        inner = out.get(block)
        if not isinstance(inner, dict):
            continue
        inner = dict(inner)
        for old, new in renames.items():
            if old not in inner:
                continue
            value = inner.pop(old)
            target = inner if block == "csv" else out
            if new in target:
                refusals.append(
                    ((block, old), f"{block}.{old} is rivc's {new}, given too: keep one")
                )
            else:
                target[new] = value
        if block == "avro":
            for key in ("wire_format", "schema_id", "schema"):
                if key in inner:
                    inner.pop(key)
                    refusals.append(
                        ((block, key), f"avro.{key}: an Avro file's schema is its columns'; "
                         "Confluent's wire format is a message payload's (docs/streaming.md)")
                    )  # fmt: skip
            for key in list(inner):
                refusals.append(((block, key), f"unknown key 'avro.{key}'"))
            out.pop(block)
        else:
            out[block] = inner


def kafka_source(out: dict[str, Any], refusals: list[Refusal]) -> None:
    """Rivven's kafka-source: start_offset, and its security block's lower-case protocol and
    SCRAM_SHA_256-style mechanism."""
    _rename(out, refusals, "start_offset", "starting_offsets")
    sec = out.get("security")
    if isinstance(sec, dict):
        sec = dict(sec)
        if "mechanism" in sec and "sasl_mechanism" not in sec:
            sec["sasl_mechanism"] = sec.pop("mechanism")
        for key in ("protocol", "sasl_mechanism"):
            if isinstance(sec.get(key), str):
                sec[key] = sec[key].upper()
        if isinstance(sec.get("sasl_mechanism"), str):
            sec["sasl_mechanism"] = sec["sasl_mechanism"].replace("_", "-")
        out["security"] = sec


def sqs_sink(out: dict[str, Any], refusals: list[Refusal]) -> None:
    """Rivven's sqs-sink: its keys are rivc's; batching by time is a run's, and its metadata
    attributes are always sent (rivc_id)."""
    _refuse(out, refusals, "batch_timeout_ms", BATCHING)
    _flag(out, refusals, "include_metadata", True, "rivc sends each row's id as rivc_id always")


def clickhouse_sink(out: dict[str, Any], refusals: list[Refusal]) -> None:
    """Rivven's clickhouse sink: its connection, table and retry keys are rivc's; batching by
    time is a run's, and a row that cannot be written stops the batch."""
    _refuse(out, refusals, "flush_interval_secs", BATCHING)
    if out.get("compression") == "lz4":
        out.pop("compression")
        refusals.append(
            (
                ("compression",),
                "compression: lz4 is ClickHouse's native framing; over HTTP rivc sends gzip "
                "(compression: gzip, the default) or none",
            )
        )
    _flag(out, refusals, "validation", True, "rivc checks every column against the table always")
    _flag(
        out,
        refusals,
        "skip_invalid_rows",
        False,
        "a value the table cannot hold exactly stops the batch, named; fix it in the model",
    )
    _refuse(
        out,
        refusals,
        "circuit_breaker",
        "a run stops at the sink's first failure after max_retries; the next run begins the "
        "batch again",
    )


def webhook_sink(out: dict[str, Any], refusals: list[Refusal]) -> None:
    _rename(out, refusals, "timeout_secs", "timeout_s")
    retry = out.pop("retry", None)
    if isinstance(retry, dict):
        for key, value in retry.items():
            if key in ("max_attempts", "initial_backoff_ms", "max_backoff_ms"):
                out.setdefault(key, value)
            else:
                refusals.append(
                    (
                        ("retry", key),
                        f"unknown key 'retry.{key}' (known: max_attempts, initial_backoff_ms, "
                        "max_backoff_ms)",
                    )
                )


def mqtt_source(out: dict[str, Any], refusals: list[Refusal]) -> None:
    _rename(out, refusals, "broker_url", "url")
    _rename(out, refusals, "keep_alive_secs", "keepalive_s")
    _rename(out, refusals, "include_metadata", "metadata_columns")
    if isinstance(out.get("qos"), str):
        name = out["qos"]
        if name in QOS:
            out["qos"] = QOS[name]
        else:
            out.pop("qos")
            refusals.append((("qos",), f"qos {name!r}: expected 0, 1, 2 or " + ", ".join(QOS)))
    auth = out.pop("auth", None)
    if isinstance(auth, dict):
        for key, value in auth.items():
            if key in ("username", "password"):
                out.setdefault(key, value)
            else:
                refusals.append(
                    (("auth", key), f"unknown key 'auth.{key}' (known: username, password)")
                )
    _flag(
        out,
        refusals,
        "parse_json_payload",
        True,
        "rivc parses each payload as JSON by default; for another format set "
        "payload: {format: text} (or raw, avro, protobuf: docs/streaming.md)",
    )
    _rename(out, refusals, "connect_timeout_secs", "connect_timeout_s")
    will = out.get("last_will")
    if isinstance(will, dict) and isinstance(will.get("qos"), str):
        name = will["qos"]
        if name in QOS:
            out["last_will"] = {**will, "qos": QOS[name]}
        else:
            out["last_will"] = {k: v for k, v in will.items() if k != "qos"}
            refusals.append(
                (("last_will", "qos"), f"qos {name!r}: expected 0, 1, 2 or " + ", ".join(QOS))
            )


def _mib(value: Any) -> Any:
    return value * MIB if isinstance(value, int) and not isinstance(value, bool) else value
