"""The mysql sink's dialect (database/sink.py holds what every database sink does): a batch is loaded
into a staging table with multi-row INSERTs whose literals Arrow computes column by column
(no value goes through Python one at a time, nested ones aside), in a strict session.

Values: numbers and booleans as literals, decimals, dates, times and text as quoted strings
(MySQL converts a string to DECIMAL exactly; an unquoted `1E-18` would be a DOUBLE), bytes as
`X'..'`, nested values as JSON text, timestamps as their UTC time. NaN and ±Infinity, which
MySQL's FLOAT and DOUBLE cannot store, are refused by column; so is any value the column cannot
hold (the strict session makes it an error, never a warning).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rivc.compiler.dbtypes import decimal_args
from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ..database.engine import Conn, database
from ..database.sink import PART, REFUSED, DatabaseSink, load_partition
from ..database.values import hex_text, json_text

if TYPE_CHECKING:
    import pyarrow as pa

STATEMENT_BYTES = 4_000_000  # an INSERT's size: well under max_allowed_packet's 16 MB default
MAX_SCALE = 30  # MySQL's DECIMAL holds at most 30 digits after the point

_SCALARS = {
    "boolean": "boolean",
    "tinyint": "tinyint",
    "smallint": "smallint",
    "int": "int",
    "bigint": "bigint",
    "float": "float",
    "double": "double",
    "date": "date",
    "timestamp": "datetime(6)",
    "timestamp_ntz": "datetime(6)",
}


def mysql_type(spark_type: str, key: bool) -> str:
    """The MySQL type rivc creates for a Spark column (docs/types.md): text and bytes of a key
    are varchar(255) and varbinary(255) (an index needs a length), nested values JSON."""
    t = spark_type.strip().lower()
    if t in _SCALARS:
        return _SCALARS[t]
    if t == "string":
        return "varchar(255)" if key else "longtext"
    if t == "binary":
        return "varbinary(255)" if key else "longblob"
    if t.startswith("decimal("):
        p, s = decimal_args(t)
        if s > MAX_SCALE:
            raise ConnectorError(
                f"decimal({p},{s}) has more digits after the point than MySQL's DECIMAL holds "
                f"({MAX_SCALE}); round it in the model"
            )
        return f"decimal({p},{s})"
    return "json"


def q(name: str) -> str:
    return database("mysql").quote(name)


def insert_rows(
    params: dict[str, Any],
    stage: str,
    columns: list[str],
    kinds: dict[str, str],
    batches: Iterable[pa.RecordBatch],
    part: int,
) -> tuple[int, int]:
    """INSERT `batches` into the staging table as partition `part`, replacing what an earlier
    attempt of the same partition loaded, in one transaction. Returns (rows, statement bytes)."""
    import pymysql

    head = f"INSERT INTO {stage} ({', '.join(q(c) for c in columns)}, {PART}) VALUES "

    @contextmanager
    def transaction() -> Iterator[Any]:
        conn = pymysql.connect(autocommit=False, **params)
        try:
            with conn.cursor() as cur:
                # no gap locks: tasks loading other partitions never wait on this one
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                yield cur
            conn.commit()
        finally:
            conn.close()

    def write(cur: Any, given: Iterator[pa.RecordBatch]) -> tuple[int, int]:
        rows = size = 0
        for batch in given:
            for values in statements(batch, part):
                cur.execute(head + values)  # no parameters: nothing is %-formatted
                size += len(head) + len(values)
            rows += batch.num_rows
        return rows, size

    lock = ("SELECT GET_LOCK(%s, 600)", (f"{stage}:{part}"[-64:],))
    return load_partition(transaction, lock, stage, part, batches, write, pymysql.Error)


def statements(batch: pa.RecordBatch, part: int) -> Iterator[str]:
    """The VALUES lists of `batch`'s rows (and the partition), each under STATEMENT_BYTES."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pa.large_string()
    literals = [literal(n, c) for n, c in zip(batch.schema.names, batch.columns, strict=True)]
    comma, empty = pa.scalar(",", text), pa.scalar("", text)
    joined = pc.binary_join_element_wise(*literals, pa.scalar(str(part), text), comma)
    joined = pc.binary_join_element_wise(pa.scalar("(", text), joined, pa.scalar(")", text), empty)
    lengths = pc.binary_length(joined).to_numpy()
    start, total = 0, 0
    for i, n in enumerate(lengths):
        if total and total + n + 1 > STATEMENT_BYTES:
            yield ",".join(joined.slice(start, i - start).to_pylist())
            start, total = i, 0
        total += int(n) + 1
    yield ",".join(joined.slice(start).to_pylist())


