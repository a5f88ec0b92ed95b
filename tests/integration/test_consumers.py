"""Every consumer gets every row exactly once (docs/running.md, "What each node reads").

An incremental PostgreSQL source feeds views, models and sinks of every kind. Whatever happens
between runs (a partial selection, a failed sibling, a kill, a lost or damaged state store,
another checkout, a table that lost a commit), after the next full run each sink holds each
landed row once and the merged ones hold the database's rows; checked with deltalake, pyiceberg
and pyarrow against the database itself (psycopg)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pika
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from rivc_dbs import Db, database, project
from rivc_nats import drop_stream, messages

from rivc_testing import iceberg_catalog, last_run, rivc, run_rivc

pytestmark = pytest.mark.integration
STREAM = "RIVC_TEST_CONSUMERS"
QUEUE = "rivc_test_consumers"
AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"

TABLES = """
- {name: orders, table: orders, mode: incremental, cursor_column: updated_at, unique_key: id}
"""
MODELS = {
    "stg_orders": "select id, customer_id, amount, updated_at\n"
    "from {{ source('src', 'orders') }} where amount >= 0\n",
    "customer_totals": "{{ config(materialized='table') }}\n"
    "select customer_id, count(*) as orders, sum(amount) as revenue\n"
    "from {{ ref('stg_orders') }} group by customer_id\n",
    # dbt's incremental idiom, as written
    "orders_inc": "{{ config(materialized='incremental', unique_key='id') }}\n"
    "select id, customer_id, amount, updated_at from {{ source('src', 'orders') }}\n"
    "{% if is_incremental() %}\n"
    "where updated_at > (select max(updated_at) from {{ this }})\n"
    "{% endif %}\n",
}
SINKS = """
sinks:
  - {name: a_append, from: source:src.orders, connector: delta,
     config: {table_uri: out/append, mode: append}}
  - {name: b_merge, from: stg_orders, connector: delta,
     config: {table_uri: out/merge, mode: merge, merge_keys: [id]}}
  - {name: c_files, from: stg_orders, connector: files,
     config: {path: out/files, format: parquet}}
  - {name: d_upsert, from: source:src.orders, connector: iceberg,
     config: {namespace: c, table: upserted, mode: upsert, key_fields: [id]}}
  - {name: e_pg_append, from: stg_orders, connector: postgres,
     config: {connection: db, table: out.appended}}
  - {name: f_pg_upsert, from: source:src.orders, connector: postgres,
     config: {connection: db, table: out.upserted, mode: upsert, key_columns: [id]}}
  - {name: g_nats, from: source:src.orders, connector: nats,
     config: {url: "nats://127.0.0.1:4222", stream: RIVC_TEST_CONSUMERS, subject: shop.orders}}
  - {name: h_mq, from: source:src.orders, connector: rabbitmq,
     config: {url: "amqp://guest:guest@127.0.0.1:5672/%2F", routing_key: rivc_test_consumers,
              queue: rivc_test_consumers}}
