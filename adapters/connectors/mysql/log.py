"""mysql-cdc's change log (docs/cdc.md): the server's row-based binary log, read through the
change-log driver (changelog.py) from the coordinates a table's landing table holds.

- A snapshot is consistent, and its binlog coordinates are those MariaDB reports with it
  (`binlog_snapshot_file/position`; on MySQL the tables are locked for the moment it takes to
  read the coordinates): the log is read from exactly there, so no change is lost or doubled.
- A batch reads the transactions committed before the log's end when the run began. Values are
  the server's own (pymysql and the binlog decode them); each is delivered exactly in the
  column's type or refused by name.
- A position holds the coordinates and, on MariaDB, the GTID position there: after a failover
  to a replica the next run reads on from the GTIDs (connectors/binlog.py). The server keeps no
  state for rivc: nothing to release, and a run killed anywhere reads the same transactions
  again from what the table holds.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from rivc.compiler.dbtypes import DbColumn, Delivery, declared_type
from rivc.compiler.errors import ConnectorError

from ...ingest.changelog import (
    Batch,
    Change,
    ChangeLog,
    LogContext,
    LogPosition,
    LogSession,
    LogSource,
    Rows,
    held_position,
)
from ...ingest.changes import BatchParts, history, next_seq
from ..database.engine import connection, database
from ..database.relational import deliveries
from ..postgres.copy import arrow_type
from .binlog import (
    binary_logs,
    check_server,
    file_number,
    gtid_at,
    key_names,
    log_end,
    moved_server,
)
from .sharedread import Replay, Span, in_order, shared_packets
from .spec import MysqlCdcConfig, mysql_cdc_columns
from .stream import COMMIT, GTID_AT, ROWS, STATEMENT, BinlogDump, BinlogStream, Packets, RowsEvent

SEQ = 10**9  # seq = (binlog file number << 32 | commit end position) * SEQ + place in its commit
IDLE_ADVANCE = 16 << 20  # an idle table records a new position past this much log, or a new file
PIECE = 10_000  # a large transaction is decoded and handed on this many changes at a time
SPOOL_BYTES = 16 << 20  # of an open transaction's row events held in memory; the rest on disk
_SPILLED = struct.Struct("<BII")  # a spilled row event: its type (0: a truncate), table, size
_BITS = {"tiny": 8, "short": 16, "int24": 24, "long": 32, "longlong": 64}


def _duration(v: Any, _: int) -> str:
    """A `time` (a timedelta from the query and the log alike) as the mysql source delivers it:
    ISO 8601, e.g. -PT838H59M59.5S."""
    micros = abs(v.days * 86_400_000_000 + v.seconds * 1_000_000 + v.microseconds)
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    tail = f".{fraction:06d}".rstrip("0") if fraction else ""
    sign = "-" if v < type(v)(0) else ""
    return f"{sign}PT{hours}H{rest // 60}M{rest % 60}{tail}S"


def _bits(v: Any, width: int) -> Any:
    """A `bit(n)`: the query gives bytes, the log a string of digits; bit(1) is a boolean,
    wider ones their digits, as the mysql source delivers them."""
    number = int.from_bytes(v, "big") if isinstance(v, bytes) else int(v, 2)
    return bool(number) if width == 1 else format(number, f"0{width}b")


# types the log and the snapshot give alike once made text: enum (its label), time, bit, and
# char, whose padding the server strips in the query and the log alike
_AS_TEXT: dict[str, Any] = {
    "enum": lambda v, _: v,
    "time": _duration,
    "bit": _bits,
    "string": lambda v, _: v,
}
_READ = ("native", "decimal", "date", "timestamp")  # deliveries the log gives as the snapshot does


@dataclass(frozen=True)
class BinlogPosition(LogPosition):
    """Binlog coordinates a table holds every change before; on MariaDB the GTID position
    there; `shift` puts changes read from another server after every landed one."""

    file: str
    pos: int
    gtid: str | None = None
    shift: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "pos": self.pos, "gtid": self.gtid}
        return {**out, "shift": self.shift} if self.shift else out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BinlogPosition:
        shift = int(data.get("shift", 0))
        return cls(str(data["file"]), int(data["pos"]), data.get("gtid"), shift)

    def describe(self) -> str:
        return f"{self.file}:{self.pos}"


@dataclass(frozen=True)
class _Commit:
    file: str
    pos: int  # where the commit event ends: the next transaction starts there
    gtid: str | None
    time: datetime
    shift: int  # past every landed change read from an earlier server (after a failover)

    first: int = field(init=False, repr=False, compare=False)  # the seq of its first change

    def __post_init__(self) -> None:  # once per transaction, not per change
        first = self.shift + ((file_number(self.file) << 32) | self.pos) * SEQ
        object.__setattr__(self, "first", first)

    def seq(self, i: int) -> int:
        return self.first + i


def server_id(project: str, source: str, config: MysqlCdcConfig) -> int:
    """The id rivc's binlog reader takes among the server's replicas: as configured, else one
    derived from project and source (above 65535, where hand-picked ids rarely are)."""
    if config.server_id is not None:
        return config.server_id
    return 65_536 + zlib.crc32(f"{project}:{source}".encode()) % (2**31 - 65_536)


class BinlogLog(ChangeLog):
    """MySQL's and MariaDB's binary log, read as one of the server's replicas."""

    def position(self, data: dict[str, Any]) -> BinlogPosition:
        return BinlogPosition.from_json(data)

    @contextmanager
    def open(self, ctx: LogContext, held: LogPosition | None) -> Iterator[LogSession]:
        assert held is None or isinstance(held, BinlogPosition)
        label = ctx.label
        schema, table = _split(ctx.table.table or "", ctx.source.conn.database or "")
        qualified = f"`{schema}`.`{table}`"
        with connection(ctx.source.conn) as db:
            mariadb = check_server(db, label)
            # a batch after a snapshot reads up to the log's end as it is now; the table then
            # has every column the log up to there has
            upto = None if held is None else log_end(db)
            columns = database("mysql").probe(db, f"SELECT * FROM {qualified}")
            plan = _plan(columns, dict(ctx.table.columns), label)
            by_gtid = held is not None and moved_server(db, held.file, held.pos, held.gtid, mariadb)
            if held is not None and not by_gtid and held.file not in binary_logs(db):
                raise ConnectorError(
                    f"{label}: the binlog file {held.file} that the table holds a position in "
                    "was purged from the server: the log between is gone; " + ctx.refresh_hint()
                )
            yield _Session(ctx, db, plan, columns, (schema, table), mariadb, upto, by_gtid)

    def release(self, ctx: LogContext) -> tuple[str, int | None]:
        return "", _behind(ctx.source.conn, held_position(self, ctx.landing))

    def status(
        self, source: LogSource, held: dict[str, LogPosition | None]
    ) -> list[dict[str, Any]]:
        """Each table's held binlog coordinates beside the server's log end."""
        with connection(source.conn) as db:
            end = "{}:{}".format(*log_end(db))
        return [
            {
                "table": nid,
                "held": None if at is None else at.describe(),
                "gtid": None if not isinstance(at, BinlogPosition) else at.gtid,
                "log_end": end,
            }
            for nid, at in held.items()
        ]

    def drop(self, source: LogSource) -> str:
        raise ConnectorError(
            f"{source.name!r} is a mysql-cdc source: it keeps nothing on the server (the "
            "server purges its binlog by its own expiry settings)"
        )


