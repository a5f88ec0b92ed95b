"""The databases rivc reads and writes, as a run knows them: each is its compile dialect
(rivc.compiler.dialects) with its driver, connections and sessions, its JDBC reader's URL, how
it plans and describes a query. Sources, database sinks, change logs, `rivc check`, `rivc
doctor` and freshness ask the database (`database(kind)`); nothing else names one.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qs, quote, unquote, urlparse

from rivc.compiler.dbtypes import DbColumn
from rivc.compiler.dialects import Dialect, Mysql, Postgres
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import ConnectionSpec

from ...util.errortext import classify, root_cause

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
            port or DATABASES[spec.type].default_port,
            user,
            password,
            database,
            Tls(mode, tls["sslrootcert"], tls["sslcert"], tls["sslkey"]),
        )

    @property
    def engine(self) -> Database:
        """The database system it reaches: its driver, sessions, dialect (below)."""
        return database(self.kind)

    @property
    def jdbc_url(self) -> str:
        return self.engine.jdbc_url(self)

    def connect(self, writable: bool = False) -> Any:
        """A Python DB-API connection for control queries, in UTC and read-only (unless
        `writable`: a sink's)."""
        try:
            return self.engine.connect(self, writable)
        except driver_errors() as exc:
            raise ExtractError(classify(str(exc)), str(exc)) from exc


def driver_errors() -> tuple[type[BaseException], ...]:
    """What psycopg and pymysql raise (they share no base class), and socket errors."""
    import psycopg
    import pymysql

    return (psycopg.Error, pymysql.err.Error, OSError)


# --------------------------------------------------------------------------- errors


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


@contextmanager
def connection(conn_spec: Conn) -> Iterator[Any]:
    conn = conn_spec.connect()
    try:
        yield conn
    finally:
        conn.close()


# --------------------------------------------------------------------------- databases


class Database(Dialect, ABC):
    """A database as a run knows it."""

    jdbc_driver: ClassVar[str]  # the JDBC driver class Spark loads (Debian's jar)
    copy: ClassVar[bool] = False  # its rows can be read by rivc's COPY reader (pgcopy.py)

    @abstractmethod
    def connect(self, conn: Conn, writable: bool = False) -> Any:
        """A DB-API connection in autocommit mode, in UTC, read-only unless `writable`."""

    @abstractmethod
    def params(self, conn: Conn, writable: bool = False) -> dict[str, Any]:
        """The driver's connect() arguments (picklable: Spark's tasks connect with them): a
        session in UTC, read-only unless `writable` (a sink's, which also refuses what a
        column cannot hold)."""

    @abstractmethod
    def jdbc_url(self, conn: Conn) -> str:
        """The JDBC URL of Spark's reader, read-only where the driver can say so."""

    @abstractmethod
    def session_init(self, tuning: dict[str, int]) -> str:
        """Settings for every JDBC session Spark opens (the profile's timeouts included)."""

    @abstractmethod
    def explain(self, db: Any, sql: str) -> tuple[int, str]:
        """(row estimate, "index" or "full scan") from the database's plan of `sql`."""

    def prefer_indexes(self, db: Any) -> None:
        """Make this session plan with an index where one exists (a small table's plan shows
        it too): for `rivc check`'s question whether a column is indexed."""

    @abstractmethod
    def probe(self, db: Any, base: str) -> list[DbColumn]:
        """The columns of query `base` as the database describes them (a `LIMIT 0` query)."""

    @abstractmethod
    def tls_jdbc(self, tls: Tls) -> str:
        """The JDBC URL's TLS parameters."""


class PostgresDatabase(Postgres, Database):
    jdbc_driver = "org.postgresql.Driver"
    copy = True

    def connect(self, conn: Conn, writable: bool = False) -> Any:
        import psycopg

        return psycopg.connect(autocommit=True, **self.params(conn, writable))

    def params(self, conn: Conn, writable: bool = False) -> dict[str, Any]:
        settings = {k: v for k, v in PG_SETTINGS.items() if not writable or "read_only" not in k}
        return dict(
            host=conn.host,
            port=conn.port,
            user=conn.user,
            password=conn.password,
            dbname=conn.database,
            connect_timeout=10,
            options=" ".join(f"-c {k}={v}" for k, v in settings.items()),
            **conn.tls.psycopg(),
        )

    def jdbc_url(self, conn: Conn) -> str:
        # readOnlyMode=always: every transaction the driver begins is READ ONLY (a session
        # default set by sessionInitStatement would only apply to the next one)
        return (
            f"jdbc:postgresql://{conn.host}:{conn.port}/{conn.database or ''}"
            "?readOnly=true&readOnlyMode=always" + self.tls_jdbc(conn.tls)
        )

    def session_init(self, tuning: dict[str, int]) -> str:
        parts = [f"SET {k} = '{v}'" for k, v in PG_SETTINGS.items()]
        if tuning["statement_timeout_s"]:
            parts.append(f"SET statement_timeout = '{tuning['statement_timeout_s']}s'")
        if tuning["lock_timeout_s"]:
            parts.append(f"SET lock_timeout = '{tuning['lock_timeout_s']}s'")
        return "; ".join(parts)

    def explain(self, db: Any, sql: str) -> tuple[int, str]:
        with db.cursor() as cur:
            cur.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            raw = cur.fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        types: list[str] = []
        stack = [plan]
        while stack:
            node = stack.pop()
            types.append(node["Node Type"])
            stack += node.get("Plans", [])
        return int(plan["Plan Rows"]), "full scan" if "Seq Scan" in types else "index"

    def prefer_indexes(self, db: Any) -> None:
        with db.cursor() as cur:
            cur.execute("SET enable_seqscan = off")  # this connection only

    def probe(self, db: Any, base: str) -> list[DbColumn]:
        with db.cursor() as cur:
            cur.execute(f"SELECT * FROM ({base}) AS _rivc LIMIT 0")
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

    def tls_jdbc(self, tls: Tls) -> str:
        """pgjdbc's TLS parameters (client keys as PKCS-8)."""
        if tls.mode is None:
            return ""
        params = {"sslmode": tls.mode, "sslrootcert": tls.rootcert}
        params.update({"sslcert": tls.cert, "sslkey": tls.key})
        return _url_params(params)


class MysqlDatabase(Mysql, Database):
    jdbc_driver = "org.mariadb.jdbc.Driver"

    def connect(self, conn: Conn, writable: bool = False) -> Any:
        import pymysql

        return pymysql.connect(autocommit=True, **self.params(conn, writable))

    def params(self, conn: Conn, writable: bool = False) -> dict[str, Any]:
        """pymysql's: backslash escapes on; a sink's session strict."""
        return dict(
            host=conn.host,
            port=conn.port,
            user=conn.user or "",
            password=conn.password or "",
            database=conn.database,
            connect_timeout=10,
            charset="utf8mb4",
            init_command=MYSQL_STRICT if writable else MYSQL_INIT,
            **conn.tls.pymysql(),
        )

    def jdbc_url(self, conn: Conn) -> str:
        # jdbc:mariadb:// makes Spark quote columns wrongly; the MySQL scheme with
        # permitMysqlScheme keeps Spark's MySQL dialect and the MariaDB driver. tinyInt1isBit off:
        # a TINYINT(1) holding 2 stays 2.
        return (
            f"jdbc:mysql://{conn.host}:{conn.port}/{conn.database or ''}"
            "?permitMysqlScheme&tinyInt1isBit=false" + self.tls_jdbc(conn.tls)
        )

    def session_init(self, tuning: dict[str, int]) -> str:
        init = MYSQL_INIT
        if tuning["lock_timeout_s"]:
            init += f", innodb_lock_wait_timeout = {tuning['lock_timeout_s']}"
        return init

    def explain(self, db: Any, sql: str) -> tuple[int, str]:
        with db.cursor() as cur:
            cur.execute(f"EXPLAIN {sql}")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        estimate = max((int(r.get("rows") or 0) for r in rows), default=0)
        return estimate, "full scan" if any(r.get("type") == "ALL" for r in rows) else "index"

    def probe(self, db: Any, base: str) -> list[DbColumn]:
        from pymysql.constants import FLAG

        with db.cursor() as cur:
            cur.execute(f"SELECT * FROM ({base}) AS _rivc LIMIT 0")
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
                out.append(
                    DbColumn(f.name, t, precision, scale, unsigned, binary=f.charsetnr == 63)
                )
            return out

    def tls_jdbc(self, tls: Tls) -> str:
        """The MariaDB driver's TLS parameters (no client keys)."""
        if tls.mode in (None, "disable", "prefer"):
            return ""
        params = {"useSsl": "true"}
        if tls.mode == "require":
            params["trustServerCertificate"] = "true"
        else:
            params["serverSslCert"] = tls.rootcert or ""
            if tls.mode == "verify-ca":
                params["disableSslHostnameVerification"] = "true"
        return _url_params(params)


_MYSQL_TYPES: dict[int, str] = {}


def _mysql_type(code: int) -> str:
    if not _MYSQL_TYPES:
        from pymysql.constants import FIELD_TYPE

        _MYSQL_TYPES.update(
            {v: k.lower() for k, v in vars(FIELD_TYPE).items() if k.isupper() and k != "CHAR"}
        )
    return _MYSQL_TYPES.get(code, str(code))


def _url_params(params: Mapping[str, str | None]) -> str:
    return "".join(f"&{k}={quote(v, safe='/')}" for k, v in params.items() if v)


DATABASES: dict[str, Database] = {d.name: d for d in (PostgresDatabase(), MysqlDatabase())}


def database(kind: str) -> Database:
    """The database of a connection type compile accepted (a KeyError is a bug)."""
    return DATABASES[kind]
