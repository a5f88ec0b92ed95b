"""The postgres sink's dialect (database/sink.py holds what every database sink does): a batch is
copied into an unlogged staging table with COPY ... FROM STDIN, CSV written by Arrow's C++
writer.

Values travel as PostgreSQL's text input: numbers, decimals and text exactly, timestamps in UTC
with a zone (`timestamp` columns ignore it), bytes as `\\x` hex, arrays of scalars as array
literals, other nested values as JSON. A value the column cannot take is refused by
PostgreSQL, and the refusal names the table, the column and the value.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rivc.compiler.dbtypes import decimal_args
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ..database.engine import Conn, database
from ..database.sink import PART, DatabaseSink, load_partition, partition_column
from ..database.values import float_text, hex_text, json_text

if TYPE_CHECKING:
    import pyarrow as pa

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
    return database("postgres").quote(name)


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

    options = csv.WriteOptions(include_header=False, quoting_style="needed")
    names = ", ".join(q(c) for c in columns)

    def write(conn: Any, given: Iterator[pa.RecordBatch]) -> tuple[int, int]:
        rows = size = 0
        sql = f"COPY {stage} ({names}, {PART}) FROM STDIN (FORMAT csv)"
        with conn.cursor().copy(sql) as copy:
            for batch in given:
                out = io.BytesIO()
                csv.write_csv(encode(batch, kinds, part), out, options)
                copy.write(out.getbuffer())
                rows += batch.num_rows
                size += out.tell()
        return rows, size

    # the connection commits on leaving, rolls back on an error
    lock = ("SELECT pg_advisory_xact_lock(hashtext(%s), %s)", (stage, part))
    return load_partition(
        lambda: psycopg.connect(**params), lock, stage, part, batches, write, psycopg.Error
    )


class PostgresSink(DatabaseSink):
    database = "PostgreSQL"
    loader = staticmethod(copy_in)

    def q(self, name: str) -> str:
        return q(name)

    def params(self, conn: Conn) -> dict[str, Any]:
        return database("postgres").params(conn, writable=True)

    def open(self) -> Any:
        import psycopg

        return psycopg.connect(autocommit=True, **self.conn_params())

    def transaction(self, conn: Any) -> AbstractContextManager[Any]:
        return conn.transaction()  # type: ignore[no-any-return]

    def schema(self) -> str | None:
        return self.config.qualified()[0] or "public"

    def columns(self, conn: Any) -> dict[str, str]:
        rows = self.run(
            conn,
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (self.target,),
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def column_type(self, spark_type: str, key: bool) -> str:
        return pg_type(spark_type)

    def create_schema(self, conn: Any) -> None:
        self.run(conn, f"CREATE SCHEMA IF NOT EXISTS {q(self.schema() or 'public')}")

    def commits_table(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.commits} (target text NOT NULL, id text NOT NULL, "
            "version bigint, writer text, committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (target, id))"
        )

    def exists(self, conn: Any, name: str) -> bool:
        return (
            self.run(conn, "SELECT to_regclass(%s)", (self.qualify(name),)).fetchone()[0]
            is not None
        )

    def create_stage(self, conn: Any, data: list[str], flagged: bool) -> None:
        names = ", ".join(q(c) for c in data)
        flag = f", ADD COLUMN {q(DELETE_COLUMN)} boolean" if flagged else ""
        self.run(
            conn,
            f"CREATE UNLOGGED TABLE {self.stage} AS SELECT {names} FROM {self.target} WITH NO DATA",
        )
        self.run(conn, f"ALTER TABLE {self.stage} ADD COLUMN {PART} integer{flag}")

    def analyze_stage(self, conn: Any) -> None:
        self.run(conn, f"ANALYZE {self.stage}")

    def lock(self, conn: Any) -> None:
        self.run(conn, "SELECT pg_advisory_xact_lock(hashtext(%s))", (self.target,))

    def delete_keys(self, on: str) -> str:
        return f"DELETE FROM {self.target} t USING {self.stage} s WHERE {on}"

    def upsert_version(self) -> str:
        return (
            f"INSERT INTO {self.commits} (target, id, version) VALUES (%s, %s, %s) "
            "ON CONFLICT (target, id) DO UPDATE SET version = excluded.version, "
            "committed_at = now()"
        )

    def insert_writer(self) -> str:
        return (
            f"INSERT INTO {self.commits} (target, id, writer) VALUES (%s, %s, %s) "
            "ON CONFLICT (target, id) DO NOTHING"
        )

    def is_array(self, column_type: str) -> bool:
        return column_type.endswith("[]")


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
            out.append(hex_text(column, "\\x"))
        elif pa.types.is_nested(t):
            if kinds.get(name) == "array":
                literals = [_array_literal(v) for v in column.to_pylist()]
                out.append(pa.array(literals, pa.string()))
            else:
                out.append(json_text(column))
        else:  # Arrow's CSV writer casts it to text itself, as pc.cast would
            out.append(column)
    out.append(partition_column(batch, part))
    return pa.Table.from_arrays(out, names=[*batch.schema.names, PART])


def _scalar(value: Any) -> str:
    """An array element as PostgreSQL's array input reads it."""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, int | Decimal):
        return str(value)
    text = value.isoformat(" ") if isinstance(value, datetime) else str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array_literal(values: list[Any] | None) -> str | None:
    if values is None:
        return None
    return "{" + ",".join("NULL" if v is None else _scalar(v) for v in values) + "}"
