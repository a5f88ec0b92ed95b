"""The postgres sink: a PostgreSQL table, exactly once per batch.

A batch is copied (COPY ... FROM STDIN, CSV encoded by Arrow's C++ writer) into an unlogged
staging table beside the target: by Spark's tasks, each replacing its own partition's rows, or
from rivc's process for files it delivers as they are. Then one transaction applies the staged
rows to the table (append, upsert by key with unwrap_cdc's deletes, overwrite) and records the
batch id and the batch's places in `_rivc_commits` beside it; the staging table is dropped
after. A run killed before that transaction leaves the table as it was; one killed after finds
the batch in `_rivc_commits` and skips it.

Values travel as PostgreSQL's text input: numbers, decimals and text exactly, timestamps in UTC
with a zone (`timestamp` columns ignore it), bytes as `\\x` hex, arrays of scalars as array
literals, other nested values as JSON. A value the column cannot take is refused by
PostgreSQL, and the refusal names the table, the column and the value.
"""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector_specs import PostgresSinkConfig
from rivc.compiler.dbtypes import decimal_args
from rivc.compiler.errors import ConnectorError
from rivc.compiler.sql import quote
from rivc.compiler.transforms import DELETE_COLUMN

from ..plane.base import Sink, WriteResult, arrow_columns, stream
from ..util.faults import fault
from .relational import Conn

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

COMMITS = "_rivc_commits"  # beside each target: (target, id) -> version, writer
WRITER = "rivc.writer"  # the id under which a target's writer is recorded
PART = "_rivc_part"  # in a staging table: the Spark partition that copied the row

# Spark SQL type -> PostgreSQL type of a created table or added column
_SCALARS = {
    "boolean": "boolean",
    "tinyint": "smallint",
    "smallint": "smallint",
    "int": "integer",
    "bigint": "bigint",
    "float": "real",
    "double": "double precision",
    "string": "text",
    "binary": "bytea",
    "date": "date",
    "timestamp": "timestamp with time zone",
    "timestamp_ntz": "timestamp without time zone",
}


def pg_type(spark_type: str) -> str:
    """The PostgreSQL type rivc creates for a Spark column: the source mapping's inverse
    (docs/types.md); an array of scalars becomes an array, other nested values jsonb."""
    t = spark_type.strip().lower()
    if t in _SCALARS:
        return _SCALARS[t]
    if t.startswith("decimal("):
        p, s = decimal_args(t)
        return f"numeric({p},{s})"
    if t.startswith("array<") and t[6:-1] in _SCALARS and t[6:-1] != "binary":
        return _SCALARS[t[6:-1]] + "[]"
    return "jsonb"


def q(name: str) -> str:
    return quote(name, "postgres")


