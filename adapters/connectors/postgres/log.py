"""postgres-cdc's change log (docs/cdc.md): a logical replication slot and a publication per
source, read through the change-log driver (changelog.py), which lands each table's batch and
then releases: the slot moves up to the lowest position any table of the source holds, so it
never confirms what a table does not hold.

- The snapshot is taken after the slot exists, and records which transactions it held: their
  changes in the stream are skipped, so none is lost or doubled. A first snapshot by a primary
  key is read in parts (slot.Parts): a run killed during it reads on in a snapshot of its
  own, and each change is judged by the snapshot of the part that read its key.
- A batch reads the transactions that commit before the log's position when the run began.
  Values are delivered as the `postgres` source delivers them (compiler/dbtypes.py), exactly
  or refused by name. A TOASTed column an update left alone is carried over from the row's
  last version (before-image, this batch, or the landed history), never written as NULL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, NamedTuple

from rivc.compiler.dbtypes import Delivery
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
from ...ingest.changes import BatchParts, history, newest
from ...ingest.extract import Extraction
from ..database.engine import connection, database
from ..database.relational import deliveries
from .copy import CopyPlan, arrow_type, convert
from .pgoutput import (
    PG_EPOCH_US,
    UNCHANGED,
    Decoder,
    Relation,
    Transaction,
    Truncate,
    Value,
    lsn_text,
)
from .pgoutput import Change as PgChange
from .sharedread import shared_messages
from .slot import KEY_KINDS, LogicalSlot, Parts, Undecodable, Visibility
from .spec import PostgresCdcConfig, cdc_columns

SEQ = 10**9  # seq = commit LSN * SEQ + the change's place in its transaction
PIECE = 10_000  # a large transaction is read this many changes at a time
IDLE_ADVANCE = 16 << 20  # a WAL segment


@dataclass(frozen=True)
class PgPosition(LogPosition):
    """The log position a table holds every change before, and what its snapshot held."""

    lsn: int
    parts: Parts
    reading: bool = False  # a snapshot read in parts, under way

    def to_json(self) -> dict[str, Any]:
        return {
            "lsn": self.lsn,
            **self.parts.to_json(),
            **({"reading": True} if self.reading else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PgPosition:
        return cls(int(data["lsn"]), Parts.from_json(data), bool(data.get("reading")))

    def describe(self) -> str:
        return lsn_text(self.lsn)


class _Commit(NamedTuple):  # one per transaction read
    txn: Transaction

    def seq(self, i: int) -> int:
        return self.txn.final_lsn * SEQ + i


@dataclass(frozen=True)
class _Last:
    """A key's newest image among the changes at hand (None: none yet). Values still
    UNCHANGED in it (all of them when there is no image) are those of the newest version of
    key `landed` in the landed history and the batch's files written so far. A deleted key
    keeps its last image for an insert half of a move from it."""

    image: tuple[Value, ...] | None
    landed: tuple[Value, ...] | None
    deleted: bool = False


def slot_names(project: str, source: str, config: PostgresCdcConfig) -> tuple[str, str]:
    """The source's slot and publication: as configured, else named after project and source."""
    slot = config.slot_name or re.sub(r"[^a-z0-9_]", "_", f"rivc_{project}_{source}".lower())[:63]
    return slot, config.publication_name or f"rivc_{source}"


