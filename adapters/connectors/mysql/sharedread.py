"""One read of a source's binlog per run, shared by its tables (ingest/sharedread.py,
docs/cdc.md).

The first table of the run to read asks the server once for its log, from the earliest
position the run's tables hold on this server to where its own batch ends, and writes each
table's part to a file of its own: the transactions that changed the table, with their GTID
and commit, every statement (each table's reader tells its own DDL) and the file rotations.
Each table reads its file back through its own BinlogStream from the position it holds, up to
the end of its own batch or of the read, whichever is first. A table holding a position the
read does not cover (on another server after a failover, or past the read's end: a snapshot
taken after it began) reads the server alone; so do all of them when the read failed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ...ingest.sharedread import SharedRead, consume, fill, join, leave
from .binlog import file_number
from .stream import (
    GTID,
    HEAD,
    MARIADB_GTID,
    QUERY,
    ROTATE,
    ROW_EVENTS,
    TABLE_MAP,
    UNREADABLE,
    XID,
    BinlogDump,
    query_of,
)

_LENGTH = struct.Struct("<I")


def in_order(coordinates: tuple[str, int]) -> tuple[int, int]:
    """Binlog coordinates in the log's order."""
    return file_number(coordinates[0]), coordinates[1]


@dataclass
class Span:
    start: tuple[str, int]
    upto: tuple[str, int]
    trailer: int = 0  # the bytes of checksum each event ends with

    def covers(self, held: tuple[str, int]) -> bool:
        return in_order(self.start) <= in_order(held) <= in_order(self.upto)


class Replay:
    """A table's reading of the shared read: its file's packets, as the server sent them."""

    def __init__(self, read: SharedRead[Span], table: str) -> None:
        self.read, self.table = read, table
        self.file = read.facts.start[0]
        self.trailer = read.facts.trailer

    def __iter__(self) -> Iterator[bytes]:
        return consume(self.read, self.table, _packets(_file(self.read, self.table)))


def shared_packets(
    key: tuple[str, str],
    tables: dict[str, tuple[str, str]],
    table: str,
    held: tuple[str, int],
    begin: Callable[[], Span],
    dump: Callable[[tuple[str, int]], tuple[Any, BinlogDump]],
) -> tuple[Span, Replay] | None:
    """`table`'s reading of the run's shared read of the source's log (`key`: run id and
    source; `tables`: those that land in the run, by name, with their schema and table), with
    the span it covers; None when it does not cover the position `held` (or failed), and the
    table reads alone. `begin` gives a new read's span; `dump(start)` asks the server for
    its log from `start` (a connection and its dump)."""
    read = join(key, frozenset(tables), table, begin)
    try:
        fill(read, table, lambda r: _fill(r, tables, dump))
    except Exception:
        return None  # the table reads alone, and meets the failure there if it is real
    if not read.facts.covers(held):
        leave(read, table)
        return None
    return read.facts, Replay(read, table)


def _fill(
    read: SharedRead[Span],
    tables: dict[str, tuple[str, str]],
    dump: Callable[[tuple[str, int]], tuple[Any, BinlogDump]],
) -> None:
    """Write each table's packets of the read's span to its file: its table maps and row
    events inside their transactions' GTID (and BEGIN) and commit, every statement other than
    BEGIN and COMMIT (the table's reader tells its own DDL), the file rotations, and what
    mysql-cdc refuses to read. A transaction of other tables is in no file."""
    db, packets = dump(read.facts.start)
    read.facts.trailer = trailer = packets.trailer
    end, number = in_order(read.facts.upto), file_number(packets.file)
    named = {name: table for table, name in tables.items()}
    out: dict[str, BinaryIO] = {t: open(_file(read, t), "wb") for t in tables}
    ids: dict[int, str] = {}  # the maps in force of the tables read
    begin: list[bytes] = []  # the open transaction's GTID (and BEGIN)
    begun: set[str] = set()  # the tables whose file has them

    def put(table: str, data: bytes) -> None:
        f = out[table]
        if table not in begun:
            begun.add(table)
            for b in begin:
                f.write(_LENGTH.pack(len(b)) + b)
        f.write(_LENGTH.pack(len(data)) + data)

    unpack_head = HEAD.unpack_from
    try:
        for data in packets:
            _, kind, _, _, pos, _ = unpack_head(data, 1)
            if pos and (number, pos) > end:
                break
            if kind in ROW_EVENTS:
                table = ids.get(int.from_bytes(data[20:26], "little"))
                if table is not None:
                    put(table, data)
            elif kind == TABLE_MAP:
                body = data[20:]
                schema = body[9 : 9 + body[8]].decode()
                at = 10 + body[8]
                mapped = named.get((schema, body[at + 1 : at + 1 + body[at]].decode()))
                table_id = int.from_bytes(body[:6], "little")
                if mapped is None:
                    ids.pop(table_id, None)
                else:
                    ids[table_id] = mapped
                    put(mapped, data)
            elif kind in (GTID, MARIADB_GTID):
                begin, begun = [data], set()
            elif kind == XID:
                for table in begun:
                    out[table].write(_LENGTH.pack(len(data)) + data)
                begin, begun = [], set()
            elif kind == QUERY:
                statement = query_of(data[20 : len(data) - trailer])[1].strip().upper()
                if statement == "BEGIN":
                    begin.append(data)
                elif statement == "COMMIT":
                    for table in begun:
                        out[table].write(_LENGTH.pack(len(data)) + data)
                    begin, begun = [], set()
                else:
                    for table in out:
                        put(table, data)
            elif kind == ROTATE or kind in UNREADABLE:
                if kind == ROTATE:  # the events after it are in the file it names
                    number = file_number(data[28 : len(data) - trailer].decode())
                for f in out.values():
                    f.write(_LENGTH.pack(len(data)) + data)
    finally:
        for f in out.values():
            f.close()
        db.close()


def _file(read: SharedRead[Span], table: str) -> Path:
    return read.folder / f"{sorted(read.tables).index(table)}.bin"


def _packets(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while head := f.read(4):
            (size,) = _LENGTH.unpack(head)
            yield f.read(size)
