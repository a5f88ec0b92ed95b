"""postgres-cdc end to end, on a logical-WAL cluster of the tests' own: a snapshot, then inserts,
updates (of a TOASTed column and around it), deletes and a large transaction, landed batch by
batch and merged into Delta and Iceberg by unwrap_cdc; kills after landing and before the slot
advances; the tables equal the source table key by key (read with deltalake and pyiceberg),
and the slot never confirms past what the landing table holds."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from rivc.adapters.connectors.postgres.pgoutput import lsn_int
from rivc_testing import (
    assert_merged_once,
    busy_writer,
    iceberg_catalog,
    landed_versions,
    rivc,
    run_rivc,
    runs_while_busy,
    start_rivc,
    wait_for,
    write_files,
)

pytestmark = pytest.mark.integration

SOURCES = """
sources:
  - name: pg
    connector: postgres-cdc
    connection: db
    config: {slot_name: rivc_test_cdc, publication_name: rivc_test_pub}
    tables:
      - {name: orders, table: public.cdc_orders}
"""
SINKS = """
sinks:
  - name: lake
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: delta
    config: {table_uri: out/orders, mode: merge, merge_keys: [id]}
  - name: ice
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: iceberg
    config: {namespace: cdc, table: orders, mode: upsert, key_fields: [id]}
  - name: lake_history
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: delta
    config: {table_uri: out/history, mode: scd2, merge_keys: [id]}
  - name: ice_history
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: iceberg
    config: {namespace: cdc, table: history, mode: scd2, key_fields: [id]}
  - name: mirror
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: postgres
    config: {connection: db, table: mirror.cdc_orders, mode: upsert, key_columns: [id]}
"""


def project(root: Path, port: int, sources: str, sinks: str) -> Path:
    """A project at `root`, named after it, on the logical cluster: its sources and sinks."""
    return write_files(
        root,
        {
            "rivc_project.yml": f"name: {root.name}\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: 127.0.0.1, "
            f"port: {port}, user: postgres, database: postgres}}\n",
            "sources/s.yml": sources,
            "sinks/out.yml": sinks,
        },
    )


def captured_source(name: str, slot: str, tables: dict[str, str]) -> str:
    """A postgres-cdc source `name` of `tables` (name -> database table) through slot and
    publication `slot`."""
    listed = "".join(f"      - {{name: {n}, table: {t}}}\n" for n, t in tables.items())
    return (
        f"sources:\n  - name: {name}\n    connector: postgres-cdc\n    connection: db\n"
        f"    config: {{slot_name: {slot}, publication_name: {slot}}}\n    tables:\n{listed}"
    )


def connect(port: int) -> psycopg.Connection:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
    )


def source_rows(con: psycopg.Connection) -> dict[int, tuple]:
    rows = con.execute("SELECT id, status, amount, updated, body FROM cdc_orders").fetchall()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


def delta_rows(root) -> dict[int, tuple]:
    table = DeltaTable(str(root / "out/orders")).to_pyarrow_table().to_pylist()
    return {r["id"]: (r["status"], r["amount"], r["updated"], r["body"]) for r in table}


def iceberg_rows(root) -> dict[int, tuple]:
    table = iceberg_catalog(root).load_table("cdc.orders").scan().to_arrow().to_pylist()
    return {r["id"]: (r["status"], r["amount"], r["updated"], r["body"]) for r in table}


def mirror_rows(con: psycopg.Connection) -> dict[int, tuple]:
    """The postgres sink's table, in the same database."""
    rows = con.execute("SELECT id, status, amount, updated, body FROM mirror.cdc_orders")
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows.fetchall()}


def landed_history(root) -> set[tuple]:
    return landed_versions(
        root, "pg.orders", lambda i: (i["status"], i["amount"], i["updated"], i["body"])
    )


def history_rows(rows: list[dict]) -> set[tuple]:
    return {
        (
            r["id"],
            (r["status"], r["amount"], r["updated"], r["body"]),
            r["valid_from"],
            r["valid_to"],
            r["is_current"],
        )
        for r in rows
    }


def histories(root) -> tuple[set[tuple], set[tuple]]:
    """The scd2 sinks' tables: the Delta one read with deltalake, the Iceberg one with pyiceberg."""
    delta = DeltaTable(str(root / "out/history")).to_pyarrow_table().to_pylist()
    ice = iceberg_catalog(root).load_table("cdc.history").scan().to_arrow().to_pylist()
    return history_rows(delta), history_rows(ice)


def confirmed_of(con: psycopg.Connection, slot: str) -> int:
    row = con.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return lsn_int(row[0])


def confirmed(con: psycopg.Connection) -> int:
    return confirmed_of(con, "rivc_test_cdc")


