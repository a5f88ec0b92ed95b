"""One read of a source's slot per run, split by table (ingest/sharedread.py, docs/cdc.md).

The slot of a postgres-cdc source decodes the changes of all its tables. The first table of
the run to read it reads it up to the log position it began at, and writes each table's
messages to a file of its own (a table's changes with their transactions' Begin and Commit,
and every relation description); each table then decodes its own file, from the position it
holds. A table whose log began earlier than the read leaves out the transactions that commit
after its own end; one whose log began later ends where the read did.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from ...ingest.sharedread import SharedRead, consume, fill, join
from .slot import LogicalSlot

_LENGTH = struct.Struct("!I")
_OID = struct.Struct("!I")
_COUNT = struct.Struct("!i")


def shared_messages(
    key: tuple[str, str], slot: LogicalSlot, tables: frozenset[str], table: str, upto: int
) -> tuple[int, Iterator[bytes]]:
    """`table`'s messages from one read of the slot shared by `tables` (those of the source
    that land in this run, `key`: run id and source), and the log position the read ends
    at. The first table to ask reads the slot up to its `upto`."""
    read = join(key, tables, table, lambda: upto)
    fill(read, table, lambda r: split(r.folder, r.tables, slot.messages(r.facts)))
    return read.facts, consume(read, table, messages(read, table))


def _file(folder: Path, tables: frozenset[str], table: str) -> Path:
    return folder / f"{sorted(tables).index(table)}.bin"


def split(folder: Path, tables: frozenset[str], log: Iterable[bytes]) -> None:
    """Write each of `tables`' messages (schema-qualified, as pgoutput's relation messages
    name them) to its file in `folder`."""
    out: dict[str, BinaryIO] = {t: open(_file(folder, tables, t), "wb") for t in tables}
    names: dict[int, str] = {}  # relation oid -> its qualified name
    begin: bytes | None = None
    begun: set[str] = set()  # the tables that have this transaction's Begin

    def put(table: str, data: bytes) -> None:
        if table not in begun and begin is not None:
            begun.add(table)
            out[table].write(_LENGTH.pack(len(begin)) + begin)
        out[table].write(_LENGTH.pack(len(data)) + data)

    try:
        for data in log:
            kind = data[0]
            if kind == 66:  # B
                begin, begun = data, set()
            elif kind == 82:  # R: every table's decoder knows every relation
                (oid,) = _OID.unpack_from(data, 1)
                end = data.index(0, 5)
                name = data[end + 1 : data.index(0, end + 1)].decode()
                names[oid] = f"{data[5:end].decode()}.{name}"
                for f in out.values():
                    f.write(_LENGTH.pack(len(data)) + data)
            elif kind in (73, 85, 68):  # I, U, D
                table = names.get(_OID.unpack_from(data, 1)[0], "")
                if table in out:
                    put(table, data)
            elif kind == 84:  # T: each truncated table of the read
                (count,) = _COUNT.unpack_from(data, 1)
                oids = struct.unpack_from(f"!{count}I", data, 6)
                for table in {names.get(o, "") for o in oids} & out.keys():
                    put(table, data)
            elif kind == 67:  # C
                for table in begun:
                    out[table].write(_LENGTH.pack(len(data)) + data)
                begin, begun = None, set()
            elif kind not in (89, 79, 77):  # Y, O, M: nothing to land
                for table in out:  # unknown: each table's decoder refuses it
                    put(table, data)
    finally:
        for f in out.values():
            f.close()


def messages(read: SharedRead[int], table: str) -> Iterator[bytes]:
    with open(_file(read.folder, read.tables, table), "rb") as f:
        while head := f.read(4):
            (size,) = _LENGTH.unpack(head)
            yield f.read(size)
