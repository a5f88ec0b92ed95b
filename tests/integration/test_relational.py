"""PostgreSQL and MariaDB sources against the machine's servers, each test in its own database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project

from rivc_testing import at_entry, last_run, rivc

pytestmark = pytest.mark.integration

KINDS = ["postgres", "mysql"]


def results(root: Path) -> dict[str, dict]:
    data = last_run(root)
    return {r["node"]: r for r in data["results"]}


def lake(root: Path, name: str = "events") -> list[tuple]:
    table = DeltaTable(str(root / "out" / name)).to_pyarrow_table()
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


SINK = """
sinks:
  - {name: events_lake, from: source:src.events, connector: delta,
     config: {table_uri: out/events, mode: merge, merge_keys: [id]}}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_boundary_rows_are_neither_lost_nor_duplicated(spark, tmp_path, kind):
    with database(kind) as db:
        ts = "timestamp" if kind == "postgres" else "datetime(6)"
        db.execute(f"CREATE TABLE events (id int primary key, v varchar(20), updated_at {ts})")
        insert = "INSERT INTO events VALUES (%s, %s, %s)"
        db.executemany(
            insert,
            [
                (1, "a", "2026-01-01 10:00:00"),
                (2, "b", "2026-01-01 11:00:00"),
                (3, "c", "2026-01-01 11:00:00"),
            ],
        )
        root = project(
            tmp_path / kind,
            db,
            """
            - {name: events, table: events, mode: incremental, cursor_column: updated_at,
               unique_key: id}
            """,
            {},
            SINK,
        )
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert [r[0] for r in lake(root)] == [1, 2, 3]
        # Run 2: a row arrives at the boundary value (11:00) after it was read, one is updated,
        # one is new.
        db.executemany(insert, [(4, "d", "2026-01-01 11:00:00"), (5, "e", "2026-01-01 12:00:00")])
        db.execute("UPDATE events SET v = 'a2', updated_at = '2026-01-01 12:00:00' WHERE id = 1")
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert results(root)["source:src.events"]["rows"] == 3  # 4, 5 and the updated 1
        via = "via COPY" if kind == "postgres" else "via JDBC"
        assert via in results(root)["source:src.events"]["message"]
        assert [(r[0], r[1]) for r in lake(root)] == [
            (1, "a2"),
            (2, "b"),
            (3, "c"),
            (4, "d"),
            (5, "e"),
        ]
        # Run 3: nothing new, then one more row at the current boundary value.
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert results(root)["source:src.events"]["rows"] == 0
        db.executemany(insert, [(6, "f", "2026-01-01 12:00:00")])
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert results(root)["source:src.events"]["rows"] == 1
        assert [r[0] for r in lake(root)] == [1, 2, 3, 4, 5, 6]


def test_a_failed_consumer_leaves_the_landed_window_for_its_next_run(spark, tmp_path):
    with database("postgres") as db:
        db.execute("CREATE TABLE events (id int primary key, updated_at timestamp)")
        db.execute("INSERT INTO events VALUES (1, '2026-01-01'), (2, '2026-01-02')")
        root = project(
            tmp_path / "p",
            db,
            "- {name: events, table: events, mode: incremental, cursor_column: updated_at}",
            {
                "bad": "{{ config(materialized='table') }}\n"
                "select id, 1 / (id - id) as boom from {{ source('src', 'events') }}\n"
            },
        )
        assert rivc(root, "run").exit_code == 1
        # the window landed: a failed consumer does not make the source extract it again
        (shown,) = json.loads(rivc(root, "state", "show", "--json").output)["sources"]
        assert shown["cursor"] is not None
        db.execute("INSERT INTO events VALUES (3, '2026-01-03')")
        (root / "models/bad.sql").write_text(
            "{{ config(materialized='table') }}\nselect id from {{ source('src', 'events') }}\n"
        )
        assert rivc(root, "run").exit_code == 0  # the fixed model reads every landed row
        table = DeltaTable(str(root / "warehouse/bad")).to_pyarrow_table()
        assert sorted(table.column("id").to_pylist()) == [1, 2]  # 3 is at the cursor's edge


