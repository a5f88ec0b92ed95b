"""One read of a source's change log per run, shared by the source's tables (docs/cdc.md).

A log holds the changes of all of a source's tables; read by each table alone, a source of N
tables reads it N times. When several tables of a source land in one run, the first to come
reads the log once into a folder of files (the log's own module says what it keeps and how:
`fill`), and each table reads its part back from there (`consume`). A table asking again (the
next pass of a followed log) begins a new read. Nothing here is a record: the tables'
positions stay in their landing tables; the folder goes once every table read its part, with
the next read of the source, or at the process's end (a killed process leaves it in the
temporary folder).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
X = TypeVar("X")


@dataclass
class SharedRead(Generic[T]):
    key: tuple[str, str]  # run id, source
    tables: frozenset[str]  # those of the source that land in the run
    facts: T  # what the log's module keeps of the read (where it begins and ends)
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rivc-log-")))
    lock: threading.Lock = field(default_factory=threading.Lock)
    filled: bool = False
    error: BaseException | None = None
    taken: set[str] = field(default_factory=set)  # tables that came to it
    finished: set[str] = field(default_factory=set)


_reads: dict[tuple[str, str], SharedRead[Any]] = {}
_lock = threading.Lock()


@atexit.register
def _leftovers() -> None:
    """The folders of reads a table never took (it failed before it read), at the end."""
    for found in list(_reads.values()):
        _drop(found)


def join(
    key: tuple[str, str], tables: frozenset[str], table: str, begin: Callable[[], T]
) -> SharedRead[T]:
    """The read `table` takes part in: the run's read of the source, or a new one whose facts
    `begin()` gives (the first table to come, or one coming again)."""
    with _lock:
        found = _reads.get(key)
        if found is None or table in found.taken or found.tables != tables:
            if found is not None:
                _drop(found)
            # an earlier run's read that a table never took (it failed before it read) goes
            # once nobody reads it: a warm server keeps no folder of a run that is over
            for read in list(_reads.values()):
                if read.key[1] == key[1] and read.taken == read.finished:
                    _drop(read)
            found = _reads[key] = SharedRead(key, tables, begin())
        found.taken.add(table)
        return found


def fill(read: SharedRead[T], table: str, filler: Callable[[SharedRead[T]], None]) -> None:
    """Fill the read's folder, once (the first table here does, the others wait for it); a
    failure of it is each table's."""
    with read.lock:
        if not read.filled:
            read.filled = True
            try:
                filler(read)
            except BaseException as exc:
                read.error = exc
        if read.error is not None:
            leave(read, table)
            raise read.error


def consume(read: SharedRead[Any], table: str, items: Iterator[X]) -> Iterator[X]:
    """`items` (the table's part, read back), leaving the read once they are read."""
    try:
        yield from items
    finally:
        leave(read, table)


def leave(read: SharedRead[Any], table: str) -> None:
    """`table` is done with the read: it goes once every table is."""
    with _lock:
        read.finished.add(table)
        if read.finished >= read.tables:
            _drop(read)


def _drop(found: SharedRead[Any]) -> None:
    if _reads.get(found.key) is found:
        del _reads[found.key]
    shutil.rmtree(found.folder, ignore_errors=True)
