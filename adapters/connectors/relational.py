"""PostgreSQL and MySQL/MariaDB sources: connections, queries and the JDBC reader.

Control queries (high-water marks, chunk bounds, EXPLAIN, connection checks, column probes) go
through the Python drivers (psycopg, pymysql). Rows go through PostgreSQL's COPY (pgcopy.py)
where it can carry every column, else through Spark's JDBC reader (read_query). Extraction
itself (modes, windows, staging, positions) is adapters/run/extract.py; `read` here is the plain read
of a source's whole query that previews, tests and unselected upstream sources use.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlparse

from rivc.compiler import dbtypes
from rivc.compiler.dbtypes import DbColumn, Delivery
from rivc.compiler.errors import ConnectorError
from rivc.compiler.specs import ConnectionSpec, SourceTable
from rivc.compiler.sql import literal
from rivc.compiler.sql import quote as quote_name

from ..plane.base import SourceContext
from ..util.errortext import CATEGORIES, classify, rivc_error_inside, root_cause

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DRIVERS = {"postgres": "org.postgresql.Driver", "mysql": "org.mariadb.jdbc.Driver"}
DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306}


# --------------------------------------------------------------------------- connections


@dataclass(frozen=True)
class Tls:
    """A connection's TLS settings (libpq's names), applied to psycopg, pymysql and JDBC."""

    mode: str | None = None  # disable | prefer | require | verify-ca | verify-full
    rootcert: str | None = None
    cert: str | None = None
    key: str | None = None

    def psycopg(self) -> dict[str, Any]:
        keys = {"sslmode": self.mode, "sslrootcert": self.rootcert}
        keys.update({"sslcert": self.cert, "sslkey": self.key})
        return {k: v for k, v in keys.items() if v}

    def pymysql(self) -> dict[str, Any]:
        if self.mode in (None, "disable", "prefer"):
            return {}
        ssl: dict[str, Any] = {"ca": self.rootcert} if self.rootcert else {}
        if self.cert:
            ssl.update(cert=self.cert, key=self.key)
        return {
            "ssl": ssl or {"check_hostname": False},
            "ssl_verify_cert": self.mode in ("verify-ca", "verify-full"),
            "ssl_verify_identity": self.mode == "verify-full",
        }

    def jdbc(self, kind: str) -> str:
        """URL parameters of pgjdbc or the MariaDB driver (client keys: pgjdbc only, as PKCS-8)."""
        if self.mode is None:
            return ""
        if kind == "postgres":
            params = {"sslmode": self.mode, "sslrootcert": self.rootcert}
            params.update({"sslcert": self.cert, "sslkey": self.key})
        elif self.mode in ("disable", "prefer"):
            return ""
        else:
            params = {"useSsl": "true"}
            if self.mode == "require":
                params["trustServerCertificate"] = "true"
            else:
                params["serverSslCert"] = self.rootcert
                if self.mode == "verify-ca":
                    params["disableSslHostnameVerification"] = "true"
        return "".join(f"&{k}={quote(v, safe='/')}" for k, v in params.items() if v)


@dataclass(frozen=True)
class Conn:
    """Resolved connection settings; `password` never reaches a message (see redact)."""

    kind: str  # postgres | mysql
    host: str
    port: int
    user: str | None
    password: str | None
    database: str | None
    tls: Tls = field(default_factory=lambda: Tls())

    @classmethod
    def resolve(cls, spec: ConnectionSpec, env: dict[str, str] | Any) -> Conn:
        host, port, user, password, database = (
            spec.host,
            spec.port,
            spec.user,
            spec.password,
            spec.database,
        )
        url = spec.url or (env.get(spec.url_env) if spec.url_env else None)
        if spec.url_env and not url:
            raise ConnectorError(f"connection url_env {spec.url_env} is not set")
        tls = {"sslmode": spec.sslmode, "sslrootcert": spec.sslrootcert}
        tls.update({"sslcert": spec.sslcert, "sslkey": spec.sslkey})
        if url:
            u = urlparse(url)
            for key, values in parse_qs(u.query).items():
                if key in tls:  # the profile's own field wins
                    tls[key] = tls[key] or values[-1]
            try:
                url_port = u.port
            except ValueError:  # the text after ':' is not a port; it may be a password
                raise ConnectorError(
                    "connection url is not valid: its port is not a number (percent-encode "
                    "reserved characters in the user and password, e.g. / as %2F)"
                ) from None
            host, port = u.hostname or host, url_port or port
            user = unquote(u.username) if u.username else user
            password = unquote(u.password) if u.password else password
            database = u.path.lstrip("/") or database
        if spec.password_env:
            if spec.password_env not in env:
                raise ConnectorError(f"connection password_env {spec.password_env} is not set")
            password = env[spec.password_env]
        mode = tls["sslmode"]
        if mode not in (None, "disable", "prefer", "require", "verify-ca", "verify-full"):
            raise ConnectorError(f"connection url: sslmode {mode!r} is not one rivc knows")
        return cls(
            spec.type,
            host,
            port or DEFAULT_PORTS[spec.type],
            user,
            password,
            database,
            Tls(mode, tls["sslrootcert"], tls["sslcert"], tls["sslkey"]),
        )

    @property
    def jdbc_url(self) -> str:
        db = self.database or ""
        if self.kind == "postgres":
            # readOnlyMode=always: every transaction the driver begins is READ ONLY (a session
            # default set by sessionInitStatement would only apply to the next one)
            return (
                f"jdbc:postgresql://{self.host}:{self.port}/{db}?readOnly=true&readOnlyMode=always"
                + self.tls.jdbc(self.kind)
            )
        # jdbc:mariadb:// makes Spark quote columns wrongly; the MySQL scheme with
        # permitMysqlScheme keeps Spark's MySQL dialect and the MariaDB driver. tinyInt1isBit off:
        # a TINYINT(1) holding 2 stays 2.
        return (
            f"jdbc:mysql://{self.host}:{self.port}/{db}?permitMysqlScheme&tinyInt1isBit=false"
            + self.tls.jdbc(self.kind)
        )

    def psycopg_params(self, writable: bool = False) -> dict[str, Any]:
        """psycopg.connect's arguments: a session in UTC, read-only unless `writable` (a sink)."""
        settings = {k: v for k, v in PG_SETTINGS.items() if not writable or "read_only" not in k}
        return dict(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.database,
            connect_timeout=10,
            options=" ".join(f"-c {k}={v}" for k, v in settings.items()),
            **self.tls.psycopg(),
        )

    def pymysql_params(self, strict: bool = False) -> dict[str, Any]:
        """pymysql.connect's arguments: a session in UTC with backslash escapes; `strict` (a
        sink) refuses what a column cannot hold."""
        return dict(
            host=self.host,
            port=self.port,
            user=self.user or "",
            password=self.password or "",
            database=self.database,
            connect_timeout=10,
            charset="utf8mb4",
            init_command=MYSQL_STRICT if strict else MYSQL_INIT,
            **self.tls.pymysql(),
        )

    def connect(self) -> Any:
        """A Python DB-API connection for control queries, in UTC and read-only."""
        try:
            if self.kind == "postgres":
                import psycopg

                return psycopg.connect(autocommit=True, **self.psycopg_params())
            import pymysql

            return pymysql.connect(autocommit=True, **self.pymysql_params())
        except driver_errors() as exc:
            raise ExtractError(classify(str(exc)), str(exc)) from exc