def literal(name: str, column: pa.Array) -> pa.Array:
    """A column as SQL literals (large strings), NULL for null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_floating(t):
        bad = pc.or_(pc.is_nan(column), pc.is_inf(column))
        if pc.any(bad).as_py():
            raise ConnectorError(
                f"{REFUSED} column {name} holds NaN or Infinity, which MySQL's FLOAT and "
                "DOUBLE cannot store; turn them into NULL (or a number) in the model"
            )
        # a float's shortest text can round past FLOAT's range (3.4028235e+38); the double
        # it widens to is the same value exactly, and MySQL narrows it back to that float
        text = pc.cast(pc.cast(column, pa.float64()), pa.large_string())
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        text = pc.cast(column, pa.large_string())
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        text = hex_text(column, "X'", "'")
    else:
        if pa.types.is_timestamp(t):
            column = column.cast(pa.timestamp(t.unit))  # the UTC time, without a zone
        value = json_text(column) if pa.types.is_nested(t) else pc.cast(column, pa.large_string())
        text = pc.cast(value, pa.large_string())
        for raw, escaped in (("\\", "\\\\"), ("'", "\\'"), ("\x00", "\\0")):
            text = pc.replace_substring(text, raw, escaped)
        quote_ = pa.scalar("'", pa.large_string())
        text = pc.binary_join_element_wise(quote_, text, quote_, pa.scalar("", pa.large_string()))
    return pc.fill_null(pc.cast(text, pa.large_string()), pa.scalar("NULL", pa.large_string()))


class MysqlSink(DatabaseSink):
    database = "MySQL"
    loader = staticmethod(insert_rows)

    def q(self, name: str) -> str:
        return q(name)

    def params(self, conn: Conn) -> dict[str, Any]:
        return database("mysql").params(conn, writable=True)

    def open(self) -> Any:
        import pymysql

        return pymysql.connect(autocommit=True, **self.conn_params())

    @contextmanager
    def transaction(self, conn: Any) -> Iterator[Any]:
        conn.begin()
        try:
            yield conn
        except BaseException:
            conn.rollback()
            raise
        conn.commit()

    def schema(self) -> str | None:
        return self.config.qualified()[0]

    def _where(self, name: str) -> tuple[str, tuple[Any, ...]]:
        return "table_schema = COALESCE(%s, DATABASE()) AND table_name = %s", (self.schema(), name)

    def columns(self, conn: Any) -> dict[str, str]:
        where, params = self._where(self.config.qualified()[1])
        rows = self.run(
            conn,
            f"SELECT column_name, column_type FROM information_schema.columns WHERE {where} "
            "ORDER BY ordinal_position",
            params,
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def column_type(self, spark_type: str, key: bool) -> str:
        return mysql_type(spark_type, key)

    def create_schema(self, conn: Any) -> None:
        if self.schema():
            self.run(conn, f"CREATE DATABASE IF NOT EXISTS {q(self.schema() or '')}")

    def commits_table(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.commits} (target varchar(191) NOT NULL, "
            "id varchar(500) NOT NULL, version bigint, writer varchar(255), "
            "committed_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
            "PRIMARY KEY (target, id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        )

    def exists(self, conn: Any, name: str) -> bool:
        where, params = self._where(name)
        found = self.run(conn, f"SELECT 1 FROM information_schema.tables WHERE {where}", params)
        return found.fetchone() is not None

    def create_stage(self, conn: Any, data: list[str], flagged: bool) -> None:
        """Of the table's column types, every one nullable (a delete carries only its key)."""
        where, params = self._where(self.config.qualified()[1])
        found = self.run(
            conn,
            "SELECT column_name, column_type, collation_name FROM information_schema.columns "
            f"WHERE {where}",
            params,
        ).fetchall()
        held = {r[0]: r[1] + (f" COLLATE {r[2]}" if r[2] else "") for r in found}
        body = [f"{q(c)} {held[c]} NULL" for c in data]
        body.append(f"{PART} int, KEY ({PART})")
        if flagged:
            body.append(f"{q(DELETE_COLUMN)} boolean")
        self.run(conn, f"CREATE TABLE {self.stage} ({', '.join(body)}) ENGINE=InnoDB")

    def lock(self, conn: Any) -> None:
        self.run(conn, "SELECT GET_LOCK(%s, 600)", (self.target[-64:],))

    def table_options(self) -> str:
        return " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"  # text compares as Spark's does

    def delete_keys(self, on: str) -> str:
        return f"DELETE t FROM {self.target} t JOIN {self.stage} s ON {on}"

    def upsert_version(self) -> str:
        return (
            f"INSERT INTO {self.commits} (target, id, version) VALUES (%s, %s, %s) "
            "ON DUPLICATE KEY UPDATE version = VALUES(version), "
            "committed_at = CURRENT_TIMESTAMP(6)"
        )

    def insert_writer(self) -> str:
        return f"INSERT IGNORE INTO {self.commits} (target, id, writer) VALUES (%s, %s, %s)"