@pytest.mark.parametrize("kind", KINDS)
def test_chunked_run_resumes_after_a_failure(spark, tmp_path, kind):
    with database(kind) as db:
        db.execute("CREATE TABLE payments (id int primary key, amount int, d int)")
        rows = [(i, i * 10, 0 if i == 80 else 1) for i in range(1, 101)]
        db.executemany("INSERT INTO payments VALUES (%s, %s, %s)", rows)
        divide = "amount / d"
        if kind == "mysql":  # MariaDB returns NULL for x / 0; make the row fail as PostgreSQL does
            db.execute(
                "CREATE FUNCTION chk(d INT) RETURNS INT DETERMINISTIC BEGIN IF d = 0 THEN "
                "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'division by zero'; END IF; "
                "RETURN d; END"
            )
            divide = "amount / chk(d)"
        root = project(
            tmp_path / kind,
            db,
            f"- {{name: payments, query: 'SELECT id, {divide} AS amount FROM payments',"
            " mode: chunked, chunk_column: id, chunk_size: 25, parallel: 2}",
            {
                "payments_copy": "{{ config(materialized='table') }}\n"
                "select id, amount from {{ source('src', 'payments') }}\n"
            },
        )
        # Chunks 0-1 (ids 1-49) are read; chunks 2-3 fail on id 80's division by zero.
        assert rivc(root, "run").exit_code == 1
        res = results(root)["source:src.payments"]
        assert res["status"] == "error" and "division by zero" in res["error"].lower()
        # the finished group is in the landing table, as a pass under way that nothing reads
        landing = root / "warehouse/_rivc/landing/src.payments"
        assert sorted(p.name for p in landing.glob("_rivc_batch=*/*")) == ["chunks-000000-000001"]
        (shown,) = json.loads(rivc(root, "state", "show", "--json").output)["sources"]
        assert shown["chunks_done"] == 2 and shown["batch"] is None
        # Fix the row, and delete the rows already extracted: the resumed run must take them from
        # its checkpoint, not from the database. A new row lands in a new chunk.
        db.execute("UPDATE payments SET d = 1 WHERE id = 80")
        db.execute("DELETE FROM payments WHERE id < 50")
        db.execute("INSERT INTO payments VALUES (1000, 1, 1)")
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        table = DeltaTable(str(root / "warehouse/payments_copy")).to_pyarrow_table()
        assert sorted(table.column("id").to_pylist()) == [*range(1, 101), 1000]
        assert "sparse key range" in results(root)["source:src.payments"]["message"]
        (shown,) = json.loads(rivc(root, "state", "show", "--json").output)["sources"]
        assert shown["chunks_done"] is None and shown["batch"] is not None  # the pass is whole
        assert len(list(landing.glob("_rivc_batch=*"))) == 1


PG_TYPES = """
CREATE TABLE typed (
    id bigint primary key, small smallint, i int, big bigint, r real, d double precision,
    n numeric(12, 3), n_free numeric, t text, vc varchar(10), b bytea, dt date,
    ts timestamp, tstz timestamptz, flag boolean, j json, jb jsonb, u uuid, arr int[]
)
"""
PG_ROW = (
    "INSERT INTO typed VALUES (1, 7, 42, 9000000000, 1.5, 2.25, 12345.678, 1.5, 'text', 'vc',"
    " '\\x0102', '2026-03-04', '2026-03-04 05:06:07.123456', '2026-03-04 05:06:07+02', true,"
    " '{\"a\": 1}', '{\"b\": 2}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2,3}')"
)
MY_TYPES = """
CREATE TABLE typed (
    id bigint primary key, small smallint, i int, big bigint, r float, d double,
    n decimal(12, 3), t text, vc varchar(10), b blob, dt date, ts datetime(6),
    tsz timestamp(6) NULL, flag boolean, j json
)
"""
MY_ROW = (
    "INSERT INTO typed VALUES (1, 7, 42, 9000000000, 1.5, 2.25, 12345.678, 'text', 'vc',"
    " x'0102', '2026-03-04', '2026-03-04 05:06:07.123456', '2026-03-04 03:06:07', true,"
    " '{\"a\": 1}')"
)