def landed_lsn_of(root, table: str) -> int:
    dt = DeltaTable(str(root / "warehouse/_rivc/landing" / table))
    for entry in dt.history():
        if entry.get("rivc"):
            return int(json.loads(entry["rivc"])["position"]["cdc"]["lsn"])
    raise AssertionError("no landed position")


def landed_lsn(root) -> int:
    return landed_lsn_of(root, "pg.orders")


@pytest.fixture
def capture(logical_pg):
    """capture(slot, *tables): a connection to the logical cluster with `tables` dropped first;
    after the test, slot and publication (named `slot` unless given) and `tables` are dropped."""
    made: list[tuple[psycopg.Connection, str, str, tuple[str, ...]]] = []

    def open_(slot: str, *tables: str, publication: str | None = None) -> psycopg.Connection:
        con = connect(logical_pg)
        con.execute(f"DROP TABLE IF EXISTS {', '.join(tables)}")
        made.append((con, slot, publication or slot, tables))
        return con

    yield open_
    for con, slot, publication, tables in made:
        con.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        )
        con.execute(f"DROP PUBLICATION IF EXISTS {publication}")
        con.execute(f"DROP TABLE IF EXISTS {', '.join(tables)}")
        con.close()


@pytest.fixture
def orders(capture):
    con = capture("rivc_test_cdc", "cdc_orders", publication="rivc_test_pub")
    con.execute(
        "CREATE TABLE cdc_orders (id int PRIMARY KEY, status text, amount numeric(10, 2), "
        "updated timestamptz, body text)"
    )
    con.execute(
        "INSERT INTO cdc_orders SELECT g, 'placed', g * 1.25, "
        "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute', 'b' || g "
        "FROM generate_series(1, 2000) g"
    )
    yield con


def test_changes_land_once_and_merge_into_delta_and_iceberg_across_kills(
    tmp_path, orders, logical_pg, monkeypatch
):
    from rivc.adapters.ingest import changes

    monkeypatch.setattr(changes, "ROWS_PER_FILE", 700)  # the snapshot's 2000 rows: three files
    con = orders
    con.execute("DROP SCHEMA IF EXISTS mirror CASCADE")  # the postgres sink's, created by it
    root = project(tmp_path / "cdc", logical_pg, SOURCES, SINKS)
    first = rivc(root, "run")
    assert first.exit_code == 0, first.output
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(con)
    assert len(delta_rows(root)) == 2000
    snapshot = DeltaTable(str(root / "warehouse/_rivc/landing/pg.orders"))
    files = snapshot.to_pyarrow_dataset().get_fragments()
    assert sorted(f.count_rows() for f in files) == [600, 700, 700]  # written as read

    big = "SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g"
    con.execute(f"UPDATE cdc_orders SET body = ({big}) WHERE id = 5")
    con.execute(
        "UPDATE cdc_orders SET status = 'shipped', amount = 99999999.99 WHERE id = 5"
    )  # body TOASTed, unchanged
    con.execute(
        "INSERT INTO cdc_orders VALUES (5001, 'new', NULL, NULL, NULL), (5002, 'x', -0.01, '9999-12-31 23:59:59.999999+00', '')"
    )
    con.execute("DELETE FROM cdc_orders WHERE id BETWEEN 10 AND 19")
    with con.transaction():  # one large transaction: never split across batches
        con.execute("UPDATE cdc_orders SET amount = amount + 1 WHERE id > 1000")
        con.execute(
            "INSERT INTO cdc_orders SELECT g, 'bulk', 1, now(), 'x' FROM generate_series(6000, 55999) g"
        )
    con.execute("UPDATE cdc_orders SET status = 'again' WHERE id = 5001")
    con.execute("UPDATE cdc_orders SET id = 90000 WHERE id = 30")  # a moved key: 30 goes
    con.execute("UPDATE cdc_orders SET id = 90001, status = 'moved' WHERE id = 31")

    killed = run_rivc(root, "before-slot-advance")  # landed, the slot not moved: read again
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert confirmed(con) <= landed_lsn(root)
    again = run_rivc(root)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    want = source_rows(con)
    assert delta_rows(root) == want == iceberg_rows(root) == mirror_rows(con)
    assert want[5][0] == "shipped" and len(want[5][3]) == 12_800  # the TOASTed body carried over
    assert want[5002][1] == Decimal("0.99")  # -0.01, then the bulk update
    assert confirmed(con) == landed_lsn(root)

    con.execute("UPDATE cdc_orders SET status = 'late' WHERE id < 100")
    killed = run_rivc(root, "after-landing")  # landed, no sink ran
    assert killed.returncode == -9
    assert rivc(root, "run").exit_code == 0
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(con)
    con.execute("UPDATE cdc_orders SET amount = 0 WHERE id BETWEEN 6000 AND 6100")
    con.execute("DELETE FROM cdc_orders WHERE id BETWEEN 6101 AND 6200")
    killed = run_rivc(root, "between-sinks")  # one consumer committed, the others not yet
    assert killed.returncode == -9
    assert rivc(root, "run").exit_code == 0
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(con)
    history = landed_history(root)
    assert histories(root) == (history, history)  # every version once, across both kills
    current = {k: v for k, v, _, _, live in history if live}
    assert current == source_rows(con)
    assert sum(1 for k, *_ in history if k == 5) == 4  # the snapshot's, two updates, 'late'
    assert sum(1 for k, *_ in history if k == 6000) == 2  # the bulk insert, then amount 0
    landing = DeltaTable(str(root / "warehouse/_rivc/landing/pg.orders"))
    landed_seq = max(landing.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())
    quiet = rivc(root, "run")  # nothing new: no batch, nothing delivered
    assert quiet.exit_code == 0 and "no new changes" in quiet.output

    status = rivc(root, "cdc", "status", "--json")
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.output)["cdc"]
    assert row["confirmed"] == row["held"] and row["slot"] == "rivc_test_cdc"
    # the log kept after the last run, in the record: at most what the server keeps now (the
    # slot has not moved since; the server's log only grows)
    (source,) = json.loads(rivc(root, "state", "show", "--json").output)["sources"]
    ran = json.loads(rivc(root, "metrics", "--json").output)["node runs"]
    recorded = [r["log_behind"] for r in ran if r["node"] == source["source"]][0]
    assert source["log_behind"] == recorded and 0 <= recorded <= row["lag_bytes"]

    dropped = rivc(root, "cdc", "drop", "pg")
    assert dropped.exit_code == 0 and "dropped slot rivc_test_cdc" in dropped.output
    con.execute("DELETE FROM cdc_orders WHERE id = 20")  # while no slot keeps the log
    gap = rivc(root, "run")
    assert gap.exit_code == 1 and "the log between is gone" in gap.output
    refreshed = rivc(root, "run", "--full-refresh")
    assert refreshed.exit_code == 0, refreshed.output
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(con)
    delta_history, ice_history = histories(root)
    assert delta_history == ice_history
    # the new snapshot follows the landed history: what was current ends where it begins
    base = landed_seq + 1  # after every landed change, the last deletes included
    assert {h for h in history if not h[4]} < delta_history
    assert {(k, v, s, base, False) for k, v, s, _, live in history if live} < delta_history
    assert {k: v for k, v, _, _, live in delta_history if live} == source_rows(con)
    assert not any(k == 20 and live for k, _, _, _, live in delta_history)  # deleted unseen