class _Session(LogSession):
    def __init__(
        self,
        ctx: LogContext,
        db: Any,
        plan: list[Delivery],
        columns: list[DbColumn],
        name: tuple[str, str],
        mariadb: bool,
        upto: tuple[str, int] | None,
        by_gtid: bool,
    ) -> None:
        self.ctx, self.db, self.plan, self.name = ctx, db, plan, name
        self.mariadb, self.upto, self.by_gtid = mariadb, upto, by_gtid
        self.convert = _Converter(plan, columns, ctx.label)
        self.keys = key_names(db, *name)
        self._reached: BinlogPosition | None = None

    @property
    def columns(self) -> dict[str, str]:
        return _envelope(self.plan)

    def key_names(self) -> list[str]:
        return self.keys

    def key_columns(self) -> list[int]:
        names = [d.name for d in self.plan]
        return [names.index(k) for k in self.keys]

    def snapshot(self, out: Batch, going: LogPosition | None) -> Iterator[LogPosition]:
        assert going is None  # read whole
        yield _snapshot(self.db, "`{}`.`{}`".format(*self.name), self.plan, out, self.mariadb)

    def changes(self, held: LogPosition) -> Iterator[tuple[_Commit, list[Change]]]:
        assert isinstance(held, BinlogPosition)
        ctx, db = self.ctx, self.db
        if self.upto is None:  # after the snapshot: the batch reads on from its coordinates
            self.upto = log_end(db)
        # the GTIDs up to the batch's end, for a failover; changes read from another server
        # than the landed ones are sequenced after them
        landed = ctx.landing.position().cdc
        carried = BinlogPosition.from_json(landed).shift if landed else 0
        shift = next_seq(ctx.landing, history(ctx.landing)) if self.by_gtid else carried
        packets = None if self.by_gtid or len(ctx.readers) < 2 else self._shared(held)
        gtid = gtid_at(db, self.upto, self.mariadb)
        self._reached = BinlogPosition(self.upto[0], self.upto[1], gtid, shift)
        names = [d.name for d in self.plan]
        found = _transactions(ctx, held, self.by_gtid, self.upto, shift, *self.name, names, packets)
        for commit, first, changes in found:  # a large transaction in pieces
            yield commit, [Change(op, b, a, i) for i, (op, b, a) in enumerate(changes, first)]

    def _shared(self, held: BinlogPosition) -> Replay | None:
        """The table's part of the run's one read of the source's log (sharedread.py), its
        batch then ending where that read does if it ends earlier; None: it reads alone."""
        ctx, db, upto = self.ctx, self.db, self.upto
        assert upto is not None
        tables = {t: _split(t, ctx.source.conn.database or "") for t in ctx.readers}

        def begin() -> Span:  # from the earliest position the tables hold on this server
            logs = binary_logs(db)
            starts = [(held.file, held.pos)]
            for landing in ctx.readers.values():
                data = landing.position().cdc
                other = BinlogPosition.from_json(data) if data else None
                if (
                    other is not None
                    and other.file in logs
                    and not moved_server(db, other.file, other.pos, other.gtid, self.mariadb)
                ):
                    starts.append((other.file, other.pos))
            return Span(min(starts, key=in_order), upto)

        def dump(start: tuple[str, int]) -> tuple[Any, BinlogDump]:
            reader = _connect(ctx)
            try:
                return reader, BinlogDump(reader, _server_id(ctx), start, None)
            except BaseException:
                reader.close()
                raise

        key = (ctx.run_id, ctx.source.name)
        found = shared_packets(
            key, tables, ctx.table.table or "", (held.file, held.pos), begin, dump
        )
        if found is None:
            return None
        span, replay = found
        self.upto = min(upto, span.upto, key=in_order)
        return replay

    def envelopes(self, rows: Rows, parts: BatchParts | None) -> Any:
        return self.convert.table(rows)

    def reached(self, held: LogPosition) -> BinlogPosition:
        assert self._reached is not None  # the changes were read
        return self._reached

    def worth_recording(self, held: LogPosition, reached: LogPosition) -> bool:
        # a held position stays inside the log the server keeps
        assert isinstance(held, BinlogPosition) and isinstance(reached, BinlogPosition)
        return self.by_gtid or reached.file != held.file or reached.pos - held.pos >= IDLE_ADVANCE


