"""One driver for every change log (docs/cdc.md): a table's changes since the position its
landing table holds, landed as one batch of change envelopes.

A change log (`ChangeLog`: postgres-cdc's slot in cdc.py, mysql-cdc's binlog in mysqlcdc.py, a
test plugin in tests/plugins/journal.py) gives what only it knows: its typed position, the
server's checks, a snapshot, the transactions between two positions, its envelope's columns,
and what it releases once a batch is landed (a slot's advance; nothing for a binlog). The
driver does the rest, once for every log:

- A run resuming the one that landed the table's last batch lands nothing again.
- The first run (and a full refresh) reads a snapshot as `op = r` changes; a snapshot the log
  reads in parts lands each part with its position, and a killed run reads on from the last.
  A full refresh of landed changes deletes, after the snapshot, the keys it no longer finds.
- Transactions are never split. A truncate is a delete of every key the table held; an update
  that moves a key is a delete of the old key and an insert of the new one.
- A batch is checked against the landed shape (columns only added), committed with the
  position it holds, and only then released. A table with no new changes commits nothing
  until the log moved far enough that the position must be recorded.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from rivc.compiler.collector import no_cyclic_gc
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import SourceTable

from ..state import NodeResult
from ..util.faults import fault
from . import changes
from .changes import BatchParts, check_shape, deletes, history, newest, next_seq
from .extract import Extraction
from .landing import Landing, Position, new_batch_id

if TYPE_CHECKING:
    from ..run.plan import Plan


class LogPosition(ABC):
    """Where a table stands in its log, as its landing table's commits record it."""

    @property
    def reading(self) -> bool:
        """True while a snapshot read in parts is under way (the log is read after it)."""
        return False

    @abstractmethod
    def to_json(self) -> dict[str, Any]: ...

    @abstractmethod
    def describe(self) -> str:
        """The position as `rivc cdc status`, `rivc state show` and node messages show it."""


class Commit(Protocol):
    """A transaction of the log: its changes' order among all the table's changes."""

    def seq(self, i: int) -> int: ...


class Change(NamedTuple):
    """A change of the table: "c", "u", "d" or "truncate", its images in the plan's column order
    (None: none), and its place in its transaction (the seq's low digits)."""

    op: str
    before: Any
    after: Any
    place: int


@dataclass(frozen=True, kw_only=True)
class LogSource:
    """A change-log source: every table of it reads one log."""

    project: str
    name: str
    config: Any  # the source's `config:` (its connector's spec)
    conn: Any  # the profile connection (connectors.databases.Conn), None for a log without one
    tables: list[str]  # the log's tables of every table of the source


@dataclass(frozen=True, kw_only=True)
class LogContext:
    nid: str
    name: str  # "source.table"
    table: SourceTable
    source: LogSource
    landing: Landing
    siblings: list[Landing]  # the landing tables of the source's tables (this one included)
    # those that land in this run: their landing tables by `table:`
    readers: dict[str, Landing] = field(default_factory=dict)
    run_id: str
    full_refresh: bool
    resume_from: str | None

    @property
    def label(self) -> str:
        return f"source {self.name}"

    def refresh_hint(self) -> str:
        return f"take a new snapshot with `rivc run --full-refresh --select source:{self.name}`"


@dataclass
class Rows:
    """Changes gathered for the next file of a batch."""

    ops: list[str] = field(default_factory=list)
    before: list[Any] = field(default_factory=list)
    after: list[Any] = field(default_factory=list)
    commits: list[Any] = field(default_factory=list)  # the change's Commit; None: the snapshot
    seq: list[int] = field(default_factory=list)
    # the row image an insert half of a moved key came from
    origin: list[Any] = field(default_factory=list)
    base: int = 0  # the snapshot's seq: 0, or after the landed history for a new snapshot

    def add(
        self, op: str, before: Any, after: Any, commit: Any, i: int, origin: Any = None
    ) -> None:
        self.ops.append(op)
        self.before.append(before)
        self.after.append(after)
        self.commits.append(commit)
        self.seq.append(self.base if commit is None else commit.seq(i))
        self.origin.append(origin)

    def __len__(self) -> int:
        return len(self.ops)

    def clear(self) -> None:
        for name in ("ops", "before", "after", "commits", "seq", "origin"):
            getattr(self, name).clear()


class Batch:
    """The batch being written: gathered changes and the files written so far."""

    def __init__(self, session: LogSession, parts: BatchParts, base: int, taken: Any) -> None:
        self.session, self.parts = session, parts
        self.rows = Rows(base=base)
        self.taken: set[tuple[Any, ...]] | None = taken  # a new snapshot's keys, when wanted

    def add(
        self, op: str, before: Any, after: Any, commit: Any = None, i: int = 0, origin: Any = None
    ) -> None:
        self.rows.add(op, before, after, commit, i, origin)
        self.spill()

    def spill(self) -> None:
        """Written ROWS_PER_FILE changes at a time: a batch is never held whole in memory."""
        if len(self.rows) >= changes.ROWS_PER_FILE:
            self.flush()

    def flush(self) -> None:
        """Write the gathered changes as a file of the batch."""
        if not len(self.rows):
            return
        table = self.session.envelopes(self.rows, self.parts)
        names = self.session.key_names()
        if self.taken is not None and names:
            after = table.column("after").combine_chunks()
            self.taken.update(zip(*(after.field(k).to_pylist() for k in names), strict=True))
        self.parts.write(table)
        self.rows.clear()