class PgOutputLog(ChangeLog):
    """PostgreSQL's log through a logical replication slot and a publication (pgoutput), one
    of each per source."""

    def position(self, data: dict[str, Any]) -> PgPosition:
        return PgPosition.from_json(data)

    def land(self, ctx: LogContext) -> Extraction:
        """A log the slot can no longer decode (its publication dropped under it) is refused
        naming the full refresh that recovers; that full refresh makes slot and publication
        again first, before any of the source's tables reads where the slot stands (so every
        snapshot meets the new slot's log, whichever thread or process comes first)."""
        slot_name, _ = slot_names(ctx.source.project, ctx.source.name, ctx.source.config)
        if ctx.full_refresh:
            with self._slot(ctx.source) as slot:
                if slot.confirmed() is not None:  # a slot that may not decode: made again
                    tables = ctx.source.tables
                    slot.remake([t for t in tables if t not in slot.refusals(tables)])
        try:
            return super().land(ctx)
        except Undecodable as exc:
            raise ConnectorError(
                f"source {ctx.name}: {exc.message} after slot {slot_name} began, so the log "
                "since cannot be decoded through it: take a new snapshot of the source's "
                f"tables with `rivc run --full-refresh --select source:{ctx.source.name}` "
                "(docs/cdc.md)"
            ) from None

    @contextmanager
    def _slot(self, source: LogSource) -> Iterator[LogicalSlot]:
        slot, publication = slot_names(source.project, source.name, source.config)
        with connection(source.conn) as db:
            db.execute("SET default_transaction_read_only = off")  # the slot and publication
            yield LogicalSlot(db, slot, publication)

    @contextmanager
    def open(self, ctx: LogContext, held: LogPosition | None) -> Iterator[LogSession]:
        assert held is None or isinstance(held, PgPosition)
        config: PostgresCdcConfig = ctx.source.config
        table, tables = ctx.table.table or "", ctx.source.tables
        with self._slot(ctx.source) as slot:
            refused = slot.refusals(tables)
            if refused and config.auto_create_publication:
                slot.unpublish(list(refused))  # never left where the application's writes fail
            if table in refused:
                raise ConnectorError(f"{ctx.label}: {refused[table]}")
            held_any = any(s.position().cdc for s in ctx.siblings)
            slot.ensure(
                [t for t in tables if t not in refused],
                config.auto_create_slot,
                config.auto_create_publication,
                held=held_any and not ctx.full_refresh,
            )
            confirmed = slot.confirmed() or 0
            if held is not None and confirmed > held.lsn:
                raise ConnectorError(
                    f"{ctx.label}: slot {slot.slot} confirms {lsn_text(confirmed)}, past what the "
                    f"table holds ({lsn_text(held.lsn)}): the log between is gone (the slot was "
                    "dropped and made again, or moved by another reader); " + ctx.refresh_hint()
                )
            upto = slot.current()  # first: the table now has every column the log up to it has
            plan = deliveries(
                "postgres",
                database("postgres").probe(slot.con, f"SELECT * FROM {table}"),
                dict(ctx.table.columns),
                ctx.label,
            )
            yield _Session(ctx, slot, plan, upto, confirmed)

    def release(self, ctx: LogContext) -> tuple[str, int | None]:
        """Move the slot to the lowest log position the source's tables hold (a table that
        never ran takes a snapshot of its own, and needs none of the log before it). Returns
        how much log the server keeps for the slot then: for the node's message, and in
        bytes."""
        from ...ops.report import human_bytes
        from ...util.faults import fault

        held = [
            p.lsn
            for p in (held_position(self, s) for s in ctx.siblings)
            if isinstance(p, PgPosition)
        ]
        if held:
            fault("before-slot-advance", ctx.name)
        with self._slot(ctx.source) as slot:
            if held:
                slot.advance(min(held))
            lag = slot.lag_bytes()
        kept = "" if lag is None else f"; the server keeps {human_bytes(lag)} of log for the slot"
        return kept, lag

    def status(
        self, source: LogSource, held: dict[str, LogPosition | None]
    ) -> list[dict[str, Any]]:
        with self._slot(source) as slot:
            confirmed, lag = slot.confirmed(), slot.lag_bytes()
        return [
            {
                "table": nid,
                "slot": slot.slot,
                "confirmed": None if confirmed is None else lsn_text(confirmed),
                "held": None if at is None else at.describe(),
                "lag_bytes": lag,
            }
            for nid, at in held.items()
        ]

    def drop(self, source: LogSource) -> str:
        with self._slot(source) as slot:
            slot.drop()
        return f"dropped slot {slot.slot} and publication {slot.publication}"


