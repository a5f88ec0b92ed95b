"""One read of a slot split by table (connectors/postgres/sharedread.py, ingest/sharedread.py): each table's file holds
its own changes inside their transactions' Begin and Commit, a truncate of several tables in
each of theirs, and every relation description; a transaction of other tables is left out."""

from __future__ import annotations

import struct

from rivc.adapters.connectors.postgres.sharedread import messages, split
from rivc.adapters.ingest.sharedread import SharedRead


def relation(oid: int, name: str) -> bytes:
    return b"R" + struct.pack("!I", oid) + b"public\0" + name.encode() + b"\0d" + b"\0\0"


def change(kind: bytes, oid: int) -> bytes:
    return kind + struct.pack("!I", oid) + b"N\0\0"


def begin(xid: int) -> bytes:
    return b"B" + struct.pack("!qqI", xid * 100, 0, xid)


def commit(xid: int) -> bytes:
    return b"C\0" + struct.pack("!qqq", xid * 100, xid * 100 + 8, 0)


def test_each_table_gets_its_changes_inside_their_transactions():
    r1, r2, r3 = relation(1, "a"), relation(2, "b"), relation(3, "other")
    truncate = b"T" + struct.pack("!i", 3) + b"\0" + struct.pack("!III", 1, 2, 3)
    log = [
        *(begin(7), r1, change(b"I", 1), change(b"U", 1), commit(7)),
        *(begin(8), r2, change(b"D", 2), b"Y" + b"\0" * 8, commit(8)),
        *(begin(9), r3, change(b"I", 3), commit(9)),  # another table's: in no file
        *(begin(10), change(b"I", 2), change(b"I", 1), truncate, commit(10)),
    ]
    read = SharedRead(("run", "db"), frozenset({"public.a", "public.b"}), 0)
    try:
        split(read.folder, read.tables, iter(log))
        a, b = (list(messages(read, t)) for t in ("public.a", "public.b"))
    finally:
        import shutil

        shutil.rmtree(read.folder)
    assert a == [  # a description is written as it comes, before its table's Begin
        *(r1, begin(7), change(b"I", 1), change(b"U", 1), commit(7)),
        r2,  # every relation described, for a truncate that names it
        r3,
        *(begin(10), change(b"I", 1), truncate, commit(10)),
    ]
    assert b == [
        r1,
        *(r2, begin(8), change(b"D", 2), commit(8)),
        r3,
        *(begin(10), change(b"I", 2), truncate, commit(10)),
    ]