class LogSession(ABC):
    """One run's read of a table's log, open on its server."""

    @property
    @abstractmethod
    def columns(self) -> dict[str, str]:
        """The landed envelope's Spark columns."""

    def check_added(self, added: list[str]) -> None:
        """Refuse columns added since the last batch that the log cannot deliver."""
        return None

    @abstractmethod
    def key_names(self) -> list[str]:
        """The columns that identify a row in the log (empty: none)."""

    @abstractmethod
    def key_columns(self) -> list[int]:
        """key_names' places in the images."""

    @abstractmethod
    def snapshot(self, out: Batch, going: LogPosition | None) -> Iterator[LogPosition]:
        """Every row of the table now as `r` changes added to `out`; yields a position for each
        part to land while `reading`, then the one the log is read on from."""

    @abstractmethod
    def changes(self, held: LogPosition) -> Iterator[tuple[Commit, list[Change]]]:
        """Each transaction past `held` up to the log's end when the run began that changed
        the table, whole, in commit order."""

    def admit(self, commit: Commit, change: Change) -> Change:
        """A change as the snapshot has not seen it (op "" when it has)."""
        return change

    def spared(self, commit: Commit, key: tuple[Any, ...]) -> bool:
        """Whether a truncate in `commit` leaves landed `key` alone (a snapshot read it
        after)."""
        return False

    @abstractmethod
    def envelopes(self, rows: Rows, parts: BatchParts | None) -> Any:
        """`rows` as an Arrow table of change envelopes, values delivered exactly (`parts`:
        the batch's files so far)."""

    @abstractmethod
    def reached(self, held: LogPosition) -> LogPosition:
        """The position the batch holds once the changes were read from `held`."""

    @abstractmethod
    def worth_recording(self, held: LogPosition, reached: LogPosition) -> bool:
        """Whether a table without new changes records `reached` (what the server keeps for
        it stays bounded; idle runs commit nothing)."""


class ChangeLog(ABC):
    """A kind of change log: named by its connector's registry entry (`log=`)."""

    @abstractmethod
    def position(self, data: dict[str, Any]) -> LogPosition:
        """A landed position (`Position.cdc`), as any earlier version wrote it."""

    @abstractmethod
    def open(self, ctx: LogContext, held: LogPosition | None) -> AbstractContextManager[LogSession]:
        """The table's log on its server, checked: what refuses the run is refused by name."""

    def release(self, ctx: LogContext) -> tuple[str, int | None]:
        """After a commit: give back to the server what the source's tables hold. Returns a
        note for the node's message and how far (bytes) the log's end is past the table."""
        return "", None

    def land(self, ctx: LogContext) -> Extraction:
        with no_cyclic_gc():  # a batch's decoded changes all live until it is written
            return land_changes(ctx, self)

    @abstractmethod
    def status(
        self, source: LogSource, held: dict[str, LogPosition | None]
    ) -> list[dict[str, Any]]:
        """`rivc cdc status`: each table's held position beside the log's."""

    def drop(self, source: LogSource) -> str:
        """`rivc cdc drop`: remove what the server keeps for the source."""
        raise ConnectorError(f"{source.name!r}: its log keeps nothing on the server for rivc")


def source_log(plan: Plan, source: str) -> tuple[ChangeLog, LogSource]:
    """A change-log source's log (its connector's) and what it reads the log with."""
    import os

    from ..connectors.database.engine import Conn
    from ..plane.registry import change_log

    tables = [t for t in plan.project.sources.values() if t.source.name == source]
    first = tables[0]
    conn = None
    if first.connector.database is not None:
        spec = plan.profile.connections.get(first.source.connection or "")
        if spec is None:
            raise ConnectorError(
                f"source {source}: connection {first.source.connection!r} is not in the profile"
            )
        conn = Conn.resolve(spec, os.environ)
    found = LogSource(
        project=plan.manifest.project,
        name=source,
        config=first.config,
        conn=conn,
        tables=sorted({t.table.table or "" for t in tables}),
    )
    return change_log(first.connector), found


def held_position(log: ChangeLog, landing: Landing) -> LogPosition | None:
    data = landing.position().cdc
    return log.position(data) if data else None