"""


class Shop:
    """The database side: orders inserted and updated between runs, each change with a newer
    updated_at (the cursor)."""

    def __init__(self, db: Db) -> None:
        self.db, self.next, self.clock = db, 1, 0
        db.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(12,2), "
            "updated_at timestamp)"
        )

    def _at(self) -> datetime:
        self.clock += 1
        return datetime(2026, 1, 1) + timedelta(seconds=self.clock)

    def insert(self, n: int) -> None:
        rows = []
        for _ in range(n):
            i, self.next = self.next, self.next + 1
            rows.append((i, i % 7, Decimal(i) * Decimal("1.25"), self._at()))
        self.db.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s)", rows)

    def update(self, ids: list[int]) -> None:
        for i in ids:
            self.db.execute(
                "UPDATE orders SET amount = amount + 100, updated_at = %s WHERE id = %s",
                params=(self._at(), i),
            )

    def rows(self) -> dict[int, Decimal]:
        return dict(self.query("SELECT id, amount FROM orders"))

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        conn = self.db.connect()
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()


def landed(root: Path) -> Counter[tuple[int, Decimal]]:
    """Every row version the landing table holds."""
    table = DeltaTable(str(root / "warehouse/_rivc/landing/src.orders")).to_pyarrow_table()
    return Counter(
        zip(table.column("id").to_pylist(), table.column("amount").to_pylist(), strict=True)
    )


@pytest.fixture(autouse=True)
def message_targets() -> Iterator[None]:
    """The nats sinks' stream and the rabbitmq sinks' queue, new for each test, dropped after."""
    drop_stream(STREAM)
    drop_queue(QUEUE)
    yield
    drop_stream(STREAM)
    drop_queue(QUEUE)


def drop_queue(name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()


def queued() -> Counter[tuple[int, Decimal]]:
    """Every message the rabbitmq sinks published, as (id, amount), left in the queue: read
    unacknowledged, and given back when the connection closes."""
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    out: Counter[tuple[int, Decimal]] = Counter()
    try:
        channel = conn.channel()
        while True:
            method, _, body = channel.basic_get(QUEUE, auto_ack=False)
            if method is None:
                return out
            row = json.loads(body)
            out[(row["id"], Decimal(row["amount"]))] += 1
    finally:
        conn.close()


def published() -> Counter[tuple[int, Decimal]]:
    """Every message the nats sinks published, as (id, amount)."""
    return Counter(
        (p["id"], Decimal(p["amount"]))
        for subject, _, p in messages(STREAM)
        if subject == "shop.orders"
    )


def check(root: Path, shop: Shop) -> None:
    """Each append sink holds every landed row version once; the merged sinks, the database."""
    truth = shop.rows()
    versions = landed(root)
    newest: dict[int, Decimal] = {}
    table = DeltaTable(str(root / "warehouse/_rivc/landing/src.orders")).to_pyarrow_table()
    for row in sorted(table.to_pylist(), key=lambda r: r["_rivc_batch"]):
        newest[row["id"]] = row["amount"]
    assert newest == truth  # the landing table holds the database, version by version
    assert max(versions.values()) == 1
    append = DeltaTable(str(root / "out/append")).to_pyarrow_table()
    assert Counter(
        zip(append.column("id").to_pylist(), append.column("amount").to_pylist(), strict=True)
    ) == (versions)
    merged = DeltaTable(str(root / "out/merge")).to_pyarrow_table()
    assert (
        dict(zip(merged.column("id").to_pylist(), merged.column("amount").to_pylist(), strict=True))
        == truth
    )
    assert merged.num_rows == len(truth)
    files = [
        r
        for f in sorted((root / "out/files").glob("*.parquet"))
        for r in pq.read_table(f).to_pylist()
    ]
    assert Counter((r["id"], r["amount"]) for r in files) == versions
    ice = iceberg_catalog(root).load_table("c.upserted").scan().to_arrow()
    assert (
        dict(zip(ice.column("id").to_pylist(), ice.column("amount").to_pylist(), strict=True))
        == truth
    )
    assert ice.num_rows == len(truth)
    assert Counter(shop.query("SELECT id, amount FROM out.appended")) == versions
    assert published() == versions
    assert queued() == versions
    upserted = shop.query("SELECT id, amount FROM out.upserted")
    assert dict(upserted) == truth and len(upserted) == len(truth)


def models_match(root: Path, shop: Shop) -> None:
    """The table model over the source and the dbt-style incremental model equal the same
    queries over the database."""
    truth = shop.rows()
    totals = DeltaTable(str(root / "warehouse/customer_totals")).to_pyarrow_table().to_pylist()
    expected: dict[int, tuple[int, Decimal]] = {}
    for i, amount in truth.items():
        n, total = expected.get(i % 7, (0, Decimal(0)))
        expected[i % 7] = (n + 1, total + amount)
    assert {r["customer_id"]: (r["orders"], r["revenue"]) for r in totals} == expected
    inc = DeltaTable(str(root / "warehouse/orders_inc")).to_pyarrow_table()
    assert (
        dict(zip(inc.column("id").to_pylist(), inc.column("amount").to_pylist(), strict=True))
        == truth
    )


def ok(root: Path, *args: str) -> str:
    done = rivc(root, *args)
    assert done.exit_code == 0, done.output
    return done.output


def test_partial_selections_then_a_full_run_deliver_every_row_once(spark, tmp_path):
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(20)
        root = project(tmp_path, db, TABLES, MODELS, SINKS)
        ok(root, "run")
        check(root, shop)
        models_match(root, shop)
        shop.insert(5)
        shop.update([1, 2, 3])
        ok(root, "run", "--select", "stg_orders")  # a view alone: extracts, delivers nothing
        shop.insert(4)
        shop.update([2, 21])
        ok(root, "run", "--select", "+customer_totals")  # a table and what it needs
        totals = DeltaTable(str(root / "warehouse/customer_totals")).to_pyarrow_table()
        assert sum(totals.column("orders").to_pylist()) == len(shop.rows())
        shop.insert(3)
        out = ok(root, "run", "--select", "sink:b_merge")  # one sink alone
        assert "sink:b_merge" in out and "sink:a_append" not in out
        shop.update([5])
        ok(root, "run")
        check(root, shop)
        models_match(root, shop)
        again = ok(root, "run")  # nothing new: no sink writes
        assert again.count("nothing new to deliver") == 8, again
        check(root, shop)


def test_selecting_through_an_unselected_view_extracts_and_binds_it(spark, tmp_path):
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(10)
        root = project(tmp_path, db, TABLES, MODELS, SINKS)
        out = ok(root, "run", "--select", "customer_totals")
        assert "source:src.orders" in out and "model:stg_orders" not in out
        totals = DeltaTable(str(root / "warehouse/customer_totals")).to_pyarrow_table()
        assert sum(totals.column("orders").to_pylist()) == 10
        # previews and tests read the landed table as source() does (an update of id 3 came
        # after the extraction: its landed amount is the old one)
        shop.update([3])
        shown = ok(root, "show", "source:src.orders", "--limit", "100")
        assert len([line for line in shown.splitlines() if line.strip()[:1].isdigit()]) == 10
        (root / "tests").mkdir()
        (root / "tests/updated.sql").write_text(
            "select * from {{ source('src', 'orders') }} where amount >= 100\n"
        )
        tested = rivc(root, "test", "--select", "updated")
        assert tested.exit_code == 0, tested.output  # the update is not landed yet


AS_IS = """
sinks:
  - {name: a_append, from: source:src.orders, connector: delta,
     config: {table_uri: out/append, mode: append}}
  - {name: b_files, from: source:src.orders, connector: files,
     config: {path: out/files, format: parquet}}
  - {name: c_pg, from: source:src.orders, connector: postgres,
     config: {connection: db, table: out.appended}}
  - {name: d_nats, from: source:src.orders, connector: nats,
     config: {url: "nats://127.0.0.1:4222", stream: RIVC_TEST_CONSUMERS, subject: shop.orders}}
  - {name: e_mq, from: source:src.orders, connector: rabbitmq,
     config: {url: "amqp://guest:guest@127.0.0.1:5672/%2F", routing_key: rivc_test_consumers,
              queue: rivc_test_consumers}}
