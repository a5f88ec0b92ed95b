"""A logical slot read through SQL, on a logical-WAL cluster of the tests' own: the snapshot and
the stream together hold every change exactly once while writers keep writing (some of them in
a transaction still open when the snapshot is taken), the slot moves only forward, and a server
without wal_level = logical is refused by name."""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

from rivc.adapters.connectors.postgres.slot import LogicalSlot, Visibility, snapshot
from rivc.compiler.errors import ConnectorError

pytestmark = pytest.mark.integration


def connect(port: int) -> psycopg.Connection:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
    )


def test_the_snapshot_and_the_stream_hold_every_change_once(logical_pg):
    con = connect(logical_pg)
    con.execute("DROP TABLE IF EXISTS snap_t")
    con.execute("CREATE TABLE snap_t (id int PRIMARY KEY, v int)")
    con.execute("INSERT INTO snap_t SELECT g, 0 FROM generate_series(1, 1000) g")
    slot = LogicalSlot(con, "snap_slot", "snap_pub")
    slot.ensure(["public.snap_t"], create_slot=True, create_publication=True)
    stop, opened = threading.Event(), threading.Event()

    def write() -> None:
        rnd, next_id = random.Random(7), 1001
        with connect(logical_pg) as w:
            while not stop.is_set():
                op = rnd.random()
                if op < 0.4:
                    w.execute("INSERT INTO snap_t VALUES (%s, 0)", (next_id,))
                    next_id += 1
                elif op < 0.8:
                    w.execute(
                        "UPDATE snap_t SET v = v + 1 WHERE id = %s", (rnd.randint(1, next_id),)
                    )
                else:
                    w.execute("DELETE FROM snap_t WHERE id = %s", (rnd.randint(1, next_id),))

    def hold_open() -> None:  # a transaction running while the snapshot is taken
        with connect(logical_pg) as w, w.transaction():
            w.execute("UPDATE snap_t SET v = -100 WHERE id = 1")
            opened.set()
            time.sleep(0.5)

    writers = [threading.Thread(target=write), threading.Thread(target=hold_open)]
    try:
        for t in writers:
            t.start()
        opened.wait(5)
        time.sleep(0.1)
        with connect(logical_pg) as reader:
            seen, rows = snapshot(reader, "SELECT id, v FROM snap_t")
        time.sleep(0.3)
        stop.set()
        for t in writers:
            t.join()
        final = dict(con.execute("SELECT id, v FROM snap_t").fetchall())

        state = {r[0]: r[1] for r in rows}
        skipped = applied = 0
        end = 0
        held_open_applied = False  # running at the snapshot: from the stream
        for txn in slot.changes(0, slot.current()):
            end = txn.end_lsn
            if seen.holds(txn.xid):
                skipped += 1
                continue
            applied += 1
            for change in txn.changes:
                if change.op == "insert":
                    key, value = int(change.after[0]), int(change.after[1])
                    assert key not in state, f"insert {key} twice"
                    state[key] = value
                elif change.op == "update":
                    key = int(change.after[0])
                    assert key in state, f"update of {key}, which is not there"
                    state[key] = int(change.after[1])
                    held_open_applied |= state[key] == -100
                else:
                    key = int(change.before[0])
                    assert state.pop(key, None) is not None, f"delete of {key}, which is not there"
        assert skipped > 0 and applied > 0 and len(seen.running) > 0
        assert state == final
        assert held_open_applied
        # the slot moves forward only, to what the caller says it holds
        before = slot.confirmed()
        slot.advance(end)
        assert slot.confirmed() == end > before
        slot.advance(before)
        assert slot.confirmed() == end
        assert list(slot.changes(end, slot.current())) == []
        assert slot.lag_bytes() is not None
    finally:
        stop.set()
        slot.drop()
        con.execute("DROP TABLE snap_t")
        con.close()
    with connect(logical_pg) as check:
        assert check.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


def test_visibility_follows_pg_current_snapshot():
    seen = Visibility.parse("100:105:101,103")
    assert [x for x in range(98, 108) if seen.holds(x)] == [98, 99, 100, 102, 104]
    wrapped = Visibility.parse(f"{(1 << 32) + 5}:{(1 << 32) + 9}:")
    assert wrapped.holds(6) and wrapped.holds(0xFFFFFFF0) and not wrapped.holds(9)


def test_a_server_that_cannot_decode_is_refused_by_name():
    with psycopg.connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True
    ) as con:
        if con.execute("SHOW wal_level").fetchone()[0] == "logical":
            pytest.skip("the machine's server decodes")
        with pytest.raises(ConnectorError, match="wal_level is replica: change data capture needs"):
            LogicalSlot(con, "never", "never").ensure(["public.x"], True, True)