class PostgresSink(Sink):
    config: PostgresSinkConfig

    # ------------------------------------------------------------------ names

    @property
    def schema(self) -> str:
        return self.config.qualified()[0]

    @property
    def target(self) -> str:
        schema, table = self.config.qualified()
        return f"{q(schema)}.{q(table)}"

    @property
    def commits(self) -> str:
        return f"{q(self.schema)}.{COMMITS}"

    @property
    def stage(self) -> str:
        """This sink's staging table: one per sink and table, dropped after each batch."""
        digest = hashlib.sha1(f"{self.ctx.app_id}\0{self.config.table}".encode()).hexdigest()
        return f"{q(self.schema)}.{q('_rivc_stage_' + digest[:16])}"

    def params(self) -> dict[str, Any]:
        spec = self.ctx.connections.get(self.config.connection)
        if spec is None:
            raise ConnectorError(
                f"sink {self.ctx.sink}: connection {self.config.connection!r} is not in the profile"
            )
        return Conn.resolve(spec, os.environ).psycopg_params(writable=True)

    def connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(autocommit=True, **self.params())
        except psycopg.Error as exc:
            raise self.refused("cannot connect", exc) from exc

    def refused(self, what: str, exc: Exception) -> ConnectorError:
        """A PostgreSQL error as one line naming the sink and table (never the staging table)."""
        text = one_line(exc).replace(self.stage.split(".", 1)[1].strip('"'), self.config.table)
        return ConnectorError(f"sink {self.ctx.sink}: {self.config.table}: {what}: {text}")

    # ------------------------------------------------------------------ what it holds

    def _versions(self, ids: Sequence[str]) -> dict[str, tuple[int | None, str | None]]:
        conn = self.connect()
        try:
            found = conn.execute("SELECT to_regclass(%s)", (self.commits,)).fetchone()[0]
            if found is None:
                return {}
            rows = conn.execute(
                f"SELECT id, version, writer FROM {self.commits} WHERE target = %s AND id = ANY(%s)",
                (self.config.table, list(ids)),
            ).fetchall()
            return {r[0]: (r[1], r[2]) for r in rows}
        finally:
            conn.close()

    def last_batch_id(self) -> int | None:
        return self._versions([self.ctx.app_id]).get(self.ctx.app_id, (None, None))[0]

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        held = self._versions([self.ctx.place_id(i) for i in inputs])
        return {i: held.get(self.ctx.place_id(i), (None, None))[0] for i in inputs}

    def writer(self) -> str | None:
        return self._versions([WRITER]).get(WRITER, (None, None))[1]

    def record_places(self, batch_id: int) -> None:
        conn = self.connect()
        try:
            with conn.transaction():
                self._record(conn, batch_id)
        finally:
            conn.close()

    # ------------------------------------------------------------------ writes

    def write_spark(self, df: Any, batch_id: int) -> WriteResult:
        """Spark's tasks copy the batch into the staging table; rivc applies it."""
        columns = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        kinds = self._prepare(columns)
        copy = _copy_task(self.params(), self.stage, list(columns), kinds)
        try:
            counted = df.mapInArrow(copy, "rows long, bytes long").groupBy().sum().first()
        except Exception as exc:  # a task's refusal, inside Spark's error
            found = re.search(re.escape(REFUSED) + r"[^\n]*", str(exc))
            if found is None:
                raise
            text = found.group(0).replace(self.stage.split(".", 1)[1].strip('"'), self.config.table)
            raise ConnectorError(f"sink {self.ctx.sink}: {self.config.table}: {text}") from None
        rows, size = (int(counted[0] or 0), int(counted[1] or 0)) if counted else (0, 0)
        return self._apply(batch_id, list(columns), rows, size)

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        """Files delivered as they are: copied from rivc's process."""
        import pyarrow as pa

        columns = arrow_columns(data.schema)
        for f in data.schema:  # an array of scalars stays one (a PostgreSQL array's landing)
            if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
                item = arrow_columns(pa.schema([pa.field("item", f.type.value_type)]))["item"]
                columns[f.name] = f"array<{item}>"
        kinds = self._prepare(columns)
        rows, size = copy_in(self.params(), self.stage, list(columns), kinds, stream(data), 0)
        return self._apply(batch_id, list(columns), rows, size)

    def _prepare(self, columns: dict[str, str]) -> dict[str, str]:
        """Create or evolve the table as the config allows, claim it, and make an empty
        staging table of the batch's columns. Returns how each column is encoded."""
        data = [c for c in columns if c != DELETE_COLUMN]
        if not data:
            raise ConnectorError(f"sink {self.ctx.sink}: the batch has no columns")
        conn = self.connect()
        try:
            held = self._columns(conn)
            if not held:
                if not self.config.auto_create_table:
                    raise ConnectorError(
                        f"sink {self.ctx.sink}: table {self.config.table} does not exist and "
                        "auto_create_table is false: create it first (or let rivc create it)"
                    )
                self._create(conn, {c: columns[c] for c in data})
                held = self._columns(conn)
            missing = [c for c in data if c not in held]
            if missing and self.config.schema_evolution == "strict":
                raise ConnectorError(
                    f"sink {self.ctx.sink}: table {self.config.table} has no column "
                    f"{', '.join(missing)}; add it to the table, drop it in the model, or set "
                    "schema_evolution: add_columns"
                )
            for c in missing:
                conn.execute(f"ALTER TABLE {self.target} ADD COLUMN {q(c)} {pg_type(columns[c])}")
            held = self._columns(conn) if missing else held
            self._claim(conn)
            keys = ", ".join(q(c) for c in data)
            flag = f", ADD COLUMN {q(DELETE_COLUMN)} boolean" if DELETE_COLUMN in columns else ""
            conn.execute(f"DROP TABLE IF EXISTS {self.stage}")
            conn.execute(
                f"CREATE UNLOGGED TABLE {self.stage} AS SELECT {keys} FROM {self.target} "
                "WITH NO DATA"
            )
            conn.execute(f"ALTER TABLE {self.stage} ADD COLUMN {PART} integer{flag}")
        except ConnectorError:
            raise
        except Exception as exc:  # psycopg's errors: named by table, one line
            raise self.refused("cannot prepare the batch", exc) from exc
        finally:
            conn.close()
        return {c: "array" if held.get(c, "").endswith("[]") else "text" for c in columns}

    def _columns(self, conn: Any) -> dict[str, str]:
        """The table's columns and their types; {} when it does not exist."""
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (self.target,),
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def _create(self, conn: Any, columns: dict[str, str]) -> None:
        body = [f"{q(c)} {pg_type(t)}" for c, t in columns.items()]
        if self.config.key_columns:
            body.append(f"PRIMARY KEY ({', '.join(q(k) for k in self.config.key_columns)})")
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q(self.schema)}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {self.target} ({', '.join(body)})")

    def _claim(self, conn: Any) -> None:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self.commits} (target text NOT NULL, id text NOT NULL, "
            "version bigint, writer text, committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (target, id))"
        )
        found = self.writer()
        if self.ctx.claim(found, f"table {self.config.table}"):
            conn.execute(
                f"INSERT INTO {self.commits} (target, id, writer) VALUES (%s, %s, %s) "
                "ON CONFLICT (target, id) DO NOTHING",
                (self.config.table, WRITER, self.ctx.writer),
            )

    def _apply(self, batch_id: int, columns: list[str], rows: int, size: int) -> WriteResult:
        """One transaction: the staged rows into the table, the batch id and places beside."""
        fault("before-commit", self.config.qualified()[1])  # staged; the table untouched
        data = ", ".join(q(c) for c in columns if c != DELETE_COLUMN)
        keep = f"WHERE NOT coalesce({q(DELETE_COLUMN)}, false)" if DELETE_COLUMN in columns else ""
        conn = self.connect()
        started = time.perf_counter()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.target,))
                held = self._held(conn)
                if held is not None and held >= batch_id:  # another writer of the same ids
                    return WriteResult()
                if self.config.mode == "upsert":
                    self._refuse_keys(conn)
                    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in self.config.key_columns)
                    conn.execute(f"ANALYZE {self.stage}")
                    conn.execute(f"DELETE FROM {self.target} t USING {self.stage} s WHERE {on}")
                elif self.config.mode == "overwrite":
                    conn.execute(f"DELETE FROM {self.target}")
                inserted = conn.execute(
                    f"INSERT INTO {self.target} ({data}) SELECT {data} FROM {self.stage} {keep}"
                ).rowcount
                self._record(conn, batch_id)
            conn.execute(f"DROP TABLE IF EXISTS {self.stage}")
        except ConnectorError:
            raise
        except Exception as exc:
            raise self.refused(f"batch {batch_id} was not applied", exc) from exc
        finally:
            conn.close()
        elapsed = time.perf_counter() - started
        return WriteResult(rows=max(inserted, 0), bytes=size, commits=1, commit_s=elapsed)

    def _held(self, conn: Any) -> int | None:
        row = conn.execute(
            f"SELECT version FROM {self.commits} WHERE target = %s AND id = %s",
            (self.config.table, self.ctx.app_id),
        ).fetchone()
        return None if row is None else row[0]

    def _refuse_keys(self, conn: Any) -> None:
        keys = self.config.key_columns
        names = ", ".join(q(k) for k in keys)
        null = conn.execute(
            f"SELECT 1 FROM {self.stage} WHERE {' OR '.join(f'{q(k)} IS NULL' for k in keys)} "
            "LIMIT 1"
        ).fetchone()
        if null is not None:
            raise ConnectorError(
                f"sink {self.ctx.sink}: an upsert batch has a row without a key "
                f"({', '.join(keys)} null); a row without a key cannot replace one"
            )
        twice = conn.execute(
            f"SELECT {names} FROM {self.stage} GROUP BY {names} HAVING count(*) > 1 LIMIT 1"
        ).fetchone()
        if twice is not None:
            key = ", ".join(f"{k}={v!r}" for k, v in zip(keys, twice, strict=True))
            raise ConnectorError(
                f"sink {self.ctx.sink}: an upsert batch holds key {key} more than once; "
                "which row would win is undefined"
            )

    def _record(self, conn: Any, batch_id: int) -> None:
        versions = [(self.ctx.app_id, batch_id)]
        versions += [(self.ctx.place_id(k), v) for k, v in sorted(self.ctx.places.items())]
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.commits} (target, id, version) VALUES (%s, %s, %s) "
                "ON CONFLICT (target, id) DO UPDATE SET version = excluded.version, "
                "committed_at = now()",
                [(self.config.table, i, v) for i, v in versions],
            )


