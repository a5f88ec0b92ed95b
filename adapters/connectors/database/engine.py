"""The databases rivc reads and writes, as a run knows them: each is its compile dialect
(rivc.compiler.dialects) with its driver, connections and sessions, its JDBC reader's URL, how
it plans and describes a query. Sources, database sinks, change logs, `rivc check`, `rivc
doctor` and freshness ask the database (`database(kind)`); nothing else names one.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qs, quote, unquote, urlparse

from rivc.compiler.dbtypes import DbColumn
from rivc.compiler.dialects import Dialect, dialect
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import ConnectionSpec

from ...util.errortext import classify, root_cause

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
            port or dialect(spec.type).default_port,
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
    copy: ClassVar[bool] = False  # its rows can be read by rivc's COPY reader (postgres/copy.py)

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


def _url_params(params: Mapping[str, str | None]) -> str:
    return "".join(f"&{k}={quote(v, safe='/')}" for k, v in params.items() if v)


def database(kind: str) -> Database:
    """The database of a connection type compile accepted, as a run knows it: its dialect's
    runtime class (in its connector package), made once. A KeyError is a bug."""
    found = _DATABASES.get(kind)
    if found is None:
        module, _, name = dialect(kind).runtime.partition(":")
        found = _DATABASES[kind] = getattr(importlib.import_module(module), name)()
    return found


_DATABASES: dict[str, Database] = {}
