"""A MySQL or MariaDB server's binary log as mysql-cdc sees it (docs/cdc.md): what the server
must have for full rows, where its log ends, and where a held position is on it: its file and
offset, or on MariaDB the GTIDs at them (a failover to a replica keeps the GTIDs, not the
files)."""

from __future__ import annotations

from typing import Any

from rivc.compiler.errors import ConnectorError


def check_server(db: Any, label: str) -> bool:
    """Refuse, by name, a server whose binlog cannot give every row whole. Whether it is
    MariaDB."""
    with db.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, VERSION()")
        log_bin, fmt, image, version = cur.fetchone()
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_row_metadata'")
        metadata = (cur.fetchone() or (None, None))[1]
    if not int(log_bin):
        raise ConnectorError(f"{label}: the server's binary log is off (set log_bin)")
    if str(fmt).upper() != "ROW":
        raise ConnectorError(
            f"{label}: the server's binlog_format is {fmt}: mysql-cdc needs ROW (the rows "
            "themselves, not the statements)"
        )
    if str(image).upper() != "FULL":
        raise ConnectorError(
            f"{label}: the server's binlog_row_image is {image}: mysql-cdc needs FULL (every "
            "column of every changed row)"
        )
    if str(metadata).upper() != "FULL":
        raise ConnectorError(
            f"{label}: the server's binlog_row_metadata is {metadata or 'unknown (too old)'}: "
            "mysql-cdc needs FULL (each column's charset and sign in the log; MariaDB 10.5+, "
            "MySQL 8.0.1+)"
        )
    return "mariadb" in str(version).lower()


def preflight(conn: Any, tables: list[str], table: str) -> list[str]:
    """`rivc check` of a mysql-cdc table: what stops it from running (the server's log
    settings, a missing table), each named."""
    from ..database.engine import connection

    schema, _, name = table.rpartition(".")
    with connection(conn) as db:
        try:
            check_server(db, f"table {table}")
        except ConnectorError as exc:
            return [exc.message]
        with db.cursor() as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name = %s",
                ((schema or conn.database or "").strip("`"), name.strip("`")),
            )
            if cur.fetchone() is None:
                return [f"table {table} does not exist"]
    return []


def binary_logs(db: Any) -> set[str]:
    with db.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return {row[0] for row in cur.fetchall()}


def moved_server(db: Any, file: str, pos: int, gtid: str | None, mariadb: bool) -> bool:
    """True when held coordinates `file`:`pos` are not a position of this server's log with
    the GTIDs `gtid` they were landed with (a failover to a replica): the batch then reads on
    from the GTIDs. MariaDB only (MySQL keeps to file and offset)."""
    if not mariadb or gtid is None:
        return False
    if file not in binary_logs(db):
        return True
    with db.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        found = cur.fetchone()
    return found is None or found[0] != gtid


def gtid_at(db: Any, at: tuple[str, int], mariadb: bool) -> str | None:
    """MariaDB's GTID position at binlog coordinates `at` (None on MySQL)."""
    if not mariadb:
        return None
    with db.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", at)
        found = cur.fetchone()
    return None if found is None or found[0] is None else str(found[0])


def log_end(db: Any) -> tuple[str, int]:
    """The binlog's end now: the batch reads the transactions committed before it."""
    with db.cursor() as cur:
        try:
            cur.execute("SHOW MASTER STATUS")
        except Exception:  # MySQL 8.4 renamed it
            cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
    return str(row[0]), int(row[1])


def key_names(db: Any, schema: str, table: str) -> list[str]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        return [row[0] for row in cur.fetchall()]


def file_number(name: str) -> int:
    return int(name.rsplit(".", 1)[1])