def driver_errors() -> tuple[type[BaseException], ...]:
    """What psycopg and pymysql raise (they share no base class), and socket errors."""
    import psycopg
    import pymysql

    return (psycopg.Error, pymysql.err.Error, OSError)


# Every session rivc opens reads in UTC, read-only, with the text forms docs/types.md gives:
# ISO dates, ISO 8601 intervals, shortest exact floats, and literals no server setting can misread.
PG_SETTINGS = {
    "TimeZone": "UTC",
    "default_transaction_read_only": "on",
    "DateStyle": "ISO,YMD",
    "IntervalStyle": "iso_8601",
    "extra_float_digits": "1",
    "standard_conforming_strings": "on",
}
# Backslash escapes on, whatever the server's sql_mode: literals escape backslashes (sqlglot).
MYSQL_MODE = "REPLACE(REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', ''), 'ANSI_QUOTES', '')"
MYSQL_INIT = f"SET time_zone = '+00:00', sql_mode = {MYSQL_MODE}"
# a sink's session: strict whatever the server's sql_mode, so a value a column cannot hold is
# an error, never clipped or zeroed with a warning
MYSQL_STRICT = f"SET time_zone = '+00:00', sql_mode = CONCAT({MYSQL_MODE}, ',STRICT_ALL_TABLES')"


