"""The postgres and mysql sinks against the machine's PostgreSQL and MariaDB: values exact or
refused by name, every mode, and a kill on either side of the commit; read back with psycopg
and pymysql."""

from __future__ import annotations

import json
import math
import signal
from collections import Counter
from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import pytest
from deltalake import DeltaTable
from rivc_dbs import Db, database, project

from rivc_testing import free_port, rivc, run_rivc, scrape

pytestmark = pytest.mark.integration

EDGES = """{{ config(materialized='table') }}
select * from values
  (1, cast(9223372036854775807 as bigint), cast(2147483647 as int), cast(-32768 as smallint),
   cast(-128 as tinyint), cast('NaN' as double), cast('Infinity' as float),
   cast('99999999999999999999.999999999999999999' as decimal(38,18)),
   'comma, "quote", back\\\\slash, new\nline', X'00FF10', date'0001-01-01',
   timestamp'2026-03-29 01:30:00.000001', timestamp_ntz'9999-12-31 23:59:59.999999',
   array(1, null, 3), array('a"b', null, 'c\\\\d', ''), named_struct('x', 1.10bd, 'y', 2.5d),
   map('k', 1), true, 'NULL'),
  (2, cast(-9223372036854775808 as bigint), cast(-2147483648 as int), cast(32767 as smallint),
   cast(127 as tinyint), cast('-Infinity' as double), cast(-0.0 as float),
   cast('-0.000000000000000001' as decimal(38,18)),
   '', X'', date'9999-12-31', timestamp'1970-01-01 00:00:00', timestamp_ntz'0001-01-01 00:00:00',
   array(), array(), named_struct('x', null, 'y', cast('NaN' as double)), map(), false, '\\\\N'),
  (3, null, null, null, null, 4.9e-324d, cast(3.4028235e38 as float), null, null, null, null,
   null, null, null, null, null, null, null, null),
  (4, 0, 0, cast(0 as smallint), cast(0 as tinyint), 0.1d + 0.2d, cast(1.1 as float), 0.000000000000000001bd,
   'unicode: żółw 🐢', X'61', date'2000-02-29', timestamp'2026-01-01 12:00:00',
   timestamp_ntz'2026-01-01 12:00:00', array(-1), array('x'), named_struct('x', 0.00bd, 'y', 0d),
   map('a"b', 2), null, '""')
  as t(id, big, i, small, tiny, dbl, flt, dec, txt, bin, d, ts, ts_ntz, ints, texts, obj, m, flag,
       word)
"""


