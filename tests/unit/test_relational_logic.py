"""Error classification, retries, literals and connection settings of relational sources."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest

from rivc.adapters.connectors.database.engine import Conn, ExtractError, database
from rivc.adapters.connectors.database.relational import with_retries
from rivc.adapters.connectors.database.windows import decode, encode
from rivc.adapters.util.errortext import classify, python_error_inside, root_cause
from rivc.compiler.dialects import dialect
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import TUNING_PROFILES, ConnectionSpec

SPARK_ERROR = """An error occurred while calling o76.parquet.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 failed, most recent
failure: Lost task 1.0: org.postgresql.util.PSQLException: ERROR: division by zero
	at org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse(QueryExecutorImpl.java:2675)
	at java.base/java.io.EOFException.<init>(EOFException.java:1)
"""


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ('FATAL:  password authentication failed for user "x"', "auth"),
        ("(1045, \"Access denied for user 'x'@'localhost'\")", "auth"),
        ("ERROR: deadlock detected", "deadlock"),
        ("FATAL: sorry, too many connections", "capacity"),
        ("ERROR: canceling statement due to statement timeout", "timeout"),
        ("Lock wait timeout exceeded; try restarting transaction", "timeout"),
        ("FATAL: terminating connection due to administrator command", "network"),
        ("(2006, 'MySQL server has gone away')", "network"),
        ("Connection refused", "network"),
        ('ERROR: relation "nope" does not exist', "permanent"),
        ('ERROR: syntax error at or near "FORM"', "permanent"),
        ("something else entirely", "other"),
        (SPARK_ERROR, "other"),  # the database's words decide, not the stack trace's "EOF"
    ],
)
def test_classify(message, category):
    assert classify(message) == category


def test_root_cause_finds_the_database_message():
    assert root_cause(SPARK_ERROR) == "ERROR: division by zero"
    assert root_cause("plain message\nsecond") == "plain message"


PYTHON_WORKER_ERROR = """[PYTHON_EXCEPTION] An exception was thrown from the Python worker:
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/pgcopy.py", line 12, in read
    raise ValueError("first")
ValueError: first

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/pgcopy.py", line 14, in read
    batch = convert(b)
pyarrow.lib.ArrowInvalid: straddling object straddles two block boundaries
	at org.apache.spark.api.python.BasePythonRunner.handlePythonException(Runner.scala:1)