@pytest.mark.parametrize("kind", KINDS)
def test_types_round_trip_to_delta(spark, tmp_path, kind):
    from datetime import date, datetime
    from decimal import Decimal

    with database(kind) as db:
        db.execute(PG_TYPES if kind == "postgres" else MY_TYPES)
        db.execute(PG_ROW if kind == "postgres" else MY_ROW)
        root = project(
            tmp_path / kind,
            db,
            "- {name: typed, table: typed}",
            {},
            """
            sinks:
              - {name: typed_lake, from: source:src.typed, connector: delta,
                 config: {table_uri: out/typed, mode: append}}
            """,
        )
        result = rivc(root, "run")
        assert result.exit_code == 0, result.output
        lake = DeltaTable(str(root / "out/typed"))
        adds = lake.get_add_actions(flatten=True).column("path").to_pylist()
        assert all(p.startswith("rivc-batch-") for p in adds)  # the extraction's files, adopted
        table = lake.to_pyarrow_table()
        row = table.to_pylist()[0]
        schema = {f.name: str(f.type) for f in table.schema}
        assert row["small"] == 7 and row["i"] == 42 and row["big"] == 9000000000
        assert row["r"] == 1.5 and row["d"] == 2.25
        assert row["n"] == Decimal("12345.678") and schema["n"] == "decimal128(12, 3)"
        assert row["t"] == "text" and row["vc"] == "vc"
        assert row["b"] == b"\x01\x02"
        assert row["dt"] == date(2026, 3, 4)
        assert row["ts"].replace(tzinfo=None) == datetime(2026, 3, 4, 5, 6, 7, 123456)
        # MySQL's BOOLEAN is TINYINT(1), which may hold 2: delivered as the number it is
        assert row["flag"] is True if kind == "postgres" else row["flag"] == 1
        if kind == "postgres":
            assert row["tstz"].replace(tzinfo=None) == datetime(2026, 3, 4, 3, 6, 7)  # in UTC
            assert json.loads(row["j"]) == {"a": 1} and json.loads(row["jb"]) == {"b": 2}
            assert row["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
            assert row["arr"] == [1, 2, 3]
            assert row["n_free"] == Decimal("1.5")
        else:
            assert row["tsz"].replace(tzinfo=None) == datetime(2026, 3, 4, 3, 6, 7)
            assert json.loads(row["j"]) == {"a": 1}


KILL_READERS = {
    "copy": "query: 'SELECT id, slow(id) AS s, v FROM big'",
    "copy_spark": "query: 'SELECT id, slow(id) AS s, v FROM big', mode: chunked, "
    "chunk_column: id, chunk_size: 1500, parallel: 2",
    "jdbc": "query: \"SELECT id, slow(id) AS s, v, decode('00', 'hex') AS b FROM big\"",
}


@pytest.mark.parametrize("reader", list(KILL_READERS))
def test_connection_killed_mid_read_is_retried(spark, tmp_path, reader):
    import threading
    import time

    with database("postgres") as db:
        db.execute(
            "CREATE TABLE big (id int primary key, v text)",
            "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 3000) g",
            "CREATE FUNCTION slow(i int) RETURNS int AS $$ SELECT i FROM pg_sleep(0.001) $$ "
            "LANGUAGE sql",
        )
        root = project(
            tmp_path / "kill",
            db,
            f"- {{name: big, {KILL_READERS[reader]}}}",
            {
                "big_copy": "{{ config(materialized='table') }}\n"
                "select id, s, v from {{ source('src', 'big') }}\n"
            },
        )
        killed = []

        def killer() -> None:
            admin = db.connect()
            deadline = time.time() + 60
            while time.time() < deadline and not killed:
                rows = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE query LIKE '%slow(id)%' "
                    "AND pid <> pg_backend_pid() AND state = 'active'"
                ).fetchall()
                for (pid,) in rows:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    killed.append(pid)
                time.sleep(0.05)
            admin.close()

        thread = threading.Thread(target=killer)
        thread.start()
        result = rivc(root, "run")
        thread.join()
        assert killed, "the extraction query was never seen running"
        assert result.exit_code == 0, result.output
        res = results(root)["source:src.big"]
        assert res["retries"] >= 1
        table = DeltaTable(str(root / "warehouse/big_copy")).to_pyarrow_table()
        assert sorted(table.column("id").to_pylist()) == list(range(1, 3001))


def test_auth_failure_is_not_retried(spark, tmp_path):
    with database("postgres") as db:
        db.execute("CREATE TABLE t (id int)")
        root = project(
            tmp_path / "auth",
            db,
            "- {name: t, table: t}",
            {
                "t_copy": "{{ config(materialized='table') }}\nselect id from {{ source('src', 't') }}\n"
            },
        )
        (root / "profiles.yml").write_text(
            db.profile.replace("user: postgres", "user: rivc_no_such_role")
        )
        assert rivc(root, "run").exit_code == 1
        res = results(root)["source:src.t"]
        assert res["status"] == "error"
        assert at_entry(res["error"], "sources/src.yml").startswith("auth error")
        assert res["retries"] == 0
        assert "(after" not in res["error"]