"""


@pytest.mark.parametrize("fault", ["after-landing:src.orders", "between-sinks:a_append"])
def test_a_kill_after_landing_or_between_consumers_loses_and_doubles_nothing(tmp_path, fault):
    """Killed once the batch landed, or between two consumers' commits (the fault suite kills
    merges and upserts between their commits too); sinks that take the landed files as they
    are, so no run starts a JVM."""
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(15)
        root = project(tmp_path, db, TABLES, {}, AS_IS)
        assert run_rivc(root).returncode == 0
        shop.insert(5)
        shop.update([1, 4])
        killed = run_rivc(root, fault)
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        shop.insert(2)  # arrives while nothing runs
        shop.update([4])
        for _ in range(2):
            rerun = run_rivc(root)
            assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        versions = landed(root)
        assert max(versions.values()) == 1
        append = DeltaTable(str(root / "out/append")).to_pyarrow_table()
        ids, amounts = append.column("id").to_pylist(), append.column("amount").to_pylist()
        assert Counter(zip(ids, amounts, strict=True)) == versions
        rows = [
            r for f in (root / "out/files").glob("*.parquet") for r in pq.read_table(f).to_pylist()
        ]
        assert Counter((r["id"], r["amount"]) for r in rows) == versions
        assert Counter(shop.query("SELECT id, amount FROM out.appended")) == versions
        assert published() == versions
        assert queued() == versions
        newest = {
            r["id"]: r["amount"] for r in sorted(landed_rows(root), key=lambda r: r["_rivc_batch"])
        }
        assert newest == shop.rows()
        assert not (root / ".rivc/spark.log").exists()  # no JVM was started


@pytest.mark.parametrize("damage", ["emptied", "truncated", "garbage", "deleted", "lost .rivc"])
def test_a_lost_or_damaged_state_store_loses_and_doubles_nothing(spark, tmp_path, damage):
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(12)
        root = project(tmp_path, db, TABLES, MODELS, SINKS)
        ok(root, "run")
        store = root / ".rivc/state.db"
        for extra in root.glob(".rivc/state.db-*"):
            extra.unlink()  # the WAL's files go with it
        if damage == "emptied":
            store.write_bytes(b"")
        elif damage == "truncated":
            store.write_bytes(store.read_bytes()[: store.stat().st_size // 2])
        elif damage == "garbage":
            store.write_bytes(os.urandom(8192))
        elif damage == "deleted":
            store.unlink()
        else:  # the whole folder: the record, and the default Iceberg catalog with its table
            shutil.rmtree(root / ".rivc")
        shop.insert(3)
        shop.update([2])
        out = ok(root, "run")
        if damage in ("truncated", "garbage"):
            assert "moved aside" in out, out
            assert list(root.glob(".rivc/state.db.damaged-*"))
        check(root, shop)
        ok(root, "run")  # and again: the store works
        check(root, shop)


def test_a_failed_sink_on_a_full_disk_costs_its_healthy_sibling_nothing(spark, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(50)
        sinks = """