# ----------------------------------------------------------------------------- the server


def _split(table: str, database: str) -> tuple[str, str]:
    schema, _, name = table.rpartition(".")
    return (schema or database).strip("`"), name.strip("`")


def _behind(conn: Any, held: LogPosition | None) -> int | None:
    """Bytes of binlog the server wrote past the position `held` (how far the table is behind
    the log's end)."""
    if not isinstance(held, BinlogPosition):
        return None
    with connection(conn) as db, db.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        logs = [(str(row[0]), int(row[1])) for row in cur.fetchall()]
    first = file_number(held.file)
    return sum(size for name, size in logs if file_number(name) >= first) - held.pos


def _snapshot(
    db: Any, qualified: str, plan: list[Delivery], out: Batch, mariadb: bool
) -> BinlogPosition:
    """Every row of the table now, as `r` changes added to `out`, and the binlog coordinates
    of that moment."""
    import pymysql

    with db.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if mariadb:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = dict(cur.fetchall())
            at = (status["Binlog_snapshot_file"], int(status["Binlog_snapshot_position"]))
        else:  # MySQL: the coordinates under a global read lock, held only while they are read
            cur.execute("FLUSH TABLES WITH READ LOCK")
            try:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                at = log_end(db)
            finally:
                cur.execute("UNLOCK TABLES")
    cols = ", ".join(f"`{d.name}`" for d in plan)
    with db.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT {cols} FROM {qualified}")
        for row in cur:
            out.add("r", None, list(row))
    db.commit()
    return BinlogPosition(at[0], at[1])