Caused by: org.apache.spark.SparkException: Job aborted
"""


def test_a_python_tasks_error_is_its_last_traceback_line():
    assert python_error_inside(PYTHON_WORKER_ERROR) == (
        "ArrowInvalid: straddling object straddles two block boundaries"
    )
    assert root_cause(PYTHON_WORKER_ERROR).startswith("ArrowInvalid: straddling")
    assert python_error_inside("no traceback here") is None


def test_retries_back_off_exponentially_and_stop_on_permanent_errors():
    tuning = {**TUNING_PROFILES["balanced"], "max_retries": 3, "retry_backoff_ms": 100}
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("connection reset by peer")
        return "rows"

    assert with_retries(flaky, tuning, (RuntimeError,), sleeps.append) == ("rows", 2)
    assert sleeps == [0.1, 0.2]

    def deadlocked():
        raise RuntimeError("deadlock detected")

    sleeps.clear()
    with pytest.raises(ExtractError) as err:
        with_retries(deadlocked, tuning, (RuntimeError,), sleeps.append)
    assert sleeps == [1.1, 1.2, 1.4]  # backoff plus Rivet's extra second for deadlocks
    assert err.value.attempts == 4 and "(after 4 attempts)" in err.value.message

    sleeps.clear()
    with pytest.raises(ExtractError) as err:
        with_retries(
            lambda: (_ for _ in ()).throw(RuntimeError("permission denied")),
            tuning,
            (RuntimeError,),
            sleeps.append,
        )
    assert sleeps == [] and err.value.category == "auth"


def test_literals_and_cursor_values_round_trip():
    ts = datetime(2026, 1, 2, 3, 4, 5, 600)
    for value in (ts, date(2026, 1, 2), Decimal("1.50"), 7, "it's", b"\x00\xff"):
        assert decode(encode(value)) == value
    assert dialect("postgres").literal(ts) == "CAST('2026-01-02 03:04:05.000600' AS TIMESTAMP)"
    assert dialect("mysql").literal(ts) == "CAST('2026-01-02 03:04:05.000600' AS DATETIME(6))"
    assert dialect("postgres").literal(Decimal("1.50")) == "1.50"
    assert dialect("mysql").literal(Decimal("1.50")) == "1.50"


@pytest.mark.parametrize(
    ("value", "postgres", "mysql"),
    [
        ("it's", "'it''s'", "'it''s'"),
        ("a\\", "'a\\'", "'a\\\\'"),  # a backslash: MySQL sessions keep backslash escapes on
        ("\\'; DROP TABLE t; --", "'\\''; DROP TABLE t; --'", "'\\\\''; DROP TABLE t; --'"),
        ("zürich ☃", "'zürich ☃'", "'zürich ☃'"),
    ],
)
def test_string_literals_escape_quotes_and_backslashes(value, postgres, mysql):
    assert dialect("postgres").literal(value) == postgres
    assert dialect("mysql").literal(value) == mysql


def test_sessions_pin_the_settings_literals_and_text_forms_rely_on():
    pg = database("postgres").session_init(TUNING_PROFILES["fast"])
    for setting in ("standard_conforming_strings = 'on'", "IntervalStyle = 'iso_8601'"):
        assert setting in pg
    my = database("mysql").session_init(TUNING_PROFILES["fast"])
    assert "REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', '')" in my


def test_connection_from_url_env_and_password_env():
    spec = ConnectionSpec(type="postgres", url_env="DB_URL", password_env="DB_PASS")
    conn = Conn.resolve(
        spec, {"DB_URL": "postgresql://app:old@db.example:6543/shop", "DB_PASS": "s3"}
    )
    assert (conn.host, conn.port, conn.user, conn.password, conn.database) == (
        "db.example",
        6543,
        "app",
        "s3",
        "shop",
    )
    assert (
        conn.jdbc_url == "jdbc:postgresql://db.example:6543/shop?readOnly=true&readOnlyMode=always"
    )
    my = Conn.resolve(ConnectionSpec(type="mysql", database="test"), {})
    assert my.jdbc_url == "jdbc:mysql://127.0.0.1:3306/test?permitMysqlScheme&tinyInt1isBit=false"
    with pytest.raises(ConnectorError):
        Conn.resolve(ConnectionSpec(type="mysql", password_env="MISSING"), {})


def test_session_settings_follow_the_tuning_profile():
    safe = database("postgres").session_init(TUNING_PROFILES["safe"])
    assert "statement_timeout = '120s'" in safe and "lock_timeout = '10s'" in safe
    assert "default_transaction_read_only = 'on'" in safe
    fast = database("postgres").session_init(TUNING_PROFILES["fast"])
    assert "statement_timeout" not in fast
    assert "innodb_lock_wait_timeout = 30" in database("mysql").session_init(
        TUNING_PROFILES["balanced"]
    )


def test_missing_jdbc_driver_is_named():
    py4j = (
        "An error occurred while calling o57.load.\n: java.lang.ClassNotFoundException: "
        "org.mariadb.jdbc.Driver\n\tat java.base/java.net.URLClassLoader.findClass"
    )
    assert root_cause(py4j).startswith("JDBC driver org.mariadb.jdbc.Driver is not on Spark's")
    other = "An error occurred while calling o9.load.\n: java.io.IOException: disk full\n\tat x"
    assert root_cause(other) == "IOException: disk full"


def test_tls_settings_reach_every_driver_and_a_url_may_carry_them():
    url = "postgresql://app@db.example/shop?sslmode=verify-full&sslrootcert=/etc/ca.crt"
    pg = Conn.resolve(ConnectionSpec(type="postgres", url=url), {})
    assert pg.tls.psycopg() == {"sslmode": "verify-full", "sslrootcert": "/etc/ca.crt"}
    assert pg.jdbc_url.endswith("&sslmode=verify-full&sslrootcert=/etc/ca.crt")
    my = Conn.resolve(
        ConnectionSpec(type="mysql", sslmode="verify-ca", sslrootcert="/etc/ca.pem"), {}
    )
    assert my.tls.pymysql() == {
        "ssl": {"ca": "/etc/ca.pem"},
        "ssl_verify_cert": True,
        "ssl_verify_identity": False,
    }
    assert "&useSsl=true&serverSslCert=/etc/ca.pem&disableSslHostnameVerification=true" in (
        my.jdbc_url
    )
    assert Conn.resolve(ConnectionSpec(type="mysql"), {}).tls.pymysql() == {}
    with pytest.raises(ValueError, match="needs sslrootcert"):
        ConnectionSpec(type="postgres", sslmode="verify-full")


def test_binary_keys_are_hex_literals():
    key = b"\x00'\\\xff"
    assert dialect("postgres").literal(key) == "'\\x0027 5cff'::bytea".replace(" ", "")
    assert dialect("mysql").literal(key) == "X'00275cff'"


def test_key_columns_are_quoted_identifiers_whatever_their_name():
    from rivc.adapters.connectors.database.windows import Cursor, plan_window
    from rivc.compiler.loading.specs import SourceTable

    class Recorder:
        """A connection that records its queries and answers 5 to each."""

        def __init__(self) -> None:
            self.sql: list[str] = []

        def cursor(self) -> Recorder:
            return self

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def execute(self, sql: str) -> None:
            self.sql.append(sql)

        def fetchone(self) -> tuple[int]:
            return (5,)

    hostile = 'x" IS NULL OR 1=1; --'
    table = SourceTable.model_validate(
        {
            "name": "t",
            "table": "t",
            "mode": "incremental",
            "cursor_column": hostile,
            "unique_key": ["k`"],
        }
    )
    for kind, quoted in (("postgres", '"x"" IS NULL OR 1=1; --"'), ("mysql", f"`{hostile}`")):
        db = Recorder()
        window = plan_window(db, kind, "SELECT * FROM t", table, Cursor(3, ((1,),)))
        assert db.sql == [f"SELECT MAX({quoted}) FROM (SELECT * FROM t) AS _rivc"]
        assert window.predicate is not None and window.predicate.startswith(f"{quoted} >= 3")
        key = '"k`"' if kind == "postgres" else "`k```"
        assert f"{key} IN (1)" in window.predicate