sinks:
  - {name: healthy, from: source:src.orders, connector: delta,
     config: {table_uri: out/healthy, mode: append}}
  - {name: full, from: source:src.orders, connector: delta,
     config: {table_uri: out/disk/full, mode: append}}
  - {name: full_files, from: stg_orders, connector: files,
     config: {path: out/disk/files, format: jsonl}}
"""
        root = project(tmp_path, db, TABLES, {"stg_orders": MODELS["stg_orders"]}, sinks)
        disk = root / "out/disk"
        disk.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
        try:
            filler = disk / "filler"
            with open(filler, "wb", buffering=0) as out:  # the disk is full
                try:
                    while True:
                        out.write(b"x" * 4096)
                except OSError:
                    pass
            first = rivc(root, "run")
            assert first.exit_code == 1, first.output
            shop.insert(10)
            shop.update([3])
            assert rivc(root, "run").exit_code == 1  # still full: the others go on
            healthy = DeltaTable(str(root / "out/healthy")).to_pyarrow_table()
            assert Counter(healthy.column("id").to_pylist()) == Counter(landed_ids(root))
            hidden = [p.name for p in disk.rglob(".*") if p.is_file()]
            assert hidden == [], hidden  # no half-written file left
            filler.unlink()
            ok(root, "run")
            versions = landed(root)
            for table in ("healthy", "disk/full"):
                rows = DeltaTable(str(root / "out" / table)).to_pyarrow_table()
                got = Counter(
                    zip(
                        rows.column("id").to_pylist(),
                        rows.column("amount").to_pylist(),
                        strict=True,
                    )
                )
                assert got == versions, table
            lines = [
                json.loads(line)
                for f in sorted((disk / "files").glob("*.jsonl"))
                for line in f.read_text().splitlines()
            ]
            assert Counter((r["id"], Decimal(str(r["amount"]))) for r in lines) == versions
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)


def landed_ids(root: Path) -> list[int]:
    return [i for i, _ in landed(root).elements()]


def test_two_checkouts_of_one_project_refuse_each_others_table(spark, tmp_path):
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(6)
        lake = tmp_path / "lake"
        sinks = f"""
