"""PostgreSQL's logical replication messages (the built-in `pgoutput` plugin, protocol 1),
decoded into the changes of whole transactions (docs/cdc.md).

Each message is one row of `pg_logical_slot_peek_binary_changes` (adapters/connectors/postgres/log.py reads them). A
transaction arrives whole and in commit order: Begin, the Relation messages of tables it is the
first to touch since the slot started (or whose shape changed), its changes, Commit. Values come
as PostgreSQL's text; `UNCHANGED` marks a TOASTed column an update did not touch (its value is
the row's last one, which the reader carries over; it is never NULL).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
PG_EPOCH_US = 946_684_800_000_000  # PG_EPOCH in microseconds since 1970
_INT16, _INT32, _UINT32, _INT64 = (struct.Struct(f) for f in ("!h", "!i", "!I", "!q"))
_BEGIN = struct.Struct("!qqI")  # final LSN, commit time, xid
_COMMIT = struct.Struct("!qqq")  # commit LSN, end LSN, commit time
_N, _T, _U = ord("n"), ord("t"), ord("u")


class _Unchanged:
    """A TOASTed value an update did not change (pgoutput's 'u')."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()
Value = str | None | _Unchanged
Op = Literal["insert", "update", "delete"]


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    key: bool  # part of the replica identity


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d (default: primary key), f (full), i (index), n (nothing)
    columns: tuple[Column, ...]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


class Change(NamedTuple):  # a tuple: made once per change read, the cheapest to make
    op: Op
    relation: Relation
    before: tuple[Value, ...] | None  # the key ('K') or the whole old row ('O'), else None
    after: tuple[Value, ...] | None
    before_is_key: bool = False  # `before` holds only the replica identity's columns


@dataclass(frozen=True, slots=True)
class Truncate:
    relations: tuple[Relation, ...]


@dataclass(slots=True)
class Transaction:
    """A transaction, or a piece of a large one (Decoder's `piece`): its changes from number
    `first` on; `end_lsn` is 0 in every piece but the last."""

    xid: int
    final_lsn: int  # the LSN of its commit record
    end_lsn: int = 0  # the LSN just past it: where a reader resumes
    commit_us: int = 0  # its commit time, microseconds after PG_EPOCH (as the log holds it)
    changes: list[Change | Truncate] = field(default_factory=list)
    first: int = 0  # the place of changes[0] in the transaction

    @property
    def commit_time(self) -> datetime:
        return timestamp(self.commit_us)


class ProtocolError(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> str:
        self.pos += 1
        return chr(self.data[self.pos - 1])

    def int8(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def int16(self) -> int:
        (value,) = _INT16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        (value,) = _INT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def uint32(self) -> int:
        (value,) = _UINT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def int64(self) -> int:
        (value,) = _INT64.unpack_from(self.data, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(0, self.pos)
        text = self.data[self.pos : end].decode()
        self.pos = end + 1
        return text

    def tuple_data(self) -> tuple[Value, ...]:
        """A tuple's values; the loop keeps its state in locals (the hot path of decoding)."""
        data, pos = self.data, self.pos
        (count,) = _INT16.unpack_from(data, pos)
        pos += 2
        values: list[Value] = []
        add, size_of = values.append, _INT32.unpack_from
        for _ in range(count):
            kind = data[pos]
            pos += 1
            if kind == _T:
                (size,) = size_of(data, pos)
                pos += 4
                add(data[pos : pos + size].decode())
                pos += size
            elif kind == _N:
                add(None)
            elif kind == _U:
                add(UNCHANGED)
            else:
                raise ProtocolError(
                    f"pgoutput: tuple value of kind {chr(kind)!r} (protocol 1 only)"
                )
        self.pos = pos
        return tuple(values)


def timestamp(micros: int) -> datetime:
    return PG_EPOCH + timedelta(microseconds=micros)


class Decoder:
    """Turns a slot's messages into the transactions that end past `after` (an end LSN), in
    commit order; keeps the relations it was told of. With `piece`, a transaction is given in
    pieces of that many changes as they are read (a large one is never held whole), each
    with its commit LSN, time and xid (the Begin message has them); the last piece, at its
    Commit, has the end LSN. A transaction that commits before `after` is never given in
    pieces: whether it ends past `after` is known at its Commit. With `before`, a transaction
    that commits at or after it is left out (a read shared with a table whose log ends later)."""

    def __init__(self, after: int = 0, piece: int | None = None, before: int | None = None) -> None:
        self.relations: dict[int, Relation] = {}
        self._open: Transaction | None = None
        self.after, self.piece, self.before = after, piece, before
        self._skipping = False  # in a transaction `before` leaves out

    def feed(self, messages: Iterable[bytes]) -> Iterator[Transaction]:
        for data in messages:
            done = self.message(bytes(data))
            if done is not None:
                if done.end_lsn and done.end_lsn <= self.after:
                    continue  # held already
                yield done

    def message(self, data: bytes) -> Transaction | None:
        r = _Reader(data)
        kind = r.byte()
        if kind == "B":
            final_lsn, micros, xid = _BEGIN.unpack_from(data, 1)
            self._skipping = self.before is not None and final_lsn >= self.before
            self._open = None if self._skipping else Transaction(xid, final_lsn, commit_us=micros)
            return None
        if kind == "R":
            oid, namespace, name = r.uint32(), r.string(), r.string()
            identity = r.byte()
            columns = []
            for _ in range(r.int16()):
                flags, col, type_oid, modifier = r.int8(), r.string(), r.uint32(), r.int32()
                columns.append(Column(col, type_oid, modifier, bool(flags & 1)))
            self.relations[oid] = Relation(oid, namespace, name, identity, tuple(columns))
            return None
        if kind in ("Y", "O", "M"):  # types, origins, logical messages: nothing to land
            return None
        if self._skipping:
            self._skipping = kind != "C"
            return None
        txn = self._open
        if txn is None:
            raise ProtocolError(f"pgoutput: message {kind!r} outside a transaction")
        if kind == "C":
            txn.final_lsn, txn.end_lsn, txn.commit_us = _COMMIT.unpack_from(data, 2)
            self._open = None
            return txn
        if self.piece and len(txn.changes) >= self.piece and txn.final_lsn >= self.after:
            full = txn
            txn = self._open = Transaction(
                full.xid,
                full.final_lsn,
                commit_us=full.commit_us,
                first=full.first + len(full.changes),
            )
            self.message_into(kind, r, txn)
            return full
        self.message_into(kind, r, txn)
        return None

    def message_into(self, kind: str, r: _Reader, txn: Transaction) -> None:
        """A change message's change added to `txn`."""
        if kind == "I":
            rel = self._relation(r.uint32())
            if r.byte() != "N":
                raise ProtocolError("pgoutput: insert without a new tuple")
            txn.changes.append(Change("insert", rel, None, r.tuple_data()))
        elif kind == "U":
            rel = self._relation(r.uint32())
            before, is_key, tag = None, False, r.byte()
            if tag in ("K", "O"):
                before, is_key = r.tuple_data(), tag == "K"
                tag = r.byte()
            if tag != "N":
                raise ProtocolError("pgoutput: update without a new tuple")
            txn.changes.append(Change("update", rel, before, r.tuple_data(), is_key))
        elif kind == "D":
            rel = self._relation(r.uint32())
            tag = r.byte()
            txn.changes.append(Change("delete", rel, r.tuple_data(), None, tag == "K"))
        elif kind == "T":
            count = r.int32()
            r.int8()  # cascade / restart identity
            txn.changes.append(Truncate(tuple(self._relation(r.uint32()) for _ in range(count))))
        else:
            raise ProtocolError(f"pgoutput: unknown message {kind!r}")

    def _relation(self, oid: int) -> Relation:
        rel = self.relations.get(oid)
        if rel is None:
            raise ProtocolError(f"pgoutput: a change of relation {oid} before its description")
        return rel


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it: `16/B374D848`."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