def session_init(kind: str, tuning: dict[str, int]) -> str:
    """Per-session settings for every JDBC connection Spark opens."""
    if kind == "postgres":
        parts = [f"SET {k} = '{v}'" for k, v in PG_SETTINGS.items()]
        if tuning["statement_timeout_s"]:
            parts.append(f"SET statement_timeout = '{tuning['statement_timeout_s']}s'")
        if tuning["lock_timeout_s"]:
            parts.append(f"SET lock_timeout = '{tuning['lock_timeout_s']}s'")
        return "; ".join(parts)
    init = MYSQL_INIT
    if tuning["lock_timeout_s"]:
        init += f", innodb_lock_wait_timeout = {tuning['lock_timeout_s']}"
    return init


# --------------------------------------------------------------------------- errors


def retried(category: str) -> tuple[bool, float]:
    for name, retry, extra, _ in CATEGORIES:
        if name == category:
            return retry, extra
    return False, 0


class ExtractError(ConnectorError):
    def __init__(self, category: str, message: str, attempts: int = 1) -> None:
        super().__init__(f"{category} error: {(root_cause(message) or category)[:300]}")
        self.category, self.attempts = category, 1
        self.after(attempts)

    def after(self, attempts: int) -> ExtractError:
        """Say how many attempts were made (once, when retries are over)."""
        if attempts > 1 and self.attempts == 1:
            self.message += f" (after {attempts} attempts)"
            self.args = (self.message,)
        self.attempts = attempts
        return self


def with_retries(
    fn: Callable[[], Any],
    tuning: dict[str, int],
    errors: tuple[type[BaseException], ...],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Any, int]:
    """Run `fn`, retrying classified transient errors with exponential backoff.

    Each attempt runs a new Spark read, so it opens fresh connections. Returns (result, retries).
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn(), attempt - 1
        except errors as exc:
            message = str(exc)
            inner = rivc_error_inside(message)
            if inner:  # a value refused inside Spark: the user's to fix, never retried
                raise ConnectorError(inner) from None
            category = exc.category if isinstance(exc, ExtractError) else classify(message)
            retry, extra = retried(category)
            if not retry or attempt > tuning["max_retries"]:
                if isinstance(exc, ExtractError):
                    raise exc.after(attempt) from exc.__cause__
                raise ExtractError(category, message, attempt) from exc
            sleep(tuning["retry_backoff_ms"] / 1000 * 2 ** (attempt - 1) + extra)


# --------------------------------------------------------------------------- queries


def encode(value: Any) -> Any:
    """A cursor value for the state store (JSON), typed so it decodes to the same literal."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return {"timestamp": value.isoformat(sep=" ")}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "timestamp" in value:
            return datetime.fromisoformat(value["timestamp"])
        if "date" in value:
            return date.fromisoformat(value["date"])
        if "decimal" in value:
            return Decimal(value["decimal"])
        if "bytes" in value:
            return bytes.fromhex(value["bytes"])
    return value


@dataclass(frozen=True)
class Cursor:
    """Where an incremental table's extraction stands: the high-water mark, encoded (`encode`:
    typed JSON), and with a `unique_key` the keys of the rows at that value delivered already."""

    value: Any
    keys: tuple[tuple[Any, ...], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "keys": [list(k) for k in self.keys]}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Cursor | None:
        if data is None:
            return None
        return cls(data["value"], tuple(tuple(k) for k in data.get("keys", ())))


@dataclass(frozen=True)
class Window:
    """What one run of a source table reads, and the cursor state it leaves on commit."""

    predicate: str | None  # on the wrapped query; None: everything
    cursor: Cursor | None = None  # the position to commit with the window's rows
    chunks: list[tuple[int, str]] | None = None  # chunked: (chunk number, predicate)
    description: str = ""
    sparse: bool = False  # chunked: most windows are empty (fewer rows than 10% of the span)