def test_a_partial_selection_keeps_the_log_for_the_table_it_left_out(
    tmp_path, logical_pg, capture, monkeypatch
):
    """Two tables, one slot: a run of one table's sink moves the slot only as far as the other
    table holds, so the other's changes wait in the log and land once when it runs. A run of
    both reads the slot once for the two (each run here reads it once)."""
    from rivc.adapters.connectors.postgres.slot import LogicalSlot

    reads: list[str] = []
    messages = LogicalSlot.messages
    monkeypatch.setattr(
        LogicalSlot, "messages", lambda self, upto: reads.append(self.slot) or messages(self, upto)
    )
    con = capture("rivc_test_two", "cdc_a", "cdc_b")
    for t in ("cdc_a", "cdc_b"):
        con.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        con.execute(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 100) g")
    sources = captured_source("two", "rivc_test_two", {"a": "public.cdc_a", "b": "public.cdc_b"})
    sinks = "sinks:\n" + "".join(
        f"  - name: lake_{t}\n    from: source:two.{t}\n"
        "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
        f"    connector: delta\n    config: {{table_uri: out/{t}, mode: merge, merge_keys: [id]}}\n"
        for t in ("a", "b")
    )
    root = project(tmp_path / "two", logical_pg, sources, sinks)

    def rows(t: str) -> dict[int, str]:
        return {
            r["id"]: r["v"]
            for r in DeltaTable(str(root / f"out/{t}")).to_pyarrow_table().to_pylist()
        }

    def table(t: str) -> dict[int, str]:
        return dict(con.execute(f"SELECT id, v FROM cdc_{t}").fetchall())

    assert rivc(root, "run").exit_code == 0
    assert reads == ["rivc_test_two"]  # the log after both snapshots, read once
    con.execute("UPDATE cdc_a SET v = 'a2' WHERE id <= 10")
    con.execute("UPDATE cdc_b SET v = 'b2' WHERE id <= 10")
    with con.transaction():  # one transaction of both tables
        con.execute("UPDATE cdc_a SET v = 'a3' WHERE id = 11")
        con.execute("DELETE FROM cdc_b WHERE id > 90")
    only_a = rivc(root, "run", "--select", "lake_a")
    assert only_a.exit_code == 0, only_a.output
    assert rows("a") == table("a") and rows("b") != table("b")
    con.execute("UPDATE cdc_b SET v = 'b3' WHERE id = 1")
    con.execute("UPDATE cdc_a SET v = 'a4' WHERE id = 1")
    reads.clear()
    both = rivc(root, "run", "--threads", "2")  # the two tables at once: one reads for both
    assert both.exit_code == 0, both.output
    assert reads == ["rivc_test_two"]
    assert rows("a") == table("a") and rows("b") == table("b")
    held = []
    for t in ("a", "b"):
        dt = DeltaTable(str(root / f"warehouse/_rivc/landing/two.{t}"))
        entry = next(e for e in dt.history() if e.get("rivc"))
        held.append(int(json.loads(entry["rivc"])["position"]["cdc"]["lsn"]))
    slot = con.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'rivc_test_two'"
    ).fetchone()[0]
    assert lsn_int(slot) == min(held)