def pg_rows(db: Db, sql: str) -> list[tuple]:
    """The rows of a query, through psycopg or pymysql."""
    conn = db.connect()
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN, and -0.0 told from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def test_every_spark_type_lands_exactly_and_a_rerun_writes_nothing(spark, tmp_path):
    with database("postgres") as db:
        sinks = """
sinks:
  - {name: edges_pg, from: edges, connector: postgres,
     config: {connection: db, table: out.edges, mode: upsert, key_columns: [id]}}
"""
        root = project(tmp_path, db, "- {name: unused, table: unused}", {"edges": EDGES}, sinks)
        db.execute("CREATE TABLE unused (x int)")
        done = rivc(root, "run", "--select", "edges+")
        assert done.exit_code == 0, done.output
        types = dict(
            pg_rows(
                db,
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = 'out.edges'::regclass AND a.attnum > 0 ORDER BY a.attnum",
            )
        )
        assert types == {
            "id": "integer",
            "big": "bigint",
            "i": "integer",
            "small": "smallint",
            "tiny": "smallint",
            "dbl": "double precision",
            "flt": "real",
            "dec": "numeric(38,18)",
            "txt": "text",
            "bin": "bytea",
            "d": "date",
            "ts": "timestamp with time zone",
            "ts_ntz": "timestamp without time zone",
            "ints": "integer[]",
            "texts": "text[]",
            "obj": "jsonb",
            "m": "jsonb",
            "flag": "boolean",
            "word": "text",
        }
        got = {r[0]: r for r in pg_rows(db, "SELECT * FROM out.edges ORDER BY id")}
        model = DeltaTable(str(root / "warehouse/edges")).to_pyarrow_table().to_pylist()
        want = {r["id"]: r for r in model}  # the model's table, read by deltalake
        assert set(got) == set(want) == {1, 2, 3, 4}
        for i, row in got.items():
            for name, value in zip(types, row, strict=True):
                expected = want[i][name]
                if name == "m" and expected is not None:
                    expected = dict(expected)
                if name == "obj" and expected is not None:  # the decimal's text; NaN a string
                    nan = isinstance(expected["y"], float) and math.isnan(expected["y"])
                    expected = {"x": expected["x"], "y": "NaN" if nan else expected["y"]}
                    x = value["x"]
                    value = {**value, "x": None if x is None else Decimal(str(x))}
                if name == "bin" and value is not None:
                    value = bytes(value)
                if name == "flt" and value is not None:  # psycopg reads real's text as a double
                    value, expected = float(np.float32(value)), float(np.float32(expected))
                assert same(value, expected), (i, name, value, expected)
        # exact texts: the decimal's digits, the float's shortest form, the microsecond
        texts = pg_rows(db, "SELECT dec::text, flt::text, ts::text FROM out.edges WHERE id = 1")
        assert texts == [
            ("99999999999999999999.999999999999999999", "Infinity", "2026-03-29 01:30:00.000001+00")
        ]
        assert pg_rows(db, "SELECT txt = '', bin = ''::bytea FROM out.edges WHERE id = 2") == [
            (True, True)
        ]
        assert pg_rows(db, "SELECT dbl FROM out.edges WHERE id = 3") == [(5e-324,)]
        # text that looks like a NULL marker stays text; only the NULL is NULL
        words = pg_rows(db, "SELECT word FROM out.edges ORDER BY id")
        assert words == [("NULL",), ("\\N",), (None,), ('""',)]
        # the batch id and the model batch it consumed, beside the table
        commits = dict(pg_rows(db, "SELECT id, version FROM out._rivc_commits"))
        assert commits["rivc:rel:edges_pg"] == 0
        assert commits["rivc.writer"] is None
        assert [v for k, v in commits.items() if k.endswith(":model:edges")] == [0]
        assert not pg_rows(db, "SELECT 1 FROM pg_tables WHERE tablename LIKE '_rivc_stage%'")
        again = rivc(root, "run", "--select", "edges+")
        assert again.exit_code == 0 and "nothing new to deliver" in again.output, again.output
        assert pg_rows(db, "SELECT count(*) FROM out.edges") == [(4,)]


MODEL = """{{ config(materialized='table') }}
select id, concat('v', id, '-', {{ var('round', 1) }}) as v
from range({{ var('low', 0) }}, {{ var('high', 1000) }}) as r(id)
"""
SINKS = """
sinks:
  - {name: appended, from: nums, connector: KIND,
     config: {connection: db, table: appended}}
  - {name: upserted, from: nums, connector: KIND,
     config: {connection: db, table: upserted, mode: upsert, key_columns: [id]}}
  - {name: replaced, from: nums, connector: KIND,
     config: {connection: db, table: replaced, mode: overwrite}}
"""


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("postgres", "before-commit:upserted"),
        ("postgres", "after-commit:appended"),
        ("mysql", "before-commit:upserted"),
    ],
)
def test_killed_around_its_commit_each_mode_holds_each_batch_once(spark, tmp_path, kind, fault):
    with database(kind) as db:
        db.execute("CREATE TABLE unused (x int)")
        sinks = SINKS.replace("KIND", kind)
        root = project(tmp_path, db, "- {name: unused, table: unused}", {"nums": MODEL}, sinks)
        first = rivc(root, "run", "--select", "nums+")
        assert first.exit_code == 0, first.output
        second = ["run", "--select", "nums+", "--vars", "{round: 2, low: 500, high: 1500}"]
        killed = run_rivc(root, fault, *second)
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        stages = (
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = "
            f"'{'public' if kind == 'postgres' else db.name}' AND table_name LIKE '\\_rivc\\_stage%'"
        )
        if fault.startswith("before-commit"):  # staged, the table untouched
            assert list(pg_rows(db, "SELECT count(*), max(v) FROM upserted")) == [(1000, "v999-1")]
            assert list(pg_rows(db, stages)) == [(1,)]
        rerun = rivc(root, *second)
        assert rerun.exit_code == 0, rerun.output
        appended = Counter(pg_rows(db, "SELECT id, v FROM appended"))
        assert appended == Counter(
            [(i, f"v{i}-1") for i in range(1000)] + [(i, f"v{i}-2") for i in range(500, 1500)]
        )
        upserted = dict(pg_rows(db, "SELECT id, v FROM upserted"))
        assert len(upserted) == 1500 == len(pg_rows(db, "SELECT id FROM upserted"))
        assert upserted == {i: f"v{i}-{1 if i < 500 else 2}" for i in range(1500)}
        replaced = pg_rows(db, "SELECT id, v FROM replaced ORDER BY id")
        assert replaced == [(i, f"v{i}-2") for i in range(500, 1500)]
        assert list(pg_rows(db, stages)) == [(0,)]
        commits = {
            (t, i): v for t, i, v in pg_rows(db, "SELECT target, id, version FROM _rivc_commits")
        }
        # killed before its commit, the upsert's second batch got a new id on the rerun
        assert commits["upserted", "rivc:rel:upserted"] == (2 if "upserted" in fault else 1)
        assert commits["appended", "rivc:rel:appended"] == 1
        if fault.startswith("after-commit"):
            assert "replayed and skipped" in rerun.output or "nothing new" in rerun.output