sinks:
  - {{name: lake, from: source:src.orders, connector: delta,
     config: {{table_uri: "{lake}", mode: append}}}}
"""
        first = project(tmp_path / "one", db, TABLES, {}, sinks)
        second = project(tmp_path / "two", db, TABLES, {}, sinks)
        ok(first, "run")
        refused = rivc(second, "run")
        assert refused.exit_code == 1
        assert "written by another checkout or project" in refused.output, refused.output
        assert DeltaTable(str(lake)).to_pyarrow_table().num_rows == 6
        for root in (first, second):  # both say the table is shared: each has its own ids
            spec = (root / "sinks/out.yml").read_text()
            (root / "sinks/out.yml").write_text(
                spec.replace("mode: append}", "mode: append}, shared: true")
            )
        shop.insert(2)
        ok(second, "run")
        ok(first, "run")
        table = DeltaTable(str(lake))
        ids = Counter(table.to_pyarrow_table().column("id").to_pylist())
        # the first checkout's 6 + 2, the second's own extraction of all 8
        assert ids == Counter({**dict.fromkeys(range(1, 9), 2)})


def test_a_table_that_lost_a_commit_is_refused_until_accepted(spark, tmp_path):
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(8)
        root = project(tmp_path, db, TABLES, {}, SINKS.split("  - {name: b_merge")[0])
        ok(root, "run")
        shop.insert(4)
        ok(root, "run")
        log = sorted((root / "out/append/_delta_log").glob("*.json"))
        log[-1].unlink()  # the last commit is gone: its 4 rows with it
        shop.insert(1)
        refused = rivc(root, "run")
        assert refused.exit_code == 1
        assert "commits were removed from its log" in refused.output, refused.output
        ok(root, "state", "reset", "sink:a_append", "--yes")
        ok(root, "run")  # its place went back with the commit: the lost rows come again
        rows = DeltaTable(str(root / "out/append")).to_pyarrow_table()
        assert Counter(rows.column("id").to_pylist()) == Counter(range(1, 14))


def test_retention_folds_what_every_consumer_took_and_a_rewind_takes_it_again(spark, tmp_path):
    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(10)
        root = project(tmp_path, db, TABLES, MODELS, SINKS)
        (root / "rivc_project.yml").write_text("name: rel\nlanding_retention: 0s\n")
        ok(root, "run")
        for ids in ([1, 2], [2, 3]):
            shop.update(ids)
            shop.insert(2)
            ok(root, "run")
        shop.update([4])
        ok(root, "run", "--select", "sink:a_append")  # the others have not taken this batch
        before = landed(root)
        assert len(batches(root)) == 4
        # killed before its commit: the table is as it was
        killed = run_rivc(root, "mid-retention:src.orders", "maintain")
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        assert landed(root) == before and len(batches(root)) == 4
        out = ok(root, "maintain")
        assert "3 landed batches folded" in out, out  # up to the lowest place, not the newest
        kept = batches(root)
        assert len(kept) == 2
        folded = landed(root)
        assert sum(folded.values()) == 14 + 1  # each key once up to the fold, then batch 4
        ok(root, "run")
        check_after_fold(root, shop)
        models_match(root, shop)
        # replay: the sink takes every batch the landing table holds again
        out = ok(root, "state", "rewind", "b_merge", "--to", "start")
        assert "sink:b_merge: source:src.orders from its first batch" in out, out
        out = ok(root, "state", "rewind", "f_pg_upsert", "--to", "start")  # in _rivc_commits
        assert "sink:f_pg_upsert: source:src.orders from its first batch" in out, out
        shop.insert(1)
        ok(root, "run")
        ran = last_run(root)["results"]
        retaken = next(r for r in ran if r["node"] == "sink:f_pg_upsert")
        assert retaken["rows"] == len(shop.rows())  # every key again, not the one new row
        assert dict(shop.query("SELECT id, amount FROM out.upserted")) == shop.rows()
        merged = DeltaTable(str(root / "out/merge")).to_pyarrow_table()
        assert (
            dict(
                zip(
                    merged.column("id").to_pylist(),
                    merged.column("amount").to_pylist(),
                    strict=True,
                )
            )
            == shop.rows()
        )
        first = min(batches(root))
        ok(root, "state", "rewind", "a_append", "--to", str(first + 1))  # after the fold
        appended_before = DeltaTable(str(root / "out/append")).to_pyarrow_table().num_rows
        ok(root, "run")
        again = DeltaTable(str(root / "out/append")).to_pyarrow_table().num_rows
        assert again - appended_before == sum(landed(root).values()) - len(
            [1 for r in landed_rows(root) if r["_rivc_batch"] == first]
        )


def batches(root: Path) -> list[int]:
    return sorted({r["_rivc_batch"] for r in landed_rows(root)})


def landed_rows(root: Path) -> list[dict[str, Any]]:
    return (
        DeltaTable(str(root / "warehouse/_rivc/landing/src.orders")).to_pyarrow_table().to_pylist()
    )


def check_after_fold(root: Path, shop: Shop) -> None:
    """After a fold, the merged sinks still hold the database; the append sink holds every
    version it took before the fold plus the batches after it."""
    truth = shop.rows()
    merged = DeltaTable(str(root / "out/merge")).to_pyarrow_table()
    assert (
        dict(zip(merged.column("id").to_pylist(), merged.column("amount").to_pylist(), strict=True))
        == truth
    )
    ice = iceberg_catalog(root).load_table("c.upserted").scan().to_arrow()
    assert (
        dict(zip(ice.column("id").to_pylist(), ice.column("amount").to_pylist(), strict=True))
        == truth
    )
    append = DeltaTable(str(root / "out/append")).to_pyarrow_table()
    newest: dict[int, Decimal] = {}
    for i, a in zip(
        append.column("id").to_pylist(), append.column("amount").to_pylist(), strict=True
    ):
        newest[i] = a
    assert set(newest) == set(truth)


def test_a_project_upgraded_from_cursors_in_the_state_store_starts_at_its_cursor(tmp_path):
    """The version before landing tables kept the cursor in .rivc/state.db, and its sinks hold
    what it delivered: the first extraction into the new landing table starts there."""
    import sqlite3

    from rivc.adapters.state import MIGRATIONS

    with database("postgres") as db:
        shop = Shop(db)
        shop.insert(10)
        root = project(tmp_path, db, TABLES, {}, AS_IS)
        store = root / ".rivc/state.db"
        store.parent.mkdir(parents=True)
        old = sqlite3.connect(store)
        for number, ddl in enumerate(MIGRATIONS[:7], start=1):
            old.executescript(f"BEGIN;\n{ddl}\nPRAGMA user_version = {number};\nCOMMIT;")
        cursor = {"value": {"timestamp": "2026-01-01 00:00:06"}, "keys": [[6]]}
        old.execute(
            "INSERT INTO cursors VALUES ('source:src.orders', ?, 'r0', '2026-01-01')",
            (json.dumps(cursor),),
        )
        old.commit()
        old.close()
        first = run_rivc(root)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "from the cursor an earlier rivc kept" in first.stdout
        assert sorted(i for i, _ in landed(root)) == [7, 8, 9, 10]
        shop.insert(1)
        assert run_rivc(root).returncode == 0  # from the landing table's own position now
        assert sorted(i for i, _ in landed(root)) == [7, 8, 9, 10, 11]