# --------------------------------------------------------------------------- copy


def _copy_task(
    params: dict[str, Any], stage: str, columns: list[str], kinds: dict[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function: a task copies its partition's rows and yields (rows, bytes)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        task = TaskContext.get()
        part = task.partitionId() if task is not None else 0
        rows, size = copy_in(params, stage, columns, kinds, batches, part)
        yield pa.RecordBatch.from_pydict({"rows": [rows], "bytes": [size]})

    return run


def copy_in(
    params: dict[str, Any],
    stage: str,
    columns: list[str],
    kinds: dict[str, str],
    batches: Iterable[pa.RecordBatch],
    part: int,
) -> tuple[int, int]:
    """Copy `batches` into the staging table as partition `part`, replacing what an earlier
    attempt of the same partition copied, in one transaction. Returns (rows, CSV bytes)."""
    import psycopg
    import pyarrow.csv as csv

    given = (b for b in batches if b.num_rows)
    first = next(given, None)
    if first is None:  # an empty partition never connects
        return 0, 0
    rows = size = 0
    options = csv.WriteOptions(include_header=False, quoting_style="needed")
    names = ", ".join(q(c) for c in columns)
    try:
        with psycopg.connect(**params) as conn:  # commits on leaving, rolls back on an error
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), %s)", (stage, part))
            conn.execute(f"DELETE FROM {stage} WHERE {PART} = %s", (part,))
            sql = f"COPY {stage} ({names}, {PART}) FROM STDIN (FORMAT csv)"
            with conn.cursor().copy(sql) as copy:
                for batch in itertools.chain((first,), given):
                    out = io.BytesIO()
                    csv.write_csv(encode(batch, kinds, part), out, options)
                    copy.write(out.getbuffer())
                    rows += batch.num_rows
                    size += out.tell()
    except psycopg.Error as exc:
        raise ConnectorError(f"{REFUSED} {one_line(exc)}") from exc
    return rows, size