def test_edge_values_from_the_log_are_exact_or_refused_and_a_lost_rivc_lands_nothing_twice(
    tmp_path, logical_pg, capture
):
    """NULL-looking text, empty text, NaN and ±Infinity, a time zone other than UTC, through
    the snapshot and the log, read back with deltalake; a lost .rivc/ resumes from the landing
    table; a numeric past decimal(38) and an infinite date are refused naming the column."""
    import math
    import shutil
    from datetime import UTC, datetime

    con = capture("rivc_test_edge", "cdc_edge")
    con.execute(
        "CREATE TABLE cdc_edge (id int PRIMARY KEY, t text, f float8, n numeric(38, 10), "
        "ts timestamptz, d date, big numeric)"
    )
    con.execute(
        "INSERT INTO cdc_edge VALUES (1, 'NULL', 'NaN', 12345678901234567890.0123456789, "
        "'2024-03-01 12:00:00+05:30', '0001-01-01', 1), (2, '', 'Infinity', -0.0000000001, NULL, "
        "'9999-12-31', NULL)"
    )
    sources = (
        "sources:\n  - name: e\n    connector: postgres-cdc\n    connection: db\n"
        "    config: {slot_name: rivc_test_edge, publication_name: rivc_test_edge}\n"
        "    tables:\n      - name: t\n        table: public.cdc_edge\n"
        "        columns: {id: int, t: string, f: double, n: 'decimal(38,10)', ts: timestamp,"
        " d: date, big: 'decimal(38,0)'}\n"
    )
    sinks = (
        "sinks:\n  - name: lake\n    from: source:e.t\n"
        "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
        "    connector: delta\n    config: {table_uri: out/e, mode: merge, merge_keys: [id]}\n"
    )
    root = project(tmp_path / "edge", logical_pg, sources, sinks)

    def rows() -> dict[int, dict]:
        table = DeltaTable(str(root / "out/e")).to_pyarrow_table().to_pylist()
        return {r["id"]: r for r in table}

    assert rivc(root, "run").exit_code == 0
    con.execute(
        "INSERT INTO cdc_edge VALUES (3, 'None', '-Infinity', 0, "
        "'1999-12-31 23:59:59.999999-08', '2000-02-29', 99999999999999999999999999999999999999)"
    )
    con.execute("UPDATE cdc_edge SET t = NULL WHERE id = 2")
    shutil.rmtree(root / ".rivc")  # the landing tables hold the positions
    assert rivc(root, "run").exit_code == 0
    got = rows()
    assert got[1]["t"] == "NULL" and math.isnan(got[1]["f"])
    assert got[1]["n"] == Decimal("12345678901234567890.0123456789")
    assert got[1]["ts"] == datetime(2024, 3, 1, 6, 30, tzinfo=UTC)
    assert str(got[1]["d"]) == "0001-01-01" and str(got[2]["d"]) == "9999-12-31"
    assert got[2]["t"] is None and got[2]["f"] == math.inf
    assert got[2]["n"] == Decimal("-0.0000000001") and got[2]["ts"] is None
    assert got[3]["t"] == "None" and got[3]["f"] == -math.inf
    assert got[3]["ts"] == datetime(2000, 1, 1, 7, 59, 59, 999999, tzinfo=UTC)
    assert got[3]["big"] == Decimal("9" * 38)
    shutil.rmtree(root / ".rivc")
    quiet = rivc(root, "run")
    assert quiet.exit_code == 0 and "no new changes" in quiet.output
    assert len(rows()) == 3

    con.execute("INSERT INTO cdc_edge (id, big) VALUES (4, 1e40)")
    refused = rivc(root, "run")
    assert refused.exit_code == 1 and "big" in refused.output
    assert len(rows()) == 3  # nothing of the refused batch reached the sink


