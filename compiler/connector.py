"""The connector contract at compile time: a connector's registry entry (ConnectorInfo), the base of
every sink's spec (SinkConfig: merge keys, input columns, scd2 columns), a change log's envelope,
and the helpers entries share. Each connector's own spec and entries are in its package,
rivc.adapters.connectors.<name>.spec (compile-level: no Spark, no driver)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import model_validator

from rivc.compiler import dbtypes
from rivc.compiler.importers.aliases import Translator
from rivc.compiler.loading.specbase import Spec


def envelope(
    columns: Mapping[str, str], position: Mapping[str, str], transaction: Mapping[str, str]
) -> dict[str, str] | None:
    """A change log's landed columns (unwrap_cdc reads them): the kind of change (r: read by
    the snapshot, c, u, d), the row before and after, the log's own columns for where the
    change's commit is (`position`), an order of all changes (`sequence_by: seq`), the log's
    columns of its transaction, and its time. None (unknown until run) when no columns are
    declared."""
    if not columns:
        return None
    image = "struct<" + ",".join(f"{k}:{v}" for k, v in columns.items()) + ">"
    head = {"op": "string", "before": image, "after": image, **position}
    return {**head, "seq": "decimal(38,0)", **transaction, "commit_time": "timestamp"}


Compression = Literal["snappy", "gzip", "lz4", "zstd", "none"]


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B|B)?\s*$", re.I)


_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_size(value: int | str) -> int:
    """'128MB' -> 128000000; plain integers are bytes."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a size such as 128MB")
    return int(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]


def _valid_size(value: int | str) -> int | str:
    parse_size(value)
    return value


class Scd2Columns(Spec):
    """The columns in which a `mode: scd2` sink keeps each version's validity: from and to hold
    unwrap_cdc's `sequence_by` values (to is null for the current version)."""

    valid_from: str = "valid_from"
    valid_to: str = "valid_to"
    is_current: str = "is_current"

    @model_validator(mode="after")
    def _distinct(self) -> Scd2Columns:
        if len({self.valid_from, self.valid_to, self.is_current}) < 3:
            raise ValueError("valid_from, valid_to and is_current need three different names")
        return self


class SinkConfig(Spec):
    """What every sink's `config:` can say about itself, for compile and the run: override these
    in a connector's spec (docs/architecture.md, "A connector")."""

    def merge_by(self) -> tuple[str, ...]:
        """The keys the sink merges or upserts each batch by; () when it appends or overwrites."""
        return ()

    def history(self) -> Scd2Columns | None:
        """The validity columns when the sink keeps every version of a key (`mode: scd2`)."""
        return None

    def file_format(self) -> str | None:
        """The format of the files it stores values in (the types they can hold,
        dbtypes.unwritable); None when it does not write files."""
        return None

    def connection_name(self) -> str | None:
        """The profile connection it writes through (a database sink's); None: none."""
        return None

    def input_columns(self) -> dict[str, tuple[str, ...]]:
        """The config fields that name columns of the sink's input (checked at compile)."""
        out: dict[str, tuple[str, ...]] = {}
        for name in ("merge_keys", "partition_by", "key_fields", "key_columns", "time_column"):
            value = getattr(self, name, None)
            if value:
                out[name] = (value,) if isinstance(value, str) else tuple(value)
        return out


def merge_keys_of(config: Any) -> tuple[str, ...]:
    """The keys a sink merges or upserts by; () for a sink that only appends or overwrites."""
    return config.merge_by() if isinstance(config, SinkConfig) else ()


def history_of(config: Any) -> Scd2Columns | None:
    """The validity columns of a sink that keeps every version (`mode: scd2`), else None."""
    return config.history() if isinstance(config, SinkConfig) else None


def sink_mode(config: Any) -> str | None:
    """How a sink applies a batch: `append`, `overwrite` or `merge` (by key); None for sinks that
    only show or send rows (stdout, a connector without a mode)."""
    if merge_keys_of(config):
        return "merge"
    mode = getattr(config, "mode", None)
    return mode if mode in ("append", "overwrite") else None