REFUSED = "PostgreSQL refused a row:"


def one_line(exc: Exception) -> str:
    """A psycopg error's message and, where PostgreSQL gives one, its context (the COPY line
    and column)."""
    diag = getattr(exc, "diag", None)
    text = (getattr(diag, "message_primary", None) or str(exc)).strip().splitlines()[0]
    where = getattr(diag, "context", None)
    return text + (f" ({where.strip().splitlines()[0]})" if where else "")


# --------------------------------------------------------------------------- values


def encode(batch: pa.RecordBatch, kinds: dict[str, str], part: int) -> pa.Table:
    """The batch, each column as PostgreSQL's text input or a type Arrow's CSV writer writes
    as that text (numbers, decimals, text, dates, booleans, UTC timestamps with their `Z`),
    and the partition."""
    import pyarrow as pa

    out = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        t = column.type
        if pa.types.is_timestamp(t) and t.tz is not None:
            column = column.cast(pa.timestamp(t.unit, "UTC"))  # the same instants, written Z
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            out.append(_hex(column))
        elif pa.types.is_nested(t):
            values = column.to_pylist()
            if kinds.get(name) == "array":
                out.append(pa.array([_array_literal(v) for v in values], pa.string()))
            else:
                out.append(pa.array([_json_text(v, t) for v in values], pa.string()))
        else:  # Arrow's CSV writer casts it to text itself, as pc.cast would
            out.append(column)
    out.append(pa.array([part] * batch.num_rows, pa.int32()))
    return pa.Table.from_arrays(out, names=[*batch.schema.names, PART])