def scalar(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row[0] if row else None


def plan_window(
    conn: Any,
    kind: str,
    base: str,
    table: SourceTable,
    stored: Cursor | None,
    now: datetime | None = None,
) -> Window:
    """The predicate of this run's extraction, from the mode and the stored cursor."""
    wrapped = f"({base}) AS _rivc"

    def lit(value: Any) -> str:  # a bound or stored value as a literal of the source's dialect
        return literal(value, kind)

    if table.mode == "incremental":
        col = quote_name(table.cursor_column or "", kind)
        hwm = scalar(conn, f"SELECT MAX({col}) FROM {wrapped}")
        if hwm is None:
            return Window("1 = 0", None, description="incremental: the table is empty")
        last = decode(stored.value) if stored else None
        keys = stored.keys if stored else ()
        if table.unique_key:
            # [last, hwm], minus the rows at `last` whose keys an earlier run delivered: rows that
            # share the boundary value are neither lost nor delivered twice.
            low = f"{col} >= {lit(last)} AND " if last is not None else ""
            seen = ""
            if last is not None and keys:
                names = [quote_name(k, kind) for k in table.unique_key]
                key = names[0] if len(names) == 1 else f"({', '.join(names)})"
                values = ", ".join(
                    lit(decode(k[0]))
                    if len(names) == 1
                    else "(" + ", ".join(lit(decode(v)) for v in k) + ")"
                    for k in keys
                )
                seen = f" AND NOT ({col} = {lit(last)} AND {key} IN ({values}))"
            return Window(
                f"{low}{col} <= {lit(hwm)}{seen}",
                # compared as stored: a time-zone-aware high-water mark never equals the naive
                # decoded one, and ties would be delivered again
                Cursor(encode(hwm), keys if stored and encode(hwm) == stored.value else ()),
                description=f"incremental {col} in [{last}, {hwm}]",
            )
        # No key to deduplicate by: [last, hwm) — every row of one cursor value is read in the
        # same run; the newest value waits for a newer one.
        if stored and encode(hwm) == stored.value:
            return Window("1 = 0", None, description=f"incremental: nothing below {hwm}")
        low = f"{col} >= {lit(last)} AND " if last is not None else ""
        return Window(
            f"{low}{col} < {lit(hwm)}",
            Cursor(encode(hwm)),
            description=f"incremental {col} in [{last}, {hwm})",
        )
    if table.mode == "time_window":
        col = quote_name(table.time_column or "", kind)
        cutoff = (now or datetime.now(UTC)).replace(tzinfo=None) - timedelta(
            days=table.days_window or 0
        )
        return Window(f"{col} >= {lit(cutoff)}", description=f"time window {col} >= {cutoff}")
    if table.mode == "chunked":
        col = quote_name(table.chunk_column or "", kind)
        with conn.cursor() as cur:
            cur.execute(f"SELECT MIN({col}), MAX({col}), COUNT(*) FROM {wrapped}")
            lo, hi, count = cur.fetchone()
        if lo is None:
            return Window("1 = 0", chunks=[], description="chunked: the table is empty")
        # Windows are aligned to multiples of chunk_size, so chunk k is the same range in every
        # run: a resumed run knows which windows an earlier one already delivered.
        size = table.chunk_size
        chunks = [
            (k, f"{col} >= {k * size} AND {col} < {(k + 1) * size}")
            for k in range(int(lo) // size, int(hi) // size + 1)
        ]
        span = int(hi) - int(lo) + 1
        note = f"chunked {col} [{lo}, {hi}] in {len(chunks)} chunks of {size}"
        sparse = bool(count) and count / span < 0.1
        if sparse:
            note += f"; sparse key range: {count} rows over a span of {span}"
        return Window(None, chunks=chunks, description=note, sparse=sparse)
    return Window(None, description="full")


# --------------------------------------------------------------------------- column types

_MYSQL_TYPES: dict[int, str] = {}


def _mysql_type(code: int) -> str:
    if not _MYSQL_TYPES:
        from pymysql.constants import FIELD_TYPE

        _MYSQL_TYPES.update(
            {v: k.lower() for k, v in vars(FIELD_TYPE).items() if k.isupper() and k != "CHAR"}
        )
    return _MYSQL_TYPES.get(code, str(code))


def probe(db: Any, kind: str, base: str) -> list[DbColumn]:
    """The columns of `base` as the database describes them (a `LIMIT 0` query)."""
    with db.cursor() as cur:
        cur.execute(f"SELECT * FROM ({base}) AS _rivc LIMIT 0")
        if kind == "postgres":
            out = []
            for col in cur.description:
                shown = col.type_display or ""
                array = shown.endswith("[]")
                name = shown.removesuffix("[]").split("(")[0].strip()
                # psycopg shows SQL names for a few types; the mapping uses catalog names
                name = {"character varying": "varchar", "character": "bpchar"}.get(name, name)
                precision = col.precision
                if name in ("bit", "varbit") and "(" in shown:
                    precision = int(shown.split("(")[1].split(")")[0])
                elif name == "bit":
                    precision = 1
                out.append(DbColumn(col.name, name, precision, col.scale, array=array))
            return out
        from pymysql.constants import FLAG

        out = []
        for f in cur._result.fields:  # pymysql's description drops flags and charsets
            t = _mysql_type(f.type_code)
            unsigned = bool(f.flags & FLAG.UNSIGNED)
            if f.flags & FLAG.SET:
                t = "set"
            elif f.flags & FLAG.ENUM:
                t = "enum"
            precision, scale = None, None
            if t in ("decimal", "newdecimal"):
                scale = f.scale
                precision = f.length - (1 if scale else 0) - (0 if unsigned else 1)
            elif t == "bit":
                precision = f.length
            out.append(DbColumn(f.name, t, precision, scale, unsigned, binary=f.charsetnr == 63))
        return out


def deliveries(
    kind: str, columns: list[DbColumn], declared: dict[str, str], label: str
) -> list[Delivery]:
    """How each column is read (docs/types.md); a declared type wins."""
    missing = [c for c in declared if c not in {col.name for col in columns}]
    if missing:
        raise ConnectorError(f"{label}: declared column {missing[0]} is not selected by the source")
    mapping = dbtypes.postgres if kind == "postgres" else dbtypes.mysql
    out = []
    for col in columns:
        try:
            out.append(mapping(col, declared.get(col.name)))
        except ValueError as exc:
            raise ConnectorError(f"{label}: {exc}") from exc
    return out


def select_list(kind: str, plan: list[Delivery]) -> str:
    """Each column's select expression, and beside it its check where it has one."""
    return ", ".join(
        f"{d.expr} AS {quote_name(d.name, kind)}"
        + (f", {d.check} AS {quote_name(dbtypes.check_name(d), kind)}" if d.check else "")
        for d in plan
    )


@contextmanager
def connection(conn_spec: Conn) -> Iterator[Any]:
    conn = conn_spec.connect()
    try:
        yield conn
    finally:
        conn.close()


def jdbc_reader(spark: SparkSession, conn: Conn, tuning: dict[str, int], parallel: int = 1) -> Any:
    reader = (
        spark.read.format("jdbc")
        .option("url", conn.jdbc_url)
        .option("driver", DRIVERS[conn.kind])
        .option("fetchsize", str(tuning["batch_size"]))  # never 0: that buffers everything
        .option("sessionInitStatement", session_init(conn.kind, tuning))
        .option("numPartitions", str(parallel))
    )
    if tuning["statement_timeout_s"]:
        reader = reader.option("queryTimeout", str(tuning["statement_timeout_s"]))
    if conn.user:
        reader = reader.option("user", conn.user)
    if conn.password:
        reader = reader.option("password", conn.password)
    return reader


def read(spark: SparkSession, ctx: SourceContext) -> DataFrame:
    """The registry's entry point: the whole query, read when used, with no state involved."""
    if ctx.connection is None or ctx.query is None:
        raise ConnectorError(f"source {ctx.name}: its connection is not in the profile")
    conn = Conn.resolve(ctx.connection, os.environ)
    label = f"source {ctx.name}"
    with connection(conn) as db:
        plan = deliveries(conn.kind, probe(db, conn.kind, ctx.query), ctx.columns, label)
    return read_query(spark, conn, ctx.tuning, ctx.query, [], plan, label)


def read_query(
    spark: SparkSession,
    conn: Conn,
    tuning: dict[str, int],
    base: str,
    predicates: list[str],
    plan: list[Delivery],
    label: str,
) -> DataFrame:
    """Rows of `base` under each predicate (one JDBC query each), delivered as `plan` says:
    text-carried columns are converted exactly or their values refused by name."""
    wrapped = f"({base}) AS _rivc"
    select = select_list(conn.kind, plan)
    parts = []
    for predicate in predicates or [""]:
        where = f" WHERE {predicate}" if predicate else ""
        parts.append(
            jdbc_reader(spark, conn, tuning)
            .option("dbtable", f"(SELECT {select} FROM {wrapped}{where}) AS _rivc_w")
            .load()
        )
    df = parts[0]
    for part in parts[1:]:
        df = df.unionAll(part)
    out: DataFrame = df.selectExpr(
        *(f"{dbtypes.spark_convert(label, d)} AS {quote_name(d.name)}" for d in plan)
    )
    return out