def test_a_value_the_column_cannot_take_is_refused_by_name_and_nothing_lands(spark, tmp_path):
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE unused (x int)",
            "CREATE TABLE small (id smallint PRIMARY KEY, v text NOT NULL)",
            "INSERT INTO small VALUES (1, 'kept')",
        )
        sinks = """
sinks:
  - {name: into_small, from: nums, connector: postgres,
     config: {connection: db, table: small, mode: upsert, key_columns: [id],
              auto_create_table: false}}
"""
        model = (  # one id past smallint's largest
            "{{ config(materialized='table') }}\n"
            "select id, concat('v', id) as v from range(32766, 32769) as r(id)\n"
        )
        root = project(tmp_path, db, "- {name: unused, table: unused}", {"nums": model}, sinks)
        done = rivc(root, "run", "--select", "nums+")
        assert done.exit_code == 1
        line = next(x for x in done.output.splitlines() if "smallint" in x)
        assert "sink into_small" in line and "column id" in line and "32768" in line, line
        assert "_rivc_stage" not in done.output
        assert pg_rows(db, "SELECT * FROM small") == [(1, "kept")]
        # a missing table is refused when rivc may not create it
        db.execute("DROP TABLE small")
        missing = rivc(root, "run", "--select", "nums+")
        assert missing.exit_code == 1 and "auto_create_table is false" in missing.output
        assert pg_rows(db, "SELECT to_regclass('small')") == [(None,)]


def test_a_landed_source_is_copied_without_spark_and_upserted_by_key(tmp_path):
    """An incremental source's landed files delivered as they are (no JVM): rivc's process
    copies them; a second batch upserts by key."""
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text, born date, at timestamptz)",
            "INSERT INTO items SELECT g, 'n' || g, date '2000-01-01' + g, "
            "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' "
            "FROM generate_series(1, 50) g",
        )
        sinks = """
sinks:
  - {name: mirror, from: source:src.items, connector: postgres,
     config: {connection: db, table: copy.items, mode: upsert, key_columns: [id]}}
"""
        tables = (
            "- {name: items, table: items, mode: incremental, cursor_column: at, unique_key: id}"
        )
        root = project(tmp_path, db, tables, {}, sinks)
        assert run_rivc(root).returncode == 0
        db.execute(
            "UPDATE items SET name = 'changed', at = at + interval '1 day' WHERE id <= 5",
            "INSERT INTO items VALUES (51, NULL, NULL, '2026-02-01 00:00:00+00')",
        )
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        source = pg_rows(db, "SELECT id, name, born, at FROM items ORDER BY id")
        copied = pg_rows(db, "SELECT id, name, born, at FROM copy.items ORDER BY id")
        # the source's timestamptz lands as UTC time: the sink writes it back with its zone
        assert copied == source
        assert copied[0][2] == date(2000, 1, 2)
        assert copied[0][3].tzinfo is not None and copied[-1][3] == datetime(2026, 2, 1, tzinfo=UTC)
        assert not (root / ".rivc/spark.log").exists()  # no JVM was started


