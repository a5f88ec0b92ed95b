"""MySQL and MariaDB as a run knows them (their compile half: rivc.compiler.dialects.Mysql):
pymysql connections and sessions, the JDBC reader's URL, EXPLAIN, describing a query, TLS."""

from __future__ import annotations

from typing import Any

from rivc.compiler.dbtypes import DbColumn
from rivc.compiler.dialects import Mysql

from ..database.engine import Conn, Database, Tls, _url_params

# Backslash escapes on, whatever the server's sql_mode: literals escape backslashes (sqlglot).
MYSQL_MODE = "REPLACE(REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', ''), 'ANSI_QUOTES', '')"
MYSQL_INIT = f"SET time_zone = '+00:00', sql_mode = {MYSQL_MODE}"
# a sink's session: strict whatever the server's sql_mode, so a value a column cannot hold is
# an error, never clipped or zeroed with a warning
MYSQL_STRICT = f"SET time_zone = '+00:00', sql_mode = CONCAT({MYSQL_MODE}, ',STRICT_ALL_TABLES')"


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
