"""PostgreSQL and MariaDB sources against the machine's servers, each test in its own database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project

from rivc_testing import rivc

pytestmark = pytest.mark.integration

KINDS = ["postgres", "mysql"]


def results(root: Path) -> dict[str, dict]:
    data = json.loads((root / "target" / "run_results.json").read_text())
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
            [(1, "a", "2026-01-01 10:00:00"), (2, "b", "2026-01-01 11:00:00"),
             (3, "c", "2026-01-01 11:00:00")],
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
        assert rivc(root, "run").exit_code == 0
        assert [r[0] for r in lake(root)] == [1, 2, 3]
        # Run 2: a row arrives at the boundary value (11:00) after it was read, one is updated,
        # one is new.
        db.executemany(
            insert, [(4, "d", "2026-01-01 11:00:00"), (5, "e", "2026-01-01 12:00:00")]
        )
        db.execute("UPDATE events SET v = 'a2', updated_at = '2026-01-01 12:00:00' WHERE id = 1")
        assert rivc(root, "run").exit_code == 0
        assert results(root)["source:src.events"]["rows"] == 3  # 4, 5 and the updated 1
        assert [(r[0], r[1]) for r in lake(root)] == [
            (1, "a2"), (2, "b"), (3, "c"), (4, "d"), (5, "e")
        ]
        # Run 3: nothing new, then one more row at the current boundary value.
        assert rivc(root, "run").exit_code == 0
        assert results(root)["source:src.events"]["rows"] == 0
        db.executemany(insert, [(6, "f", "2026-01-01 12:00:00")])
        assert rivc(root, "run").exit_code == 0
        assert results(root)["source:src.events"]["rows"] == 1
        assert [r[0] for r in lake(root)] == [1, 2, 3, 4, 5, 6]


def test_cursor_does_not_advance_when_the_sink_fails(spark, tmp_path):
    with database("postgres") as db:
        db.execute("CREATE TABLE events (id int primary key, updated_at timestamp)")
        db.execute("INSERT INTO events VALUES (1, '2026-01-01'), (2, '2026-01-02')")
        root = project(
            tmp_path / "p",
            db,
            "- {name: events, table: events, mode: incremental, cursor_column: updated_at}",
            {"bad": "{{ config(materialized='table') }}\n"
             "select id, 1 / (id - id) as boom from {{ source('src', 'events') }}\n"},
        )
        assert rivc(root, "run").exit_code == 1
        shown = json.loads(rivc(root, "state", "show", "--json").output)
        assert shown["cursors"] == []


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
            {"payments_copy": "{{ config(materialized='table') }}\n"
             "select id, amount from {{ source('src', 'payments') }}\n"},
        )
        # Chunks 0-1 (ids 1-49) are read; chunks 2-3 fail on id 80's division by zero.
        assert rivc(root, "run").exit_code == 1
        res = results(root)["source:src.payments"]
        assert res["status"] == "error" and "division by zero" in res["error"].lower()
        staged = sorted(p.name for p in (root / ".rivc/extract/src.payments").iterdir())
        assert staged == ["chunks-000000-000001"]
        # Fix the row, and delete the rows already extracted: the resumed run must take them from
        # its checkpoint, not from the database. A new row lands in a new chunk.
        db.execute("UPDATE payments SET d = 1 WHERE id = 80")
        db.execute("DELETE FROM payments WHERE id < 50")
        db.execute("INSERT INTO payments VALUES (1000, 1, 1)")
        assert rivc(root, "run").exit_code == 0
        table = DeltaTable(str(root / "warehouse/payments_copy")).to_pyarrow_table()
        assert sorted(table.column("id").to_pylist()) == [*range(1, 101), 1000]
        assert "sparse key range" in results(root)["source:src.payments"]["message"]
        assert not (root / ".rivc/extract/src.payments").exists()  # committed: cleaned up