def test_schema_change_warns_or_fails(spark, tmp_path):
    with database("postgres") as db:
        db.execute("CREATE TABLE t (id int, v int)", "INSERT INTO t VALUES (1, 1)")
        root = project(
            tmp_path / "schema",
            db,
            "- {name: t, table: t, on_schema_change: fail}",
            {
                "t_copy": "{{ config(materialized='table') }}\nselect * from {{ source('src', 't') }}\n"
            },
        )
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        db.execute(
            "ALTER TABLE t ADD COLUMN extra text", "ALTER TABLE t ALTER COLUMN v TYPE bigint"
        )
        assert rivc(root, "run").exit_code == 1
        res = results(root)
        assert res["source:src.t"]["schema"] == "CHANGED"
        assert "added extra" in res["source:src.t"]["error"]
        assert "v int -> bigint" in res["source:src.t"]["error"]
        assert res["model:t_copy"]["status"] == "skipped"
        # warn: the run goes on and the new schema becomes the reference.
        spec = root / "sources/src.yml"
        spec.write_text(
            spec.read_text().replace("on_schema_change: fail", "on_schema_change: warn")
        )
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert "schema changed" in results(root)["source:src.t"]["message"]
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert results(root)["source:src.t"]["schema"] == "SAME"


@pytest.mark.parametrize("kind", KINDS)
def test_time_window_meta_columns_quality_and_skip_empty(spark, tmp_path, kind):
    with database(kind) as db:
        ts = "timestamp" if kind == "postgres" else "datetime"
        db.execute(f"CREATE TABLE ev (id int, email varchar(50), created_at {ts})")
        now = "now()" if kind == "postgres" else "utc_timestamp()"
        interval = (
            (lambda d: f"{now} - interval '{d} days'")
            if kind == "postgres"
            else (lambda d: f"{now} - interval {d} day")
        )
        db.execute(
            f"INSERT INTO ev VALUES (1, 'a@x', {interval(1)}), (2, NULL, {interval(2)}),"
            f" (2, 'c@x', {interval(3)}), (4, 'old@x', {interval(30)})"
        )
        root = project(
            tmp_path / kind,
            db,
            """
            - name: ev
              table: ev
              mode: time_window
              time_column: created_at
              days_window: 7
              meta_columns: {exported_at: true, row_hash: true}
              quality:
                row_count: {min: 1}
                null_ratio_max: {columns: {email: 0.1}, severity: warn}
                unique_columns: {columns: [id], severity: warn}
            """,
            {
                "ev_copy": "{{ config(materialized='table') }}\n"
                "select id, email, _rivc_exported_at, _rivc_row_hash from {{ source('src', 'ev') }}\n"
            },
        )
        result = rivc(root, "run")
        assert result.exit_code == 0, result.output
        res = results(root)["source:src.ev"]
        assert res["rows"] == 3  # the 30-day-old row is outside the window
        assert "null ratio of email" in res["message"] and "duplicate" in res["message"]
        table = DeltaTable(str(root / "warehouse/ev_copy")).to_pyarrow_table()
        hashes = table.column("_rivc_row_hash").to_pylist()
        assert len(set(hashes)) == 3 and all(isinstance(h, int) for h in hashes)
        assert len(set(table.column("_rivc_exported_at").to_pylist())) == 1
        # A gate at severity fail stops the source and what reads it.
        spec = root / "sources/src.yml"
        spec.write_text(spec.read_text().replace("row_count: {min: 1}", "row_count: {min: 10}"))
        assert rivc(root, "run").exit_code == 1
        res = results(root)
        assert "row_count 3 outside" in res["source:src.ev"]["error"]
        assert res["model:ev_copy"]["status"] == "skipped"
        # skip_empty: no rows, downstream skipped, exit 0.
        db.execute("DELETE FROM ev")
        text = spec.read_text().replace("row_count: {min: 10}", "row_count: {min: 0}")
        spec.write_text(text.replace("days_window: 7", "days_window: 7\n        skip_empty: true"))
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        res = results(root)
        assert res["source:src.ev"]["status"] == "skipped"
        assert res["model:ev_copy"]["status"] == "skipped"