_DDL = re.compile(r"^\s*(alter|truncate|drop|rename|create\s+or\s+replace)\b", re.IGNORECASE)
# an ALTER that keeps the table: its rows show what it did to the columns (mapped by name),
# unless it gave the rows there a value (a default, or NOT NULL's implicit one)
_FILLS = re.compile(r"\badd\b.*\b(default|not\s+null)\b", re.I | re.S)
_RESHAPE = re.compile(r"^\s*alter\b(?!.*\brename\s+(?!column\b|index\b|key\b))", re.I | re.S)


def _transactions(
    ctx: LogContext,
    held: BinlogPosition,
    by_gtid: bool,
    upto: tuple[str, int],
    shift: int,
    schema: str,
    table: str,
    names: list[str],
    shared: Replay | None = None,
) -> Any:
    """Each transaction committed between `held` (its file and offset, or `by_gtid` its
    GTIDs) and `upto` that changed the table: its commit and its changes, (op, before, after)
    in order, images in the order of `names`; a truncate as ("truncate", None, None). A
    statement that changes the table's shape is refused by name. Read from the server, or
    from the run's `shared` read of the log, which may begin before `held`."""
    import pymysql

    db = None if shared is not None else _connect(ctx)
    end = in_order(upto)
    since = (0, 0) if by_gtid else in_order((held.file, held.pos))
    gtid: str | None = None
    spool = _Spool()  # the open transaction's row events of the table
    orders: dict[tuple[str, ...], list[int]] = {}  # a log image's columns: the plan's

    def pieces(commit: _Commit) -> Iterator[tuple[_Commit, int, list[tuple[str, Any, Any]]]]:
        """The spooled transaction decoded, PIECE changes at a time."""
        first, piece = 0, list[tuple[str, Any, Any]]()
        for event in spool:
            if event is None:
                piece.append(("truncate", None, None))
            else:
                op, columns, rows = event.op, event.names, event.images()
                order = orders.get(columns)
                if order is None:
                    order = orders[columns] = _order(columns, names, ctx)
                if order:
                    piece += [(op, _arranged(b, order), _arranged(a, order)) for b, a in rows]
                else:  # the log's columns are the plan's
                    piece += [(op, b, a) for b, a in rows]
            if len(piece) >= PIECE:
                yield commit, first, piece
                first, piece = first + len(piece), []
        if piece:
            yield commit, first, piece

    named = re.compile(rf"(`?{re.escape(schema)}`?\s*\.\s*)?`?{re.escape(table)}`?(\W|$)", re.I)
    try:
        if shared is None:
            start = None if by_gtid else (held.file, held.pos)
            shared_or_dump: Packets = BinlogDump(db, _server_id(ctx), start, held.gtid)
        else:
            shared_or_dump = shared
        stream = BinlogStream(shared_or_dump, (schema, table), f"source {ctx.name}")
        file, number = "", 0
        for kind, pos, when, what in stream:
            if stream.file is not file:
                file, number = stream.file, file_number(stream.file)
            if (number, pos) > end:
                break
            if (number, pos) <= since:
                continue  # a shared read's, before the table's position
            if kind == ROWS:
                spool.add(what)
            elif kind == GTID_AT:
                gtid = what
                spool.clear()
            elif kind == STATEMENT and what[1].strip().upper() == "BEGIN":
                spool.clear()
            else:
                ddl, query = None, ""
                if kind == STATEMENT:
                    current, query = what[0], what[1].strip()
                    ddl = query.upper() != "COMMIT" and _DDL.match(query) and named.search(query)
                    if ddl and not _ours(current, query, schema):
                        ddl = None  # a table of the same name in another database
                commit = kind == COMMIT or query.upper() == "COMMIT"
                if ddl and query.lower().startswith("truncate"):
                    spool.add(None)
                elif ddl and (not _RESHAPE.match(query) or _FILLS.search(query)):
                    what_it_did = (
                        "added a column with a value for the rows already there, which they "
                        "took without a change in the log"
                        if _RESHAPE.match(query)
                        else "dropped, renamed or replaced the table"
                    )
                    raise ConnectorError(
                        f"source {ctx.name}: a statement in the log {what_it_did} ({query[:80]}): "
                        f"take a new snapshot with `rivc run --full-refresh --select "
                        f"source:{ctx.name}`"
                    )
                if (commit or ddl) and spool:
                    committed = datetime.fromtimestamp(when, UTC)
                    yield from pieces(_Commit(stream.file, pos, gtid, committed, shift))
                    spool.clear()
    except pymysql.err.OperationalError as e:
        if e.args[0] != 1236:  # the server has no log from the held position on
            raise
        at = f"GTIDs {held.gtid}" if by_gtid else f"position {held.describe()}"
        raise ConnectorError(
            f"source {ctx.name}: the server's binlog does not reach back to the {at} the table "
            "holds: the log between is gone; take a new snapshot with "
            f"`rivc run --full-refresh --select source:{ctx.name}`"
        ) from None
    finally:
        spool.clear()
        if db is not None:
            db.close()


