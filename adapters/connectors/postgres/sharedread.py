"""One read of a source's slot per run, split by table (docs/cdc.md).

The slot of a postgres-cdc source decodes the changes of all its tables; read by each table
alone, a source of N tables is decoded N times. When several tables of a source land in one
run, the first to read the log reads it once, up to the log position it began at, and writes
each table's messages to a file of its own (a table's changes with their transactions' Begin
and Commit, and every relation description); each table then decodes its own file, from the
position it holds. A table whose log began earlier than the read leaves out the transactions
that commit after its own end; one whose log began later ends where the read did. Nothing here
is a record: the tables' positions stay in their landing tables; the files go once every table
read its own, with the next read of the source, or at the process's end (a killed process
leaves them in the temporary folder).
"""

from __future__ import annotations

import atexit
import shutil
import struct
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .slot import LogicalSlot

_LENGTH = struct.Struct("!I")
_OID = struct.Struct("!I")
_COUNT = struct.Struct("!i")


@dataclass
class _Read:
    tables: frozenset[str]  # schema-qualified, as pgoutput's relation messages name them
    upto: int
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rivc-slot-")))
    lock: threading.Lock = field(default_factory=threading.Lock)
    read: bool = False
    error: BaseException | None = None
    taken: set[str] = field(default_factory=set)  # tables that began reading their file
    finished: set[str] = field(default_factory=set)

    def file(self, table: str) -> Path:
        return self.folder / f"{sorted(self.tables).index(table)}.bin"

    def split(self, messages: Iterator[bytes]) -> None:
        """Write each table's messages to its file."""
        out: dict[str, BinaryIO] = {t: open(self.file(t), "wb") for t in self.tables}
        names: dict[int, str] = {}  # relation oid -> its qualified name
        begin: bytes | None = None
        begun: set[str] = set()  # the tables that have this transaction's Begin

        def put(table: str, data: bytes) -> None:
            if table not in begun and begin is not None:
                begun.add(table)
                out[table].write(_LENGTH.pack(len(begin)) + begin)
            out[table].write(_LENGTH.pack(len(data)) + data)

        try:
            for data in messages:
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

    def messages(self, table: str) -> Iterator[bytes]:
        with open(self.file(table), "rb") as f:
            while head := f.read(4):
                (size,) = _LENGTH.unpack(head)
                yield f.read(size)


_reads: dict[tuple[str, str], _Read] = {}  # by (run id, source)
_lock = threading.Lock()


@atexit.register
def _leftovers() -> None:
    """The files of reads a table never took (it failed before it read), at the process's end."""
    for key, found in list(_reads.items()):
        _drop(key, found)


def shared_messages(
    key: tuple[str, str], slot: LogicalSlot, tables: frozenset[str], table: str, upto: int
) -> tuple[int, Iterator[bytes]]:
    """`table`'s messages from one read of the slot shared by `tables` (those of the source
    that land in this run, `key`: run id and source), and the log position the read ends
    at. The first table to ask reads the slot up to its `upto`; a table asking again (the next
    pass of a followed log) begins a new read."""
    with _lock:
        found = _reads.get(key)
        if found is None or table in found.taken or found.tables != tables:
            if found is not None:
                _drop(key, found)
            # an earlier run's read that a table never took (it failed before it read) goes
            # once nobody reads it: a warm server keeps no file of a run that is over
            for other, read in list(_reads.items()):
                if other[1] == key[1] and read.taken == read.finished:
                    _drop(other, read)
            found = _reads[key] = _Read(tables, upto)
        found.taken.add(table)
    with found.lock:
        if not found.read:
            found.read = True
            try:
                found.split(slot.messages(found.upto))
            except BaseException as exc:
                found.error = exc
        if found.error is not None:
            _finish(key, found, table)
            raise found.error
    return found.upto, _consume(key, found, table)


def _consume(key: tuple[str, str], found: _Read, table: str) -> Iterator[bytes]:
    try:
        yield from found.messages(table)
    finally:
        _finish(key, found, table)


def _finish(key: tuple[str, str], found: _Read, table: str) -> None:
    with _lock:
        found.finished.add(table)
        if found.finished >= found.tables:
            _drop(key, found)


def _drop(key: tuple[str, str], found: _Read) -> None:
    if _reads.get(key) is found:
        del _reads[key]
    shutil.rmtree(found.folder, ignore_errors=True)