@pytest.mark.parametrize("kind", KINDS)
def test_check_and_doctor(spark, tmp_path, kind):
    with database(kind) as db:
        db.execute("CREATE TABLE ev (id int primary key, created_at date, v int)")
        db.executemany(
            "INSERT INTO ev VALUES (%s, %s, %s)", [(i, "2026-01-01", i) for i in range(1, 201)]
        )
        root = project(
            tmp_path / kind,
            db,
            """
            - {name: by_id, table: ev, mode: incremental, cursor_column: id}
            - {name: by_v, table: ev, mode: incremental, cursor_column: v}
            - {name: chunks, table: ev, mode: chunked, chunk_column: id, chunk_size: 1000}
            """,
            {},
            """
            sinks:
              - {name: lake, from: source:src.by_id, connector: delta,
                 config: {table_uri: out/lake, mode: append}}
            """,
        )
        db.execute("INSERT INTO ev VALUES (1000000, '2026-01-02', 0)")  # a sparse key range
        if kind == "postgres":
            db.execute("ANALYZE ev")
        result = rivc(root, "check", "--format", "json")
        assert result.exit_code == 0, result.output
        checks = {c["table"]: c for c in json.loads(result.output)}
        assert checks["src.by_id"]["strategy"] == "incremental(id)"
        assert checks["src.by_v"]["scan"] == "full scan"
        assert any("unindexed v" in w for w in checks["src.by_v"]["warnings"])
        # the first window of an indexed cursor is the whole table: a scan, and no warning
        assert not any("unindexed" in w for w in checks["src.by_id"]["warnings"])
        assert checks["src.by_v"]["verdict"] == "DEGRADED"
        assert checks["src.by_v"]["recommended_profile"] == "fast"
        assert any("sparse key range" in w for w in checks["src.chunks"]["warnings"])
        text = rivc(root, "check", "--select", "source:src.by_id")
        assert "verdict:" in text.output and "src.by_v" not in text.output

        doc = rivc(root, "doctor")
        assert doc.exit_code == 0, doc.output
        assert f"[OK] connection db ({kind})" in doc.output
        assert "[OK] sink lake" in doc.output
        (root / "profiles.yml").write_text(db.profile.replace(db.name, "rivc_no_such_db"))
        bad = rivc(root, "doctor")
        assert bad.exit_code == 1
        assert "[FAIL] connection db" in bad.output and "not found" in bad.output
        # a password from an unset variable: its line fails, doctor goes on
        (root / "profiles.yml").write_text(
            db.profile.replace(db.name, f"{db.name}, password_env: RIVC_UNSET_PASSWORD")
        )
        unset = rivc(root, "doctor")
        assert unset.exit_code == 1, unset.output
        assert "[FAIL] connection db" in unset.output and "RIVC_UNSET_PASSWORD" in unset.output
        assert "[OK] sink lake" in unset.output
        user = "postgres" if kind == "postgres" else "root"
        (root / "profiles.yml").write_text(
            db.profile.replace(f"user: {user}", "user: rivc_no_such_role")
        )
        denied = rivc(root, "doctor").output
        line = next(x for x in denied.splitlines() if x.startswith("[FAIL] connection db"))
        assert line.count("auth error") == 1, line