def land_changes(ctx: LogContext, log: ChangeLog) -> Extraction:
    landing, label = ctx.landing, ctx.label
    at = landing.position()
    held = log.position(at.cdc) if at.cdc else None
    if ctx.resume_from is not None and at.run == ctx.resume_from:
        if held is None or not held.reading:  # the killed run may have died before releasing
            kept, lag = log.release(ctx)
            message = f"batch {at.batch}, landed by the run this one resumes{kept}"
            result = NodeResult(ctx.nid, "source", "success", message=message, log_behind=lag)
            return Extraction(result, at.batch)
    if ctx.full_refresh:
        held = None
    with log.open(ctx, held) as session:
        columns = session.columns
        if held is not None:
            session.check_added(check_shape(at.columns, columns, label, ctx.name))
        batch = new_batch_id(at.batch)
        parts = BatchParts(
            landing, batch, session.envelopes(Rows(), None).schema, changes.ROWS_PER_FILE
        )
        resnapshot = held is None and at.cdc is not None  # a full refresh of landed changes
        landed: dict[tuple[Any, ...], Any] = {}
        base = 0
        if resnapshot:  # the rows the new snapshot does not find are deleted after it
            files = history(landing)
            landed, base = newest(landing, files, session.key_names()), next_seq(landing, files)
        out = Batch(session, parts, base, set() if resnapshot else None)
        snapped, replacing, total = held is None or held.reading, ctx.full_refresh, 0
        if snapped:  # the first run, a full refresh, or a snapshot a killed run left part read
            for part in session.snapshot(out, held):
                if not part.reading:
                    held = part
                    break
                out.flush()
                position = Position(
                    batch=batch, columns=columns, run=ctx.run_id, cdc=part.to_json()
                )
                landing.commit(batch, parts.files(), position, parts.schema, replace=replacing)
                fault("between-chunks", ctx.name)
                replacing, total = False, total + parts.rows
                batch = new_batch_id(batch)
                parts.begin(batch)
            out.flush()
            if out.taken is not None:
                gone = [image for key, image in landed.items() if key not in out.taken]
                parts.write(deletes(gone, base, parts.schema))
        assert held is not None  # the table's, or the snapshot's just read
        _read_changes(ctx, session, held, out)
        reached = session.reached(held)
    out.flush()
    fault("after-staging", ctx.name)
    if not parts.rows and not snapped:
        parts.discard()
        if session.worth_recording(held, reached):
            moved = replace(at, run=ctx.run_id, cdc=reached.to_json())
            dt = landing.table()
            assert dt is not None  # it holds a position
            landing.commit(at.batch or 0, [], moved, landing.schema(dt))
        kept, lag = log.release(ctx)
        message = f"no new changes (at {reached.describe()}){kept}"
        result = NodeResult(ctx.nid, "source", "success", rows=0, message=message, log_behind=lag)
        return Extraction(result, at.batch)
    position = Position(
        batch=batch,
        columns=columns,
        floor=None if ctx.full_refresh else at.floor,
        run=ctx.run_id,
        cdc=reached.to_json(),
    )
    landing.commit(batch, parts.files(), position, parts.schema, replace=replacing)
    fault("after-landing", ctx.name)
    kept, lag = log.release(ctx)
    total += parts.rows
    message = f"batch {batch}: {total} changes up to {reached.describe()}{kept}"
    result = NodeResult(ctx.nid, "source", "success", rows=total, message=message, log_behind=lag)
    return Extraction(result, batch)


def _read_changes(ctx: LogContext, session: LogSession, held: LogPosition, out: Batch) -> None:
    """The log's transactions past `held` into `out`: a truncate as a delete of every key the
    table held, a moved key as a delete and an insert."""
    keys: list[int] | None = None  # the key's places, once an update needs them
    for commit, found in session.changes(held):
        for op, before, after, i in found:
            if op == "truncate":
                out.flush()
                names = session.key_names()
                if not names:
                    raise ConnectorError(
                        f"{ctx.label}: {ctx.table.table} was truncated and has no primary key, "
                        "so its rows cannot be deleted one by one in the consumers: "
                        + ctx.refresh_hint()
                    )
                parts = out.parts
                held_rows = newest(ctx.landing, history(ctx.landing) + parts.files(), names)
                gone = [v for k, v in held_rows.items() if not session.spared(commit, k)]
                parts.write(deletes(gone, commit.seq(i), parts.schema))
                continue
            halves = [(Change(op, before, after, i), None)]
            if op == "u" and before is not None and after is not None:
                keys = keys if keys is not None else session.key_columns()
                if any(before[j] != after[j] for j in keys):  # moved: the old key goes, and the
                    # new one comes with the old row's other values
                    halves = [
                        (Change("d", before, None, i), None),
                        (Change("c", None, after, i), before),
                    ]
            for half, origin in halves:
                half = session.admit(commit, half)
                if half.op:
                    out.rows.add(half.op, half.before, half.after, commit, i, origin)
            out.spill()  # never between a moved key's halves: the insert needs the delete's row