class _Session(LogSession):
    def __init__(
        self, ctx: LogContext, slot: LogicalSlot, plan: list[Delivery], upto: int, confirmed: int
    ) -> None:
        self.ctx, self.slot, self.plan = ctx, slot, plan
        self.upto, self.confirmed, self.end = upto, confirmed, upto
        self.table = ctx.table.table or ""
        self.seen: Parts | None = None  # the snapshot's parts, once the log is read after it
        self.key_cols: list[int] = []  # the key's places for a snapshot in parts
        self._keys: list[int] | None = None

    @property
    def columns(self) -> dict[str, str]:
        return _spark_columns(self.plan)

    def check_added(self, added: list[str]) -> None:
        _check_defaults(self.slot.con, self.ctx, added)

    def key_columns(self) -> list[int]:
        if self._keys is None:
            self._keys = _key_columns(self.ctx, self.plan)
        return self._keys

    def key_names(self) -> list[str]:
        return [self.plan[j].name for j in self.key_columns()]

    def snapshot(self, out: Batch, going: LogPosition | None) -> Iterator[LogPosition]:
        assert going is None or isinstance(going, PgPosition)
        # the log it meets begins where the slot stood when its first part was read
        origin = self.confirmed if going is None else going.lsn
        parts = None if going is None else going.parts
        for seen in _snapshot(self.slot.con, self.table, self.plan, out, self, parts):
            yield PgPosition(origin, seen, reading=seen.after() is not None)

    def changes(self, held: LogPosition) -> Iterator[tuple[_Commit, list[Change]]]:
        assert isinstance(held, PgPosition)
        seen, plan, qualified = held.parts, self.plan, _qualified(self.table)
        self.seen = seen
        self.key_cols = self.key_columns() if len(seen.seen) > 1 else []
        readers = frozenset(_qualified(t) for t in self.ctx.readers)
        if len(readers) > 1 and qualified in readers:  # one read of the slot for them all
            key = (self.ctx.run_id, self.ctx.source.name)
            upto, messages = shared_messages(key, self.slot, readers, qualified, self.upto)
            self.upto = min(self.upto, upto)  # a read that began earlier ends there
            txns = Decoder(held.lsn, PIECE, before=self.upto).feed(messages)
        else:
            txns = self.slot.changes(held.lsn, self.upto, PIECE)
        self.end = max(held.lsn, self.upto)
        # each relation the log describes (a new one when the table's shape changed): whether
        # it is this table, and its layout; looked up by identity, once per relation
        known: dict[int, tuple[Relation, bool, tuple[int | None, ...] | None]] = {}
        for txn in txns:
            self.end = max(self.end, txn.end_lsn)
            if seen.everywhere(txn.xid):
                continue  # the snapshot has its changes
            found: list[Change] = []
            for i, change in enumerate(txn.changes, txn.first):
                if isinstance(change, Truncate):
                    if any(r.qualified == qualified for r in change.relations):
                        found.append(Change("truncate", None, None, i))
                    continue
                rel = change.relation
                entry = known.get(rel.oid)
                if entry is None or entry[0] is not rel:
                    mine = rel.qualified == qualified
                    entry = known[rel.oid] = (
                        rel,
                        mine,
                        _layout(self.ctx, rel, plan) if mine else None,
                    )
                if not entry[1]:
                    continue
                layout = entry[2]
                before, image = _reshape(change.before, layout), _reshape(change.after, layout)
                op = {"insert": "c", "update": "u", "delete": "d"}[change.op]
                found.append(Change(op, _image(before, change, plan), image, i))
            if found:
                yield _Commit(txn), found

    def admit(self, commit: Any, change: Change) -> Change:
        if not self.key_cols or self.seen is None:
            return change
        # a snapshot in parts: the part that read the key decides
        op, before, after = self.seen.unread(
            commit.txn.xid, self.key_cols, change.op, change.before, change.after
        )
        return Change(op, before, after, change.place)

    def spared(self, commit: Any, key: tuple[Any, ...]) -> bool:
        return self.seen is not None and self.seen.holds(commit.txn.xid, key)

    def envelopes(self, rows: Rows, parts: BatchParts | None) -> Any:
        return _envelopes(self.ctx, self.plan, rows, self.ctx.label, parts)

    def reached(self, held: LogPosition) -> PgPosition:
        assert isinstance(held, PgPosition)
        return replace(held, lsn=max(held.lsn, self.end), reading=False)

    def worth_recording(self, held: LogPosition, reached: LogPosition) -> bool:
        # the log moved a segment past the held position
        assert isinstance(held, PgPosition) and isinstance(reached, PgPosition)
        return reached.lsn - held.lsn >= IDLE_ADVANCE


def _qualified(table: str) -> str:
    return table if "." in table else f"public.{table}"