def test_copy_reader_types_nulls_and_awkward_text(spark, tmp_path):
    from datetime import date, datetime
    from decimal import Decimal

    with database("postgres") as db:
        db.execute(
            "CREATE TABLE c (id int primary key, small smallint, big bigint, r real, d float8,"
            " n numeric(12, 3), n_free numeric, t text, flag boolean, dt date, ts timestamp,"
            " tstz timestamptz, j jsonb, u uuid)",
            "INSERT INTO c VALUES (1, 7, 9000000000, 1.5, 2.25, 12345.678, 1.5,"
            " 'a, \"quoted\"\nnew line', true, '2026-03-04', '2026-03-04 05:06:07.123456',"
            " '2026-03-04 05:06:07+02', '{\"b\": 2}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),"
            " (2, NULL, NULL, NULL, NULL, NULL, NULL, '', false, NULL, NULL, NULL, NULL, NULL),"
            " (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        )
        root = project(
            tmp_path / "copy",
            db,
            "- {name: c, table: c}",
            {},
            """
            sinks:
              - {name: c_lake, from: source:src.c, connector: delta,
                 config: {table_uri: out/c, mode: append}}
            """,
        )
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert "via COPY" in results(root)["source:src.c"]["message"]
        rows = sorted(
            DeltaTable(str(root / "out/c")).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]
        )
        one, two, three = rows
        assert (one["small"], one["big"], one["r"], one["d"]) == (7, 9000000000, 1.5, 2.25)
        assert one["n"] == Decimal("12345.678") and one["n_free"] == Decimal("1.5")
        assert one["t"] == 'a, "quoted"\nnew line'
        assert one["flag"] is True and two["flag"] is False and three["flag"] is None
        assert one["dt"] == date(2026, 3, 4)
        assert one["ts"].replace(tzinfo=None) == datetime(2026, 3, 4, 5, 6, 7, 123456)
        assert one["tstz"].replace(tzinfo=None) == datetime(2026, 3, 4, 3, 6, 7)
        assert json.loads(one["j"]) == {"b": 2}
        assert one["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        assert two["t"] == "" and three["t"] is None  # empty string and NULL stay apart


@pytest.mark.parametrize("kind", KINDS)
def test_extracted_table_delivered_to_a_parquet_sink(spark, tmp_path, kind):
    import duckdb

    with database(kind) as db:
        db.execute("CREATE TABLE t (id int primary key, v varchar(20))")
        db.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(50)])
        root = project(
            tmp_path / kind,
            db,
            "- {name: t, table: t}",
            {},
            """
            sinks:
              - {name: raw, from: source:src.t, connector: files,
                 config: {path: out/raw, format: parquet, mode: overwrite}}
            """,
        )
        for _ in range(2):
            result = rivc(root, "run")
            assert result.exit_code == 0, result.output
    files = sorted((root / "out/raw").glob("*.parquet"))
    assert files and all(f.name.startswith("batch-000001-part-") for f in files)  # overwrite
    rows = duckdb.sql(f"SELECT count(*), sum(id) FROM read_parquet('{root}/out/raw/*.parquet')")
    assert rows.fetchall() == [(50, sum(range(50)))]


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_validate_counts_each_window_again_in_the_database(spark, tmp_path, kind):
    """`--validate` (Rivet's): every extraction's window is counted again in the database; the
    incremental window's count leaves out the boundary rows an earlier run delivered, as the read
    does; a difference is an error that lands nothing."""
    from rivc.adapters.connectors.database.engine import Conn, connection
    from rivc.adapters.connectors.database.windows import Cursor, encode, plan_window
    from rivc.adapters.ingest.extract import count_chunks, count_window, validation_error
    from rivc.compiler.loading.project import load_project

    with database(kind) as db:
        db.execute("CREATE TABLE ev (id int PRIMARY KEY, at int)")
        db.executemany("INSERT INTO ev VALUES (%s, %s)", [(i, i // 10) for i in range(1, 201)])
        tables = """
- {name: inc, table: ev, mode: incremental, cursor_column: at, unique_key: id}
- {name: whole, query: "SELECT id, at FROM ev WHERE id > 50", mode: full}
- {name: parts, table: ev, mode: chunked, chunk_column: id, chunk_size: 60, parallel: 2}
"""
        root = project(tmp_path, db, tables, {})
        done = rivc(root, "run", "--validate")
        assert done.exit_code == 0, done.output
        assert "validated: the database holds the same 200 rows" in done.output, done.output
        assert "validated: the database holds the same 150 rows" in done.output
        assert "validated: each chunk group held the rows it read (200 in all)" in done.output
        # rows at the boundary value (at = 20: id 200) and past it
        db.executemany("INSERT INTO ev VALUES (%s, %s)", [(201, 20), (202, 21)])
        again = rivc(root, "run", "--validate", "--select", "source:src.inc")
        assert again.exit_code == 0, again.output
        assert "validated: the database holds the same 2 rows" in again.output, again.output

        # the count itself: the window after at = 20 with id 200 delivered holds ids 201, 202
        project_ = load_project(root)
        conn = Conn.resolve(project_.profile.connections["db"], {})
        table = project_.sources["src.inc"].table
        with connection(conn) as c:
            window = plan_window(c, kind, "SELECT * FROM ev", table, Cursor(encode(20), ((200,),)))
            first = plan_window(c, kind, "SELECT * FROM ev", table, None)
        assert count_window(conn, "SELECT * FROM ev", window) == 2
        assert count_window(conn, "SELECT * FROM ev", first) == 202
        assert "holds 3 rows in this window, 2 were read" in validation_error(3, 2)
        parts = project_.sources["src.parts"].table
        with connection(conn) as c:
            chunks = plan_window(c, kind, "SELECT * FROM ev", parts, None).chunks or []
        assert len(chunks) == 4  # ids 1..202 in chunks of about 60
        counted = [count_chunks(conn, "SELECT * FROM ev", [p]) for _, p in chunks]
        assert sum(counted) == 202 and all(c > 0 for c in counted)  # each row in one chunk
        pair = count_chunks(conn, "SELECT * FROM ev", [p for _, p in chunks[:2]])
        assert pair == counted[0] + counted[1]