MYSQL_EDGES = (
    EDGES.replace("cast('NaN' as double)", "1.7976931348623157e308d")
    .replace("cast('Infinity' as float)", "cast(1.17549435e-38 as float)")  # MariaDB: no subnormals
    .replace("cast('-Infinity' as double)", "-2.2250738585072014e-308d")
    .replace(
        "named_struct('x', null, 'y', cast('NaN' as double))",
        "named_struct('x', null, 'y', 1e300d)",
    )
)


def test_mysql_takes_every_spark_type_exactly_and_refuses_nan_by_column(spark, tmp_path):
    with database("mysql") as db:
        db.execute("CREATE TABLE unused (x int)")
        sinks = """
sinks:
  - {name: edges_my, from: edges, connector: mysql,
     config: {connection: db, table: edges, mode: upsert, key_columns: [id, txt]}}
"""
        root = project(
            tmp_path, db, "- {name: unused, table: unused}", {"edges": MYSQL_EDGES}, sinks
        )
        done = rivc(root, "run", "--select", "edges+")
        assert done.exit_code == 1 and "row without a key" in done.output  # row 3's txt is null
        assert pg_rows(db, "SELECT count(*) FROM edges") == [(0,)]
        db.execute("DROP TABLE edges")  # created with that key
        sinks = sinks.replace("[id, txt]", "[id]")
        (root / "sinks/out.yml").write_text(sinks)
        done = rivc(root, "run", "--select", "edges+")
        assert done.exit_code == 0, done.output
        types = dict(
            pg_rows(
                db,
                "SELECT column_name, column_type FROM information_schema.columns "
                "WHERE table_name = 'edges' AND table_schema = DATABASE() ORDER BY ordinal_position",
            )
        )
        assert types == {
            "id": "int(11)",
            "big": "bigint(20)",
            "i": "int(11)",
            "small": "smallint(6)",
            "tiny": "tinyint(4)",
            "dbl": "double",
            "flt": "float",
            "dec": "decimal(38,18)",
            "txt": "longtext",
            "bin": "longblob",
            "d": "date",
            "ts": "datetime(6)",
            "ts_ntz": "datetime(6)",
            "ints": "longtext",  # MariaDB's JSON
            "texts": "longtext",
            "obj": "longtext",
            "m": "longtext",
            "flag": "tinyint(1)",
            "word": "longtext",
        }
        words = pg_rows(db, "SELECT word FROM edges ORDER BY id")
        assert words == [("NULL",), ("\\N",), (None,), ('""',)]
        # MariaDB prints a FLOAT with 6 digits: its double is the stored value exactly
        listed = ", ".join("CAST(flt AS DOUBLE)" if c == "flt" else f"`{c}`" for c in types)
        got = {r[0]: r for r in pg_rows(db, f"SELECT {listed} FROM edges ORDER BY id")}
        model = DeltaTable(str(root / "warehouse/edges")).to_pyarrow_table().to_pylist()
        want = {r["id"]: r for r in model}
        assert set(got) == set(want) == {1, 2, 3, 4}
        for i, row in got.items():
            for name, value in zip(types, row, strict=True):
                expected = want[i][name]
                if expected is None:
                    assert value is None, (i, name, value)
                    continue
                if name in ("ints", "texts", "obj", "m"):
                    value = json.loads(value, parse_float=Decimal)
                    if name == "m":
                        expected = dict(expected)
                    if name == "obj":
                        expected = {
                            k: v if v is None else Decimal(str(v)) for k, v in expected.items()
                        }
                if name == "ts":
                    expected = expected.replace(tzinfo=None)  # its UTC time
                if name == "flag":
                    value = bool(value)
                if name == "flt":
                    value, expected = float(np.float32(value)), float(np.float32(expected))
                assert same(value, expected), (i, name, value, expected)

        nan = "{{ config(materialized='table') }}\nselect 1 as id, cast('NaN' as double) as dbl\n"
        (root / "models/edges.sql").write_text(nan)
        db.execute("CREATE TABLE kept (id int, dbl double)", "INSERT INTO kept VALUES (1, 2.5)")
        overwrite = sinks.replace("table: edges, mode: upsert, key_columns: [id]", "table: kept")
        (root / "sinks/out.yml").write_text(overwrite)
        refused = rivc(root, "run", "--select", "edges+")
        assert refused.exit_code == 1
        line = next(x for x in refused.output.splitlines() if "NaN" in x)
        assert "sink edges_my" in line and "column dbl" in line, line
        assert pg_rows(db, "SELECT * FROM kept") == [(1, 2.5)]