def _check_defaults(db: Any, ctx: LogContext, new: list[str]) -> None:
    """A column added with a default gave the rows it found that value with no change in the
    log, so merged tables would hold NULL there: refused by name."""
    if not new:
        return
    filled = db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attname = ANY(%s) "
        "AND atthasmissing",
        (ctx.table.table, new),
    ).fetchall()
    if filled:
        raise ConnectorError(
            f"source {ctx.name}: column {filled[0][0]} was added with a default, which the "
            "rows already there took without a change in the log: take a new snapshot with "
            f"`rivc run --full-refresh --select source:{ctx.name}`"
        )


def _layout(
    ctx: LogContext, relation: Relation, plan: list[Delivery]
) -> tuple[int | None, ...] | None:
    """Where each of the plan's columns is in a change of `relation`, or None when they are
    the same. A column the change lacks was added to the table after it: NULL. A column the
    table no longer has is refused by name."""
    names = [c.name for c in relation.columns]
    wanted = [d.name for d in plan]
    if names == wanted:
        return None
    gone = [n for n in names if n not in wanted]
    if gone:
        raise ConnectorError(
            f"source {ctx.name}: column {gone[0]} is in the log but no longer in the table "
            "(dropped or renamed); a table's changes can only add columns: take a new snapshot "
            f"with `rivc run --full-refresh --select source:{ctx.name}`"
        )
    at = {n: i for i, n in enumerate(names)}
    return tuple(at.get(n) for n in wanted)


def _reshape(
    image: tuple[Value, ...] | None, layout: tuple[int | None, ...] | None
) -> tuple[Value, ...] | None:
    if image is None or layout is None:
        return image
    return tuple(None if i is None else image[i] for i in layout)


def _image(before: tuple[Value, ...] | None, change: PgChange, plan: list[Delivery]) -> Any:
    """A before-image, or for a key-only one the key with the other columns NULL."""
    if before is None:
        return None
    if change.before_is_key:
        keys = {c.name for c in change.relation.columns if c.key}
        return tuple(v if d.name in keys else None for v, d in zip(before, plan, strict=True))
    return before