def test_a_truncate_deletes_every_row_it_took_in_its_place(tmp_path, logical_pg, capture):
    """A truncate lands as a delete of every row the table held, between the changes before
    and after it; the merge equals the table and the history ends every earlier version there.
    A table without a primary key cannot be emptied key by key: refused by name."""
    con = capture("rivc_test_trunc", "cdc_t", "cdc_nokey")
    con.execute("CREATE TABLE cdc_t (id int PRIMARY KEY, v text)")
    con.execute("CREATE TABLE cdc_nokey (v text)")
    con.execute("ALTER TABLE cdc_nokey REPLICA IDENTITY FULL")  # published, it keeps its writes
    con.execute("INSERT INTO cdc_t SELECT g, 'v' || g FROM generate_series(1, 50) g")
    tables = {"t": "public.cdc_t", "nokey": "public.cdc_nokey"}
    sources = captured_source("t", "rivc_test_trunc", tables)
    unwrap = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
    sinks = (
        f"sinks:\n  - name: lake\n    from: source:t.t\n{unwrap}"
        "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n"
        f"  - name: history\n    from: source:t.t\n{unwrap}"
        "    connector: delta\n    config: {table_uri: out/h, mode: scd2, merge_keys: [id]}\n"
    )
    root = project(tmp_path / "trunc", logical_pg, sources, sinks)

    def table() -> dict[int, str]:
        return dict(con.execute("SELECT id, v FROM cdc_t").fetchall())

    assert rivc(root, "run").exit_code == 0
    con.execute("INSERT INTO cdc_t VALUES (51, 'before')")
    con.execute("UPDATE cdc_t SET v = 'changed' WHERE id = 1")
    con.execute("TRUNCATE cdc_t")
    con.execute("INSERT INTO cdc_t VALUES (1, 'again'), (2, 'new')")
    con.execute("UPDATE cdc_t SET v = 'newer' WHERE id = 2")
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    merged = DeltaTable(str(root / "out/t")).to_pyarrow_table().to_pylist()
    assert {r["id"]: r["v"] for r in merged} == table() == {1: "again", 2: "newer"}
    history = DeltaTable(str(root / "out/h")).to_pyarrow_table().to_pylist()
    live = {r["id"]: r["v"] for r in history if r["is_current"]}
    assert live == table()
    ended = {r["valid_to"] for r in history if r["v"] in ("changed", "before", "v3")}
    assert len(ended) == 1  # the truncate's place in the log
    (cut,) = ended
    assert all(r["valid_from"] > cut for r in history if r["v"] in ("again", "new", "newer"))
    assert len(history) == 50 + 1 + 1 + 3  # the snapshot, 51, 'changed', then after

    con.execute("TRUNCATE cdc_nokey")
    refused = rivc(root, "run")
    assert refused.exit_code == 1
    assert "cdc_nokey was truncated and has no primary key" in refused.output


def test_changes_while_the_snapshot_reads_are_neither_lost_nor_doubled(
    tmp_path, logical_pg, capture
):
    """A writer commits updates, inserts and deletes all through the first run (its snapshot
    of 50,000 rows) and the second: the merged table ends equal to the source, and the landed
    changes hold each committed insert once."""
    con = capture("rivc_test_busy", "cdc_busy")
    con.execute("CREATE TABLE cdc_busy (id int PRIMARY KEY, v int)")
    con.execute("INSERT INTO cdc_busy SELECT g, 0 FROM generate_series(1, 50000) g")
    sources = captured_source("pg", "rivc_test_busy", {"t": "public.cdc_busy"})
    root = project(
        tmp_path / "busy",
        logical_pg,
        sources,
        "sinks:\n  - name: lake\n    from: source:pg.t\n"
        "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
        "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n",
    )

    def step(mine, key: int, new: int, gone: int) -> None:
        mine.execute("UPDATE cdc_busy SET v = v + 1 WHERE id = %s", (key,))
        mine.execute("INSERT INTO cdc_busy VALUES (%s, 1)", (new,))
        mine.execute("DELETE FROM cdc_busy WHERE id = %s", (gone,))

    runs_while_busy(root, lambda: connect(logical_pg), step)
    want = dict(con.execute("SELECT id, v FROM cdc_busy").fetchall())
    assert_merged_once(root, "out/t", "pg.t", want)