def test_a_failed_stream_starts_again_with_backoff_and_lands_every_row_once(tmp_path):
    """A followed files stream into a postgres table that refuses its rows (a column of the
    wrong type): the stream stops, is started again after 0.5, 1, 2 s ... from its checkpoint,
    and once the table is fixed every row lands once; Ctrl-C then stops it."""
    import os
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    with database("postgres") as db:
        db.execute("CREATE TABLE unused (x int)", "CREATE TABLE events (id bigint, kind integer)")
        sinks = """
sinks:
  - name: events_pg
    from: source:drop.events
    connector: postgres
    config: {connection: db, table: events}
    trigger: {processing_time: "1 second"}
    retry: {max_attempts: 1, max_consecutive_failures: 1}
    restart: {backoff_ms: 500, max_backoff_ms: 2000}
"""
        root = project(tmp_path, db, "- {name: unused, table: unused}", {}, sinks)
        (root / "sources/drop.yml").write_text(
            "sources:\n  - name: drop\n    connector: files\n    tables:\n"
            "      - name: events\n"
            "        config: {path: inbox, format: jsonl, stream: true}\n"
            "        columns: {id: bigint, kind: string}\n"
        )
        port = free_port()
        with open(root / "profiles.yml", "a") as profile:
            profile.write(f"  metrics: {{port: {port}}}\n")
        (root / "inbox").mkdir()
        (root / "inbox/0.json").write_text(
            "".join(f'{{"id": {i}, "kind": "k{i}"}}\n' for i in range(6))
        )
        rivc_bin = Path(sys.executable).with_name("rivc")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("RIVC_FAULT", None)
        proc = subprocess.Popen(
            [str(rivc_bin), "run", "--select", "sink:events_pg+", "source:drop.events"],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and sum("restart 2" in x for x in lines) == 0:
                time.sleep(0.2)
            assert any("restart 2" in x for x in lines), "".join(lines)
            restarts = scrape(port)["rivc_sink_restarts_total"][("sink:events_pg",)]
            assert restarts >= 2  # as Prometheus sees them
            assert pg_rows(db, "SELECT count(*) FROM events") == [(0,)]
            db.execute("ALTER TABLE events ALTER COLUMN kind TYPE text")  # fixed
            while time.monotonic() < deadline and pg_rows(db, "SELECT count(*) FROM events") != [
                (6,)
            ]:
                time.sleep(0.2)
            (root / "inbox/1.json").write_text('{"id": 6, "kind": "k6"}\n')  # after the fix
            while time.monotonic() < deadline and pg_rows(db, "SELECT count(*) FROM events") != [
                (7,)
            ]:
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        output = "".join(lines)
        assert proc.returncode == 130, output
        refusal = next(x for x in lines if "restart 1" in x)
        assert "stream stopped on an error (sink events_pg" in refusal, refusal
        assert "invalid input syntax for type integer" in refusal and "in 0.5 s" in refusal
        assert any("restart 2" in x and "in 1 s" in x for x in lines), output
        assert sorted(pg_rows(db, "SELECT id, kind FROM events")) == [
            (i, f"k{i}") for i in range(7)
        ]