def _snapshot(
    db: Any,
    table: str,
    plan: list[Delivery],
    out: Batch,
    session: _Session,
    going: Parts | None,
) -> Iterator[Parts]:
    """Every row of `table` now, as `r` changes added to `out`, in a REPEATABLE READ snapshot.
    A table whose primary key Python orders as the server does (KEY_KINDS) is read in key
    order, above the parts `going` holds (an earlier run's), and what the landed parts and this
    one hold is yielded after every `snapshot_chunk_size` rows, for the driver to land; then
    once more at the end (the last part open above). A new snapshot of landed changes (`out`
    collects the keys it finds) is read whole."""
    ctx = session.ctx
    cols = ", ".join(f'"{d.name}"::text' for d in plan)
    key = session.key_columns()
    kinds = tuple(KEY_KINDS.get(_db_type(plan[j]), "") for j in key)
    parted = out.taken is None and bool(key) and all(kinds)
    if going is not None and not parted:
        raise ConnectorError(
            f"{ctx.label}: the snapshot a killed run began cannot be read on (the table's "
            "primary key changed): " + ctx.refresh_hint()
        )
    # the table's own columns: a bare name in ORDER BY would be the selected text
    query, args, size = f"SELECT {cols} FROM {table} AS rivc_t", (), 0
    if parted:
        exprs = [
            f'rivc_t."{plan[j].name}"' + (' COLLATE "C"' if k == "text" else "")
            for j, k in zip(key, kinds, strict=True)
        ]
        start = None if going is None else going.after()
        if start is not None:
            query += f" WHERE ({', '.join(exprs)}) > ({', '.join(['%s'] * len(exprs))})"
            args = tuple(start)
        query += f" ORDER BY {', '.join(exprs)}"
        size = ctx.source.config.snapshot_chunk_size
    uptos, seen = (going.uptos, going.seen) if going is not None else ((), ())
    with db.transaction():
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        now = Visibility.parse(db.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
        with db.cursor(name="rivc_snapshot") as cur:
            cur.itersize = 10_000
            cur.execute(query, args)
            for n, row in enumerate(cur, 1):
                out.add("r", None, tuple(row))
                if size and n % size == 0:
                    last = Parts(kinds, (), ()).key(row[j] for j in key)
                    yield Parts(kinds, (*uptos, last), (*seen, now))
    yield Parts(kinds if parted else (), (*uptos, None), (*seen, now))


# ----------------------------------------------------------------------------- values

_MONEY = re.compile(r"[^0-9.\-]")
_RETEXT = ("timestamptz", "money")  # the types whose text _text changes


def _text(d: Delivery, db_type: str, value: str) -> str:
    """pgoutput's text of a value as the `postgres` source selects it (dbtypes' expressions)."""
    if db_type == "timestamptz":  # the session is in UTC: the +00 the cast drops
        return re.sub(r"\+00(?=( BC)?$)", "", value)
    if db_type == "money":
        return ("-" if "-" in value else "") + _MONEY.sub("", value).replace("-", "")
    return value


def _column(d: Delivery, db_type: str, values: list[Any], plan: CopyPlan) -> Any:
    """One column's delivered Arrow array from text values (None for NULL)."""
    import pyarrow as pa

    if d.spark == "boolean" and d.kind == "native":
        return pa.array([None if v is None else v in ("t", "1") for v in values], pa.bool_())
    if d.spark == "binary":
        return pa.array([None if v is None else bytes.fromhex(v[2:]) for v in values], pa.binary())
    if d.spark.startswith("array"):
        raise ConnectorError(
            f"{plan.label}: column {d.name} is an array: not read from the log yet"
        )
    if db_type in _RETEXT:
        values = [None if v is None else _text(d, db_type, v) for v in values]
    texts = pa.array(values, pa.string())
    return convert(plan, d, texts)


def _images(
    images: Sequence[tuple[Value, ...] | None], plan: list[Delivery], types: list[str], cp: CopyPlan
) -> Any:
    """A struct array of row images (NULL where a change has none)."""
    import pyarrow as pa

    arrays = []
    for j, d in enumerate(plan):
        values = [None if img is None or img[j] is UNCHANGED else img[j] for img in images]
        arrays.append(_column(d, types[j], values, cp))
    fields = [
        pa.field(d.name, arrow_type(d.spark) if d.spark != "binary" else pa.binary()) for d in plan
    ]
    mask = pa.array([img is None for img in images], pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)


def _envelopes(
    ctx: LogContext, plan: list[Delivery], rows: Rows, label: str, parts: BatchParts | None = None
) -> Any:
    """`rows` as an Arrow table of change envelopes, values delivered as the `postgres` source
    delivers them; untouched TOASTed values filled in from the row's last version (in `rows`,
    the batch's `parts` written so far, or the landed history)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    types = [_db_type(d) for d in plan]
    cp = CopyPlan(plan, label)
    key_cols, rest = _fill_unchanged(ctx, rows, plan)
    after = _images(rows.after, plan, types, cp)
    if rest:
        written = [] if parts is None else parts.files()
        after = _from_history(ctx, after, key_cols, rest, plan, types, cp, written)
    before = _images(rows.before, plan, types, cp)
    return pa.table(
        {
            "op": pa.array(rows.ops, pa.string()),
            "before": before,
            "after": after,
            "commit_lsn": pa.array(
                [None if c is None else Decimal(c.txn.final_lsn) for c in rows.commits],
                pa.decimal128(20, 0),
            ),
            "seq": pa.array([Decimal(x) for x in rows.seq], pa.decimal128(38, 0)),
            "txid": pa.array([None if c is None else c.txn.xid for c in rows.commits], pa.int64()),
            "commit_time": pc.add(
                pa.array(
                    [None if c is None else c.txn.commit_us for c in rows.commits], pa.int64()
                ),
                PG_EPOCH_US,
            ).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def _db_type(d: Delivery) -> str:
    return d.db_type.split("(")[0].split("[")[0].strip()


def _fill_unchanged(
    ctx: LogContext, rows: Rows, plan: list[Delivery]
) -> tuple[list[int], dict[int, tuple[tuple[Value, ...] | None, list[int]]]]:
    """Give every TOASTed value an update left alone the row's last value: its before-image's
    (REPLICA IDENTITY FULL), or an earlier change's in this batch (the row's own, or for a
    moved key the row's under the key it moved from). Returns the key's columns and the rest:
    change -> the key whose newest landed version holds its values still unknown (None: no
    version can), and their columns (`_from_history`)."""
    if not any(a is not None and UNCHANGED in a for a in rows.after):
        return [], {}
    key_cols = _key_columns(ctx, plan)
    last: dict[tuple[Value, ...], _Last] = {}
    rest: dict[int, tuple[tuple[Value, ...] | None, list[int]]] = {}
    for n, (before, after, origin) in enumerate(
        zip(rows.before, rows.after, rows.origin, strict=True)
    ):
        if after is None:
            if before is not None:
                key = tuple(before[j] for j in key_cols)
                was = last.get(key) or _Last(None, key)
                last[key] = replace(was, deleted=True)
            continue
        key = tuple(after[j] for j in key_cols)
        landed = None
        if UNCHANGED in after:
            if before is not None and UNCHANGED not in before and not _key_only(before, key_cols):
                known = _Last(before, None)  # REPLICA IDENTITY FULL: the whole old row
            elif origin is not None:  # a moved key: the row it moved from, deleted just now
                came = tuple(origin[j] for j in key_cols)
                known = last.get(came) or _Last(None, came)
            else:
                known = last.get(key) or _Last(None, key)
                if known.deleted:  # an update of a key this batch deleted: unknown
                    known = _Last(None, None)
            if known.image is not None:
                image = known.image
                after = tuple(image[j] if v is UNCHANGED else v for j, v in enumerate(after))
                rows.after[n] = after
            if UNCHANGED in after:
                landed = known.landed
                rest[n] = (landed, [j for j, v in enumerate(after) if v is UNCHANGED])
        last[key] = _Last(after, landed)
    return key_cols, rest


def _from_history(
    ctx: LogContext,
    after: Any,
    key_cols: list[int],
    rest: dict[int, tuple[tuple[Value, ...] | None, list[int]]],
    plan: list[Delivery],
    types: list[str],
    cp: CopyPlan,
    written: list[str],
) -> Any:
    """The after-images of `rest`'s changes with their untouched TOASTed values taken from
    the newest version of the key each names in the landed history and the batch's files
    `written` so far; refused by name when none has it (or its newest version is a
    delete)."""
    import pyarrow as pa

    names = [plan[j].name for j in key_cols]
    images = after.to_pylist()
    order = [n for n in rest if rest[n][0] is not None]
    # each landed key as the landed images hold it: its text delivered like any image's
    keyed = [dict(zip(key_cols, rest[n][0] or (), strict=True)) for n in order]
    shaped = [tuple(k.get(j) for j in range(len(plan))) for k in keyed]
    converted = _images(shaped, plan, types, cp).to_pylist() if shaped else []
    wanted = {n: tuple(c[k] for k in names) for n, c in zip(order, converted, strict=True)}
    found = newest(ctx.landing, history(ctx.landing) + written, names, set(wanted.values()))
    for n, (_, cols) in rest.items():
        image = found.get(wanted[n]) if n in wanted else None
        if image is None:
            key = tuple(images[n][k] for k in names)
            raise ConnectorError(
                f"{cp.label}: an update of key {key} left a TOASTed column as it was, and the "
                "row's last value was never landed; set REPLICA IDENTITY FULL on the table "
                "(docs/cdc.md)"
            )
        for j in cols:
            images[n][plan[j].name] = image[plan[j].name]
    return pa.array(images, after.type)


def _key_only(image: tuple[Value, ...], key_cols: list[int]) -> bool:
    return all(v is None for j, v in enumerate(image) if j not in key_cols)


def _key_columns(ctx: LogContext, plan: list[Delivery]) -> list[int]:
    """The columns that identify a row in the log: the replica identity's index (REPLICA
    IDENTITY USING INDEX), else the primary key."""
    with connection(ctx.source.conn) as db:
        names = {
            r[0]
            for r in db.execute(
                "SELECT a.attname FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid "
                "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
                "WHERE c.oid = %s::regclass AND CASE WHEN c.relreplident = 'i' "
                "THEN i.indisreplident ELSE i.indisprimary END",
                (ctx.table.table,),
            ).fetchall()
        }
    return [j for j, d in enumerate(plan) if d.name in names]


def _spark_columns(plan: list[Delivery]) -> dict[str, str]:
    columns = cdc_columns(None, {d.name: d.spark for d in plan})
    assert columns is not None
    return columns