def test_an_added_column_flows_to_the_sinks_that_evolve_and_other_shape_changes_are_refused(
    tmp_path, logical_pg, capture
):
    """A column added to the source table lands from the first change that has it (older
    versions hold NULL) and reaches the sinks with `schema_evolution: add_columns`; a strict sink
    refuses it by name. A column added with a default (the rows there take it without a change
    in the log) and a dropped column are refused by name, and a full refresh takes them."""
    con = capture("rivc_test_shape", "cdc_shape")
    con.execute("CREATE TABLE cdc_shape (id int PRIMARY KEY, v text)")
    con.execute("INSERT INTO cdc_shape VALUES (1, 'v1'), (2, 'v2'), (3, 'v3')")
    sources = captured_source("s", "rivc_test_shape", {"t": "public.cdc_shape"})
    unwrap = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
    evolving = (
        f"sinks:\n  - name: lake\n    from: source:s.t\n{unwrap}    connector: delta\n"
        "    config: {table_uri: out/t, mode: merge, merge_keys: [id], "
        "schema_evolution: add_columns}\n"
        f"  - name: history\n    from: source:s.t\n{unwrap}    connector: delta\n"
        "    config: {table_uri: out/h, mode: scd2, merge_keys: [id], "
        "schema_evolution: add_columns}\n"
        f"  - name: ice\n    from: source:s.t\n{unwrap}    connector: iceberg\n"
        "    config: {namespace: shape, table: t, mode: upsert, key_fields: [id], "
        "schema_evolution: add_columns}\n"
        f"  - name: ice_history\n    from: source:s.t\n{unwrap}    connector: iceberg\n"
        "    config: {namespace: shape, table: h, mode: scd2, key_fields: [id], "
        "schema_evolution: add_columns}\n"
    )
    strict = (
        f"  - name: strict\n    from: source:s.t\n{unwrap}    connector: delta\n"
        "    config: {table_uri: out/strict, mode: merge, merge_keys: [id]}\n"
    )
    root = project(tmp_path / "shape", logical_pg, sources, evolving + strict)

    def table() -> dict[int, tuple]:
        rows = con.execute("SELECT * FROM cdc_shape").fetchall()
        return {r[0]: tuple(r[1:]) for r in rows}

    def merged(rows: list[dict]) -> dict[int, tuple]:
        names = [c for c in rows[0] if c != "id"]
        return {r["id"]: tuple(r[c] for c in names) for r in rows}

    def delta(path: str) -> list[dict]:
        return DeltaTable(str(root / path)).to_pyarrow_table().to_pylist()

    assert rivc(root, "run").exit_code == 0
    con.execute("INSERT INTO cdc_shape VALUES (4, 'before the column')")
    con.execute("ALTER TABLE cdc_shape ADD COLUMN note text")
    con.execute("INSERT INTO cdc_shape VALUES (5, 'v5', 'n5')")
    con.execute("UPDATE cdc_shape SET note = 'n1' WHERE id = 1")
    con.execute("UPDATE cdc_shape SET v = 'v2 again' WHERE id = 2")
    con.execute("DELETE FROM cdc_shape WHERE id = 3")
    mixed = rivc(root, "run")
    assert mixed.exit_code == 1  # the strict sink only
    assert "note" in mixed.output and "schema_evolution" in mixed.output, mixed.output
    want = table()
    assert want[1] == ("v1", "n1") and want[4] == ("before the column", None)
    assert merged(delta("out/t")) == want
    ice = iceberg_catalog(root).load_table("shape.t").scan().to_arrow().to_pylist()
    assert merged(ice) == want
    history = delta("out/h")
    assert {r["id"]: (r["v"], r["note"]) for r in history if r["is_current"]} == want
    assert ("v1", None) in {(r["v"], r["note"]) for r in history if r["id"] == 1}
    assert len(history) == 3 + 1 + 1 + 2  # the snapshot, 4, 5, two updates
    ice_history = iceberg_catalog(root).load_table("shape.h").scan().to_arrow().to_pylist()
    spans = ("id", "v", "note", "valid_from", "valid_to", "is_current")
    ice_versions = {tuple(r[c] for c in spans) for r in ice_history}
    assert len(ice_history) == len(history)
    assert ice_versions == {tuple(r[c] for c in spans) for r in history}

    evolved = strict.replace("[id]}", "[id], schema_evolution: add_columns}")
    write_files(root, {"sinks/out.yml": evolving + evolved})
    caught_up = rivc(root, "run")  # its place did not move: it takes the batch now
    assert caught_up.exit_code == 0, caught_up.output
    assert merged(delta("out/strict")) == want
    con.execute("ALTER TABLE cdc_shape ADD COLUMN qty int DEFAULT 7")
    con.execute("INSERT INTO cdc_shape VALUES (6, 'v6', NULL, 1)")
    defaulted = rivc(root, "run")
    assert defaulted.exit_code == 1
    assert "column qty was added with a default" in defaulted.output, defaulted.output
    assert merged(delta("out/t")) == want  # nothing landed

    con.execute("ALTER TABLE cdc_shape DROP COLUMN qty, DROP COLUMN note")
    dropped = rivc(root, "run")
    assert dropped.exit_code == 1
    assert "column note was dropped or renamed" in dropped.output, dropped.output

    refreshed = rivc(root, "run", "--full-refresh")
    assert refreshed.exit_code == 0, refreshed.output
    want = table()
    assert {r["id"]: r["v"] for r in delta("out/t")} == {k: v[0] for k, v in want.items()}


