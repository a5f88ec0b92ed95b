"""pgoutput's messages from a real PostgreSQL (a cluster of the tests' own with wal_level =
logical), read through the SQL interface of a logical slot and decoded whole: inserts, updates
that leave a TOASTed column alone, REPLICA IDENTITY FULL before-images, deletes, a truncate, a
column added mid-stream, and transactions kept whole and in commit order (or given in pieces
of a size, in order, a piece never crossing what a reader holds)."""

from __future__ import annotations

import psycopg
import pytest

from rivc.adapters.connectors.postgres.pgoutput import UNCHANGED, Change, Decoder, Truncate

pytestmark = pytest.mark.integration


def peek(con: psycopg.Connection, slot: str, publication: str) -> list[bytes]:
    rows = con.execute(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
        "'proto_version', '1', 'publication_names', %s)",
        (slot, publication),
    ).fetchall()
    return [bytes(r[0]) for r in rows]


def test_a_slot_s_messages_decode_into_whole_transactions(logical_pg):
    with psycopg.connect(
        f"host=127.0.0.1 port={logical_pg} user=postgres dbname=postgres", autocommit=True
    ) as con:
        con.execute("DROP TABLE IF EXISTS cdc_items")
        con.execute("CREATE TABLE cdc_items (id int PRIMARY KEY, label text, body text)")
        con.execute("CREATE TABLE cdc_full (id int, note text)")
        con.execute("ALTER TABLE cdc_full REPLICA IDENTITY FULL")
        con.execute("CREATE PUBLICATION cdc_pub FOR TABLE cdc_items, cdc_full")
        con.execute("SELECT pg_create_logical_replication_slot('cdc_slot', 'pgoutput')")
        try:
            big = "SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g"
            with con.transaction():
                con.execute(f"INSERT INTO cdc_items VALUES (1, 'a', ({big})), (2, 'b', 'short')")
                con.execute("INSERT INTO cdc_full VALUES (7, 'x')")
            con.execute("UPDATE cdc_items SET label = 'a2' WHERE id = 1")  # body is TOASTed
            con.execute("UPDATE cdc_full SET note = 'y' WHERE id = 7")
            con.execute("DELETE FROM cdc_items WHERE id = 2")
            con.execute("TRUNCATE cdc_full")
            con.execute("ALTER TABLE cdc_items ADD COLUMN extra numeric(10, 2)")
            con.execute("INSERT INTO cdc_items VALUES (3, 'c', NULL, 1.50)")

            messages = peek(con, "cdc_slot", "cdc_pub")
            txns = list(Decoder().feed(messages))
            body = con.execute("SELECT body FROM cdc_items WHERE id = 1").fetchone()[0]
        finally:
            con.execute("SELECT pg_drop_replication_slot('cdc_slot')")
            con.execute("DROP PUBLICATION cdc_pub")
            con.execute("DROP TABLE cdc_items, cdc_full")

    shown = [
        [(getattr(c, "op", "truncate"), getattr(c, "after", None)) for c in t.changes] for t in txns
    ]
    assert [len(t.changes) for t in txns] == [3, 1, 1, 1, 1, 1], shown  # the ALTER logs nothing
    assert all(
        a.end_lsn <= b.final_lsn for a, b in zip(txns, txns[1:], strict=False)
    )  # commit order
    first = txns[0].changes
    assert [(c.op, c.relation.name) for c in first if isinstance(c, Change)] == [
        ("insert", "cdc_items"),
        ("insert", "cdc_items"),
        ("insert", "cdc_full"),
    ]
    assert first[0].after == ("1", "a", body) and len(body) == 12_800
    update = txns[1].changes[0]
    assert update.op == "update" and update.before is None  # the key did not change
    assert update.after == ("1", "a2", UNCHANGED)  # the TOASTed body was not touched
    full = txns[2].changes[0]
    assert full.before == ("7", "x") and not full.before_is_key and full.after == ("7", "y")
    delete = txns[3].changes[0]
    assert delete.op == "delete" and delete.before_is_key and delete.before == ("2", None, None)
    (truncated,) = txns[4].changes
    assert isinstance(truncated, Truncate) and [r.name for r in truncated.relations] == ["cdc_full"]
    added = txns[5].changes[0]
    assert [c.name for c in added.relation.columns] == ["id", "label", "body", "extra"]
    assert added.after == ("3", "c", None, "1.50")
    assert [c.key for c in added.relation.columns] == [True, False, False, False]

    # in pieces of two changes: the first transaction as two pieces, only the last with its
    # end; the same changes in the same order
    pieces = list(Decoder(piece=2).feed(messages))
    assert [(p.xid, p.first, len(p.changes), p.end_lsn) for p in pieces[:2]] == [
        (txns[0].xid, 0, 2, 0),
        (txns[0].xid, 2, 1, txns[0].end_lsn),
    ]
    assert [c for p in pieces for c in p.changes] == [c for t in txns for c in t.changes]
    assert all(p.final_lsn == txns[0].final_lsn for p in pieces[:2])
    # past a held end: the transactions ending there or before never come, whole or in pieces
    past = list(Decoder(after=txns[0].end_lsn, piece=2).feed(messages))
    assert [(p.xid, p.first, p.end_lsn) for p in past] == [(t.xid, 0, t.end_lsn) for t in txns[1:]]