def _connect(ctx: LogContext) -> Any:
    """A connection of its own for a binlog dump."""
    import pymysql

    c = ctx.source.conn
    return pymysql.connect(
        host=c.host, port=c.port, user=c.user or "", password=c.password or "", **c.tls.pymysql()
    )


def _server_id(ctx: LogContext) -> int:
    return server_id(ctx.source.project, ctx.source.name, ctx.source.config)


class _Spool:
    """A transaction's row events of the table (None: a truncate), kept until its commit says
    where it ends: in memory up to SPOOL_BYTES, the rest in a temporary file, so a large
    transaction is never held in memory, decoded or not."""

    def __init__(self) -> None:
        self.held: list[RowsEvent | None] = []
        self.size = 0
        self.file: Any = None
        self.tables: list[Any] = []  # the spilled events' table maps, by place

    def __bool__(self) -> bool:
        return bool(self.held) or self.file is not None

    def add(self, event: RowsEvent | None) -> None:
        if self.file is None:
            self.held.append(event)
            self.size += 0 if event is None else len(event.body)
            if self.size > SPOOL_BYTES:
                import tempfile

                self.file = tempfile.TemporaryFile(prefix="rivc-binlog-")
            return
        if event is None:
            self.file.write(_SPILLED.pack(0, 0, 0))
            return
        if event.table not in self.tables:
            self.tables.append(event.table)
        at = self.tables.index(event.table)
        self.file.write(_SPILLED.pack(event.kind, at, len(event.body)) + event.body)

    def __iter__(self) -> Iterator[RowsEvent | None]:
        yield from self.held
        if self.file is None:
            return
        self.file.flush()
        self.file.seek(0)
        read = self.file.read
        while head := read(_SPILLED.size):
            kind, at, size = _SPILLED.unpack(head)
            yield RowsEvent(kind, self.tables[at], read(size)) if kind else None

    def clear(self) -> None:
        self.held, self.size, self.tables = [], 0, []
        if self.file is not None:
            self.file.close()
            self.file = None


def _arranged(image: list[Any] | None, order: list[int]) -> list[Any] | None:
    if image is None:
        return None
    padded = [*image, None]  # a column the image lacks: NULL, past its end
    return [padded[j] for j in order]