def test_a_followed_log_reaches_the_tables_pass_by_pass_until_ctrl_c_and_across_a_kill(
    tmp_path, logical_pg, capture
):
    """A sink with a `processing_time` trigger makes `rivc run` follow the log: every pass
    lands what the log holds and every consumer below the table takes it, until Ctrl-C (exit
    130, after the pass). A kill during a followed run leaves what a batch run's kill leaves:
    the next run takes every change once."""
    import signal

    con = capture("rivc_test_follow", "cdc_follow")
    con.execute("CREATE TABLE cdc_follow (id int PRIMARY KEY, v text)")
    con.execute("INSERT INTO cdc_follow SELECT g, 'v' || g FROM generate_series(1, 100) g")
    unwrap = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
    root = project(
        tmp_path / "follow",
        logical_pg,
        captured_source("s", "rivc_test_follow", {"t": "public.cdc_follow"}),
        f"sinks:\n  - name: lake\n    from: source:s.t\n{unwrap}"
        "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n"
        '    trigger: {processing_time: "1 second"}\n'
        f"  - name: history\n    from: source:s.t\n{unwrap}"
        "    connector: delta\n    config: {table_uri: out/h, mode: scd2, merge_keys: [id]}\n",
    )

    def table() -> dict[int, str]:
        return dict(con.execute("SELECT id, v FROM cdc_follow").fetchall())

    def merged() -> dict[int, str] | None:
        if not (root / "out/t/_delta_log").exists():
            return None
        return {
            r["id"]: r["v"] for r in DeltaTable(str(root / "out/t")).to_pyarrow_table().to_pylist()
        }

    proc = start_rivc(root)
    try:
        wait_for(proc, lambda: merged() == table())  # the snapshot, in the first pass
        for n in range(3):  # changes while it follows: each reaches the table in a later pass
            con.execute(f"INSERT INTO cdc_follow VALUES ({200 + n}, 'new')")
            con.execute(f"UPDATE cdc_follow SET v = 'pass {n}' WHERE id = {n + 1}")
            con.execute(f"DELETE FROM cdc_follow WHERE id = {50 + n}")
            wait_for(proc, lambda: merged() == table())
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 130, out[-3000:]
        assert "pass " in out and "changes up to" in out
        history = DeltaTable(str(root / "out/h")).to_pyarrow_table().to_pylist()
        assert {r["id"]: r["v"] for r in history if r["is_current"]} == table()

        con.execute("UPDATE cdc_follow SET v = 'before the kill' WHERE id = 10")
        killed = start_rivc(root, "between-sinks")  # one consumer committed, the other not
        killed.communicate(timeout=180)
        assert killed.returncode == -9
        con.execute("UPDATE cdc_follow SET v = 'after the kill' WHERE id = 11")
        proc = start_rivc(root)
        wait_for(proc, lambda: merged() == table())
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 130, out[-3000:]
        history = DeltaTable(str(root / "out/h")).to_pyarrow_table().to_pylist()
        assert {r["id"]: r["v"] for r in history if r["is_current"]} == table()
        versions = landed_versions(root, "s.t", lambda i: i["v"])
        assert {(r["id"], r["v"], r["valid_from"], r["valid_to"]) for r in history} == {
            (k, v, since, until) for k, v, since, until, _ in versions
        }
        assert confirmed_of(con, "rivc_test_follow") == landed_lsn_of(root, "s.t")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_on_the_warm_server_a_failed_sibling_takes_every_change_once_when_it_recovers(
    tmp_path, logical_pg, capture
):
    """Runs through the warm server (`spark: {server: auto}`), one of two consumers failing
    run after run (its location is a file): the other keeps up, the slot keeps moving with
    what the landing table holds, and once the location is fixed the failed consumer takes
    every change it missed, once."""
    con = capture("rivc_test_warm", "cdc_warm")
    con.execute("CREATE TABLE cdc_warm (id int PRIMARY KEY, v text)")
    con.execute("INSERT INTO cdc_warm SELECT g, 'v' || g FROM generate_series(1, 100) g")
    unwrap = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
    sinks = "sinks:\n" + "".join(
        f"  - name: {name}\n    from: source:w.t\n{unwrap}    connector: delta\n"
        f"    health_check: false\n"
        f"    config: {{table_uri: {uri}, mode: merge, merge_keys: [id]}}\n"
        for name, uri in (("healthy", "out/healthy"), ("blocked", "blocker/t"))
    )
    root = project(
        tmp_path / "warm",
        logical_pg,
        captured_source("w", "rivc_test_warm", {"t": "cdc_warm"}),
        sinks,
    )
    profile = root / "profiles.yml"
    profile.write_text(profile.read_text() + "  spark: {server: auto, server_idle: 10 minutes}\n")
    (root / "blocker").write_text("a file where the sink's table should be")

    def rows(uri: str) -> list[tuple[int, str]]:
        table = DeltaTable(str(root / uri)).to_pyarrow_table()
        return sorted(
            zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True)
        )

    def table() -> list[tuple[int, str]]:
        return sorted(con.execute("SELECT id, v FROM cdc_warm").fetchall())

    try:
        for round_ in range(3):
            done = run_rivc(root)  # each run a process of its own, as a user's
            assert done.returncode == 1, done.stdout[-3000:]  # the blocked sink fails each time
            assert rows("out/healthy") == table()
            assert confirmed_of(con, "rivc_test_warm") == landed_lsn_of(root, "w.t")
            con.execute(f"UPDATE cdc_warm SET v = 'r{round_}' WHERE id % 7 = {round_}")
            con.execute(f"DELETE FROM cdc_warm WHERE id = {10 + round_}")
            con.execute(f"INSERT INTO cdc_warm VALUES ({200 + round_}, 'new')")
        (root / "blocker").unlink()
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout[-3000:]
        assert rows("out/healthy") == table() == rows("blocker/t")
        assert not (root / ".rivc/spark.log").exists()  # every run went through the server
        assert json.loads((root / ".rivc/server/server.json").read_text())["pid"]
    finally:
        run_rivc(root, None, "server", "stop")


