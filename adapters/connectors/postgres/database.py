"""PostgreSQL as a run knows it (its compile half: rivc.compiler.dialects.Postgres): psycopg
connections and sessions, the JDBC reader's URL, EXPLAIN, describing a query, TLS."""

from __future__ import annotations

import json
from typing import Any

from rivc.compiler.dbtypes import DbColumn
from rivc.compiler.dialects import Postgres

from ..database.engine import Conn, Database, Tls, _url_params

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
