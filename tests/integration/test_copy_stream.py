"""The COPY stream read straight from libpq, against the machine's PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest
from rivc_dbs import database

from rivc.adapters.connectors.postgres.copy import _CopyOut

pytestmark = pytest.mark.integration


def test_copy_stream_hands_out_exact_sizes_and_ends_cleanly():
    with database("postgres") as db, db.connect() as conn:
        rows = "".join(f"{i},row {i}\n" for i in range(1, 2001)).encode()
        stream = _CopyOut(
            conn,
            "COPY (SELECT g, 'row ' || g FROM generate_series(1, 2000) g) TO STDOUT (FORMAT csv)",
        )
        assert stream.has_rows()
        got = stream.read(7) + stream.read(1000)
        while chunk := stream.read(4096):
            got += chunk
        assert got == rows
        assert stream.read(10) == b""
        # the connection is idle again and usable
        assert conn.execute("SELECT 1").fetchone() == (1,)
        empty = _CopyOut(conn, "COPY (SELECT 1 WHERE false) TO STDOUT (FORMAT csv)")
        assert not empty.has_rows()
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_copy_stream_raises_the_servers_error_after_rows():
    with database("postgres") as db, db.connect() as conn:
        # the error comes after the server has sent thousands of rows
        sql = "COPY (SELECT 1 / (50000 - g) FROM generate_series(1, 60000) g) TO STDOUT"
        stream = _CopyOut(conn, sql)
        with pytest.raises(psycopg.errors.DivisionByZero):
            while stream.read(1 << 16):
                pass
        with pytest.raises(psycopg.errors.UndefinedTable):
            _CopyOut(conn, "COPY (SELECT * FROM missing_table) TO STDOUT")