REGIONS = ("Zulu", "alpha", "Ärger", "éclair", "beta")  # C order differs from a language's


def test_a_snapshot_killed_between_its_parts_reads_on_and_meets_the_log_once(
    tmp_path, logical_pg, capture
):
    """A 60,000-row snapshot in parts of 10,000 (a key of text and int, read in the server's
    C order): three runs are killed each after landing one part while a writer commits
    updates, inserts and deletes across every key range; the next runs read on in snapshots of
    their own, and the merged table ends equal to the source, each row read or inserted once."""
    con = capture("rivc_test_parts", "cdc_parts")
    con.execute("CREATE TABLE cdc_parts (region text, id int, v int, PRIMARY KEY (region, id))")
    con.execute(
        "INSERT INTO cdc_parts SELECT (%s::text[])[1 + g %% 5], g, 0 "
        "FROM generate_series(1, 60000) g",
        (list(REGIONS),),
    )
    sources = captured_source("pg", "rivc_test_parts", {"t": "public.cdc_parts"}).replace(
        "publication_name: rivc_test_parts}",
        "publication_name: rivc_test_parts, snapshot_chunk_size: 10000}",
    )
    root = project(
        tmp_path / "parts",
        logical_pg,
        sources,
        "sinks:\n  - name: lake\n    from: source:pg.t\n"
        "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
        "    connector: delta\n"
        "    config: {table_uri: out/t, mode: merge, merge_keys: [region, id]}\n",
    )

    def step(mine, key: int, new: int, gone: int) -> None:
        mine.execute("UPDATE cdc_parts SET v = v + 1 WHERE id = %s", (key,))
        mine.execute("INSERT INTO cdc_parts VALUES (%s, %s, 1)", (REGIONS[new % 5], new))
        mine.execute("DELETE FROM cdc_parts WHERE id = %s", (gone,))

    def held() -> dict:
        dt = DeltaTable(str(root / "warehouse/_rivc/landing/pg.t"))
        return json.loads(dt.history(limit=1)[0]["rivc"])["position"]["cdc"]

    with busy_writer(lambda: connect(logical_pg), step) as written:
        for n in (1, 2, 3):
            killed = run_rivc(root, "between-chunks:pg.t")
            assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
            cdc = held()
            assert cdc["reading"] and len(cdc["parts"]) == n
            assert confirmed_of(con, "rivc_test_parts") <= int(cdc["lsn"])
        during = len(written)
        done = run_rivc(root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert during > 20
    cdc = held()
    assert "reading" not in cdc and len(cdc["parts"]) == 4
    uptos = [tuple(p["upto"]) for p in cdc["parts"][:-1]]
    assert uptos == sorted(uptos) and len(set(p["visibility"] for p in cdc["parts"])) == 4
    assert rivc(root, "run").exit_code == 0  # what the writer committed after that run began
    want = {(r, i): v for r, i, v in con.execute("SELECT region, id, v FROM cdc_parts")}
    merged = DeltaTable(str(root / "out/t")).to_pyarrow_table().to_pylist()
    assert {(r["region"], r["id"]): r["v"] for r in merged} == want
    landed = DeltaTable(str(root / "warehouse/_rivc/landing/pg.t")).to_pyarrow_table().to_pylist()
    read = [(c["after"]["region"], c["after"]["id"]) for c in landed if c["op"] in ("c", "r")]
    assert len(read) == len(set(read))
    snapshot = {(c["after"]["region"], c["after"]["id"]) for c in landed if c["op"] == "r"}
    untouched = {k for k, v in want.items() if v == 0 and k[1] <= 60000}
    assert untouched <= snapshot and len(untouched) > 50000  # no range skipped