def _order(columns: tuple[str, ...], names: list[str], ctx: LogContext) -> list[int]:
    """Where each of the plan's columns is in a row image of the log (empty: in the same
    order). A column the image lacks was added to the table after it: NULL. A column the table
    no longer has is refused by name."""
    gone = [n for n in columns if n not in names]
    if gone:
        raise ConnectorError(
            f"source {ctx.name}: column {gone[0]} is in the log but no longer in the table "
            "(dropped or renamed); a table's changes can only add columns: take a new snapshot "
            f"with `rivc run --full-refresh --select source:{ctx.name}`"
        )
    if list(columns) == names:
        return []
    # a column added after the image: its place is past the image's end, read as NULL below
    return [columns.index(n) if n in columns else len(columns) for n in names]


def _envelope(plan: list[Delivery]) -> dict[str, str]:
    return mysql_cdc_columns(None, {d.name: d.spark for d in plan}) or {}


def _ours(current: str, query: str, schema: str) -> bool:
    """Whether a statement on a table of our table's name is on ours: it names our database,
    or ran in it (`current`)."""
    return current == schema or re.search(rf"`?{re.escape(schema)}`?\s*\.", query) is not None


# ----------------------------------------------------------------------------- values


def _plan(columns: list[DbColumn], declared: dict[str, str], label: str) -> list[Delivery]:
    """Each column's delivery; a type the log does not give as the snapshot reads it is refused
    by name."""
    plan = deliveries("mysql", columns, {}, label)
    for d, col in zip(plan, columns, strict=True):
        if col.type in ("set", "json") or (d.kind not in _READ and col.type not in _AS_TEXT):
            raise ConnectorError(
                f"{label}: column {d.name} has type {d.db_type}, which mysql-cdc does not read "
                "from the binlog yet"
            )
    return [
        replace(d, spark=declared_type(declared[d.name])) if d.name in declared else d for d in plan
    ]


class _Converter:
    """Row images (lists of the server's values, in column order) to Arrow arrays of each
    column's delivered type: exact or refused by name."""

    def __init__(self, plan: list[Delivery], columns: list[DbColumn], label: str) -> None:
        self.plan, self.label = plan, label
        self.unsigned = [_BITS[c.type] if c.unsigned and c.type in _BITS else 0 for c in columns]
        self.text = [_AS_TEXT.get(c.type) for c in columns]
        self.width = [c.precision or 1 for c in columns]

    def table(self, rows: Rows) -> Any:
        import pyarrow as pa

        commits = rows.commits
        return pa.table(
            {
                "op": pa.array(rows.ops, pa.string()),
                "before": self._images(rows.before),
                "after": self._images(rows.after),
                "binlog_file": pa.array([c and c.file for c in commits], pa.string()),
                "binlog_pos": pa.array([c and c.pos for c in commits], pa.int64()),
                "seq": pa.array([Decimal(x) for x in rows.seq], pa.decimal128(38, 0)),
                "gtid": pa.array([c and c.gtid for c in commits], pa.string()),
                "commit_time": pa.array(
                    [c and c.time for c in commits], pa.timestamp("us", tz="UTC")
                ),
            }
        )

    def _images(self, images: list[list[Any] | None]) -> Any:
        import pyarrow as pa

        arrays = [
            self._column(j, d, [None if img is None else img[j] for img in images])
            for j, d in enumerate(self.plan)
        ]
        fields = [pa.field(d.name, arrays[j].type) for j, d in enumerate(self.plan)]
        mask = pa.array([img is None for img in images], pa.bool_())
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)

    def _column(self, j: int, d: Delivery, values: list[Any]) -> Any:
        import pyarrow as pa

        bits = self.unsigned[j]
        if bits:  # the binlog decodes unsigned integers as signed
            values = [v + (1 << bits) if v is not None and v < 0 else v for v in values]
        text = self.text[j]
        if text is not None:  # the snapshot's and the log's values, as the mysql source has them
            values = [None if v is None else text(v, self.width[j]) for v in values]
        kind = pa.binary() if d.spark == "binary" else arrow_type(d.spark)
        try:
            return pa.array(values, kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            for v in values:  # the first value that does not fit, named
                try:
                    pa.array([v], kind)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
                    raise ConnectorError(
                        f"{self.label}: column {d.name} ({d.db_type}) holds {str(v)[:80]!r}, "
                        f"which {d.spark} cannot hold exactly; declare a wider type in columns:"
                    ) from None
            raise