RUNTIME = "rivc.adapters.connectors"  # where the built-in connectors' runtime halves live

Columns = Callable[[Any, Mapping[str, str]], "dict[str, str] | None"]


def declared(_config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
    """The table's declared columns; None (unknown until run) when none are declared."""
    return dict(columns) or None


def _with_metadata(extra: Mapping[str, str]) -> Columns:
    def columns(config: Any, columns: Mapping[str, str]) -> dict[str, str] | None:
        return {**columns, **(extra if config.metadata_columns else {})}

    return columns


def _nowhere(_config: Any) -> str | None:
    return None


def _named(config: Mapping[str, Any]) -> str | None:
    """A sink's dataset as lineage names it: its table or path, from the manifest's config."""
    return next((str(config[k]) for k in ("table_uri", "path", "table") if config.get(k)), None)


@dataclass(frozen=True, slots=True)
class ConnectorInfo:
    name: str
    kind: Literal["source", "sink"]
    category: str
    config: type[Spec]
    description: str
    runtime: str  # "module:attribute": a Sink class, or a source's read(spark, ctx) function
    relational: bool = False  # extracted through a profile connection (adapters/ingest/extract.py)
    # the database it reads or writes through a profile connection (compiler/dialects.py), whose
    # connection `type:` must be this
    database: str | None = None
    # "module:attribute": a change log (a ChangeLog class, adapters/ingest/changelog.py) its
    # tables are read from, through a profile connection when `database` is set; its `config:`
    # is the source's, its tables name a table of the log each
    log: str | None = None
    columns: Columns = declared  # a source table's columns, known at compile time
    location: Callable[[Any], str | None] = _nowhere  # a sink's path or URI (doctor, preflight)
    # a sink's dataset name in OpenLineage events, from its config as the manifest holds it
    dataset: Callable[[Mapping[str, Any]], str | None] = _named
    # what a sink stores values in, for the check of the types it can hold (dbtypes.unwritable):
    # "table" (Delta, Iceberg), "files" (of its config's `format`), None (no typed store)
    holds: Literal["table", "files"] | None = None
    # a type check of its own target's, beside `holds`: (Spark type) -> why it cannot hold it
    # exactly, with the fix, or None
    cannot_hold: Callable[[str], str | None] | None = None
    # the config names users bring from the systems rivc replaces: renamed, or refused with a
    # pointer (compiler/importers/aliases.py)
    aliases: Translator | None = None
    # "module:attribute": doctor's reach check, (config, root, storage) -> (ok, detail)
    probe: str | None = None
    # "module:attribute": a stream source's messages waiting for its sink, read from the broker
    # for the scrape endpoint, (config, project, "source.table") -> count or None
    lag: str | None = None
    # "module:attribute": `rivc source freshness` of a source table without Spark, (config,
    # root, storage, column) -> the column's newest value (None: the table is empty)
    newest: str | None = None
    # "module:attribute": `rivc check` of a change-log table, (conn, tables of its source,
    # table) -> what stops it from running, each named (empty: ready)
    preflight: str | None = None
    # a stream whose place is held on the broker for one consumer (an MQTT session and spool, a
    # NATS durable consumer): one sink reads it
    single_consumer: bool = False

    def unwritable(self, fmt: str | None, spark_type: str) -> str | None:
        """Why this sink cannot hold a column of `spark_type` exactly (its files of `fmt`), with
        the fix; None when it can. Compile asks for the types it knows, the run for the rest."""
        why = dbtypes.unwritable(self.holds, fmt, spark_type)
        if why is None and self.cannot_hold is not None:
            why = self.cannot_hold(spark_type)
        return why

    def key_columns(self, config: Any) -> dict[str, tuple[str, ...]]:
        """Config fields that name input columns, for compile-time checks (a sink's spec says
        which: SinkConfig.input_columns)."""
        return config.input_columns() if isinstance(config, SinkConfig) else {}