def _hex(column: pa.Array) -> pa.Array:
    """bytea's hex input (`\\x`, then two digits a byte), computed on the whole buffer."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.cast(pa.large_binary())
    n = len(column)
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset : column.offset + n + 1]
    raw = column.buffers()[2]
    data = np.frombuffer(raw, np.uint8) if raw is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]]
    spans = np.zeros(n + 1, np.int64)
    np.cumsum(2 * np.diff(offsets) + 2, out=spans[1:])
    text = np.empty(int(spans[-1]), np.uint8)
    prefix = spans[:-1]
    body = np.ones(len(text), bool)
    body[prefix] = body[prefix + 1] = False
    text[prefix], text[prefix + 1] = ord("\\"), ord("x")
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    pairs = np.empty(2 * len(data), np.uint8)
    pairs[0::2], pairs[1::2] = digits[data >> 4], digits[data & 15]
    text[body] = pairs
    strings = pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer(spans.tobytes()), pa.py_buffer(text.tobytes())]
    )
    return pc.if_else(column.is_valid(), strings, pa.scalar(None, pa.large_string()))


def _scalar(value: Any) -> str:
    """An array element as PostgreSQL's array input reads it."""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, int | Decimal):
        return str(value)
    text = value.isoformat(" ") if isinstance(value, datetime) else str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _array_literal(values: list[Any] | None) -> str | None:
    if values is None:
        return None
    return "{" + ",".join("NULL" if v is None else _scalar(v) for v in values) + "}"


def _json_text(value: Any, t: pa.DataType) -> str | None:
    return None if value is None else _json(value, t)


def _json(value: Any, t: pa.DataType) -> str:
    """Spark's to_json shapes, by the Arrow type: maps and structs as objects, decimals as
    numbers of their exact text, times as ISO text, bytes as base64, non-finite floats as
    strings (JSON has no such numbers)."""
    import pyarrow as pa

    if value is None:
        return "null"
    if pa.types.is_struct(t):
        fields = (t.field(i) for i in range(t.num_fields))
        return (
            "{"
            + ",".join(f"{json.dumps(f.name)}:{_json(value[f.name], f.type)}" for f in fields)
            + "}"
        )
    if pa.types.is_map(t):
        pairs = (f"{json.dumps(str(k))}:{_json(v, t.item_type)}" for k, v in value)
        return "{" + ",".join(pairs) + "}"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "[" + ",".join(_json(v, t.value_type) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'"{_float(value)}"'
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return json.dumps(value.isoformat())
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    return json.dumps(value)
