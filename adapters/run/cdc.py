"""Running a change-log source table (postgres-cdc, docs/cdc.md): its changes since the
position its landing table holds, landed as one batch of change envelopes, then the slot moved
up to what every table of the source holds.

- The first run (and a full refresh) reads the table in a snapshot taken after the slot exists,
  as `op = r` changes, and records which transactions the snapshot held: their changes in the
  stream are skipped, so none is lost or doubled. A first snapshot by a primary key lands in
  parts (pgslot.Parts): a run killed during it reads on in a snapshot of its own, and each
  change is judged by the snapshot of the part that read its key.
- A batch holds every change of the table in transactions that commit before the log's position
  when the run began; transactions are never split. Values are delivered as the `postgres`
  source delivers them (compiler/dbtypes.py), exactly or refused by name. A TOASTed column an
  update left alone is carried over from the row's last version (before-image, this batch, or
  the landed history), never written as NULL.
- One Delta commit adds the batch and records the log position it holds (`Position.cdc`).
  Only then does the slot move, to the lowest position any table of the source holds: a run
  killed before that reads the same transactions again and lands only what is past its table's
  position; the slot never confirms what a table does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rivc.compiler.connector_specs import PostgresCdcConfig, cdc_columns
from rivc.compiler.dbtypes import Delivery
from rivc.compiler.errors import ConnectorError
from rivc.compiler.specs import SourceTable

from ..connectors.databases import Conn, connection, database
from ..connectors.pgcopy import CopyPlan, arrow_type, convert
from ..connectors.pgoutput import (
    UNCHANGED,
    Change,
    Relation,
    Transaction,
    Truncate,
    Value,
    lsn_text,
)
from ..connectors.pgslot import KEY_KINDS, LogicalSlot, Parts, Undecodable, Visibility
from ..connectors.relational import deliveries
from ..state import NodeResult
from ..util.faults import fault
from .changes import (
    ROWS_PER_FILE,
    BatchParts,
    check_shape,
    deletes,
    history,
    newest,
    next_seq,
)
from .extract import Extraction
from .landing import Landing, Position, new_batch_id

SEQ = 10**9  # seq = commit LSN * SEQ + the change's place in its transaction
IDLE_ADVANCE = 16 << 20  # a WAL segment


@dataclass(frozen=True, kw_only=True)
class CdcContext:
    nid: str
    name: str  # "source.table"
    table: SourceTable
    config: PostgresCdcConfig
    conn: Conn
    slot: str
    publication: str
    tables: list[str]  # the database tables of every table of the source
    landing: Landing
    siblings: list[Landing]  # the landing tables of the source's tables (this one included)
    run_id: str
    full_refresh: bool
    resume_from: str | None


@dataclass
class _Rows:
    """Envelopes gathered for one batch, as text images and their changes' facts."""

    ops: list[str] = field(default_factory=list)
    before: list[tuple[Value, ...] | None] = field(default_factory=list)
    after: list[tuple[Value, ...] | None] = field(default_factory=list)
    lsn: list[int | None] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    txid: list[int | None] = field(default_factory=list)
    time: list[Any] = field(default_factory=list)
    # the row image an insert half of a moved key came from (its TOASTed values are that row's)
    origin: list[tuple[Value, ...] | None] = field(default_factory=list)
    base: int = 0  # the snapshot's seq: 0, or after the landed history for a new snapshot

    def add(
        self,
        op: str,
        before: Any,
        after: Any,
        txn: Transaction | None,
        i: int,
        origin: tuple[Value, ...] | None = None,
    ) -> None:
        self.ops.append(op)
        self.before.append(before)
        self.after.append(after)
        self.origin.append(origin)
        self.lsn.append(None if txn is None else txn.final_lsn)
        self.seq.append(self.base if txn is None else txn.final_lsn * SEQ + i)
        self.txid.append(None if txn is None else txn.xid)
        self.time.append(None if txn is None else txn.commit_time)

    def __len__(self) -> int:
        return len(self.ops)

    def clear(self) -> None:
        for name in ("ops", "before", "after", "lsn", "seq", "txid", "time", "origin"):
            getattr(self, name).clear()


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


def extract_changes(ctx: CdcContext) -> Extraction:
    """The table's changes since its position, landed as one batch. A log the slot can no
    longer decode (its publication dropped under it) is refused naming the full refresh
    that recovers; that full refresh makes slot and publication again first, before any of
    the source's tables reads where the slot stands (so every snapshot meets the new slot's
    log, whichever thread or process comes first)."""
    if ctx.full_refresh:
        with connection(ctx.conn) as db:
            db.execute("SET default_transaction_read_only = off")
            slot = LogicalSlot(db, ctx.slot, ctx.publication)
            if slot.confirmed() is not None:  # a slot that may not decode: made again
                slot.remake([t for t in ctx.tables if t not in slot.refusals(ctx.tables)])
    try:
        return _extract(ctx)
    except Undecodable as exc:
        source = ctx.name.split(".")[0]
        raise ConnectorError(
            f"source {ctx.name}: {exc.message} after slot {ctx.slot} began, so the log "
            "since cannot be decoded through it: take a new snapshot of the source's "
            f"tables with `rivc run --full-refresh --select source:{source}` (docs/cdc.md)"
        ) from None


def _extract(ctx: CdcContext) -> Extraction:
    landing, label = ctx.landing, f"source {ctx.name}"
    at = landing.position()
    reading = bool((at.cdc or {}).get("reading"))  # a snapshot read in part
    if ctx.resume_from is not None and at.run == ctx.resume_from and not reading:
        kept, lag = _advance(ctx)  # the killed run may have died before it moved the slot
        message = f"batch {at.batch}, landed by the run this one resumes{kept}"
        result = NodeResult(ctx.nid, "source", "success", message=message, log_behind=lag)
        return Extraction(result, at.batch)
    held = None if ctx.full_refresh else at.cdc
    table = ctx.table.table or ""
    with connection(ctx.conn) as db:
        db.execute("SET default_transaction_read_only = off")  # the slot and publication
        slot = LogicalSlot(db, ctx.slot, ctx.publication)
        refused = slot.refusals(ctx.tables)
        if refused and ctx.config.auto_create_publication:
            slot.unpublish(list(refused))  # never left where the application's writes fail
        if table in refused:
            raise ConnectorError(f"{label}: {refused[table]}")
        held_any = any(s.position().cdc for s in ctx.siblings)
        slot.ensure(
            [t for t in ctx.tables if t not in refused],
            ctx.config.auto_create_slot,
            ctx.config.auto_create_publication,
            held=held_any and not ctx.full_refresh,
        )
        confirmed = slot.confirmed() or 0
        if held is not None and confirmed > int(held["lsn"]):
            raise ConnectorError(
                f"{label}: slot {ctx.slot} confirms {lsn_text(confirmed)}, past what the table "
                f"holds ({lsn_text(int(held['lsn']))}): the log between is gone (the slot was "
                "dropped and made again, or moved by another reader); take a new snapshot with "
                f"`rivc run --full-refresh --select source:{ctx.name}`"
            )
        upto = slot.current()  # first: the table now has every column the log up to it has
        plan = deliveries(
            "postgres",
            database("postgres").probe(db, f"SELECT * FROM {table}"),
            dict(ctx.table.columns),
            label,
        )
        if held is not None:
            added = check_shape(at.columns, _spark_columns(plan), label, ctx.name)
            _check_defaults(db, ctx, added)
        batch = new_batch_id(at.batch)
        schema = _envelopes(ctx, plan, _Rows(), label).schema
        parts = BatchParts(ctx.landing, batch, schema, ROWS_PER_FILE)
        resnapshot = held is None and at.cdc is not None  # a full refresh of landed changes
        landed, base = {}, 0
        if resnapshot:  # the rows the new snapshot does not find are deleted after it
            files = history(ctx.landing)
            names = [plan[j].name for j in _key_columns(ctx, plan)]
            landed, base = newest(ctx.landing, files, names), next_seq(ctx.landing, files)
        rows = _Rows(base=base)
        snapped, replacing, total = held is None or bool(held.get("reading")), ctx.full_refresh, 0
        if snapped:  # the first run, a full refresh, or a snapshot a killed run left part read
            taken: set[tuple[Any, ...]] | None = set() if resnapshot else None
            going = None if held is None else Parts.from_json(held)
            # the log it meets begins where the slot stood when its first part was read
            origin = confirmed if held is None else int(held["lsn"])
            for seen in _snapshot(db, table, plan, rows, parts, ctx, going, taken):
                if seen.after() is None:
                    break  # read to the end
                cdc = {"lsn": origin, **seen.to_json(), "reading": True}
                part = Position(batch=batch, columns=_spark_columns(plan), run=ctx.run_id, cdc=cdc)
                landing.commit(batch, parts.files(), part, parts.schema, replace=replacing)
                fault("between-chunks", ctx.name)
                replacing, total = False, total + parts.rows
                batch = new_batch_id(batch)
                parts.begin(batch)
            held = {"lsn": origin, **seen.to_json()}
            if taken is not None:
                gone = [image for key, image in landed.items() if key not in taken]
                parts.write(deletes(gone, base, parts.schema))
        assert held is not None  # the table's, or the snapshot's just read
        seen = Parts.from_json(held)
        after, reached = int(held["lsn"]), int(held["lsn"])
        layouts: dict[Relation, tuple[int | None, ...] | None] = {}
        key_cols = _key_columns(ctx, plan) if len(seen.seen) > 1 else []
        keys: list[int] | None = key_cols or None  # the primary key's, once an update needs it
        for txn in slot.changes(after, upto):
            reached = max(reached, txn.end_lsn)
            if seen.everywhere(txn.xid):
                continue  # the snapshot has its changes
            for i, change in enumerate(txn.changes):
                if isinstance(change, Truncate):
                    if any(r.qualified == _qualified(table) for r in change.relations):
                        # every row the table held goes: a delete for each, in its place
                        if len(rows):
                            parts.write(_envelopes(ctx, plan, rows, label, parts))
                            rows.clear()
                        held_rows = _newest(ctx, plan, history(ctx.landing) + parts.files())
                        taken_by = [v for k, v in held_rows.items() if not seen.holds(txn.xid, k)]
                        seq = txn.final_lsn * SEQ + i
                        parts.write(deletes(taken_by, seq, parts.schema))
                    continue
                if change.relation.qualified != _qualified(table):
                    continue
                if change.relation not in layouts:
                    layouts[change.relation] = _layout(ctx, change.relation, plan)
                layout = layouts[change.relation]
                before, image = _reshape(change.before, layout), _reshape(change.after, layout)
                op = {"insert": "c", "update": "u", "delete": "d"}[change.op]
                before = _image(before, change, plan)
                halves: list[tuple[str, Any, Any, Any]] = [(op, before, image, None)]
                if op == "u" and before is not None:  # the key changed, or REPLICA IDENTITY FULL
                    keys = keys if keys is not None else _key_columns(ctx, plan)
                    if image is not None and any(before[j] != image[j] for j in keys):  # moved:
                        # the old key goes; the new one comes with the old row's other values
                        halves = [("d", before, None, None), ("c", None, image, before)]
                for op, was, now, origin in halves:
                    if key_cols:  # a snapshot in parts: the part that read the key decides
                        op, was, now = seen.unread(txn.xid, key_cols, op, was, now)
                    if op:
                        rows.add(op, was, now, txn, i, origin)
        reached = max(reached, upto)
    if len(rows):
        parts.write(_envelopes(ctx, plan, rows, label, parts))
    fault("after-staging", ctx.name)
    if not parts.rows and not snapped:
        # nothing of this table: a new position only once the log moved a segment past the
        # held one (what the slot keeps stays bounded; idle runs commit nothing)
        parts.discard()
        if reached - int(held["lsn"]) >= IDLE_ADVANCE:
            moved = replace(at, run=ctx.run_id, cdc={**held, "lsn": reached})
            dt = landing.table()
            assert dt is not None  # it holds a position
            landing.commit(at.batch or 0, [], moved, landing.schema(dt))
        kept, lag = _advance(ctx)
        message = f"no new changes (at {lsn_text(reached)}){kept}"
        result = NodeResult(ctx.nid, "source", "success", rows=0, message=message, log_behind=lag)
        return Extraction(result, at.batch)
    position = Position(
        batch=batch,
        columns=_spark_columns(plan),
        floor=None if ctx.full_refresh else at.floor,
        run=ctx.run_id,
        cdc={**held, "lsn": reached},
    )
    landing.commit(batch, parts.files(), position, parts.schema, replace=replacing)
    fault("after-landing", ctx.name)
    kept, lag = _advance(ctx)
    total += parts.rows
    message = f"batch {batch}: {total} changes up to {lsn_text(reached)}{kept}"
    result = NodeResult(ctx.nid, "source", "success", rows=total, message=message, log_behind=lag)
    return Extraction(result, batch)


def _advance(ctx: CdcContext) -> tuple[str, int | None]:
    """Move the slot to the lowest log position the source's tables hold (a table that never
    ran takes a snapshot of its own, and needs none of the log before it). Returns how much
    log the server keeps for the slot then: for the node's message, and in bytes."""
    from ..ops.report import human_bytes

    held = [p.cdc["lsn"] for p in (s.position() for s in ctx.siblings) if p.cdc]
    if held:
        fault("before-slot-advance", ctx.name)
    with connection(ctx.conn) as db:
        db.execute("SET default_transaction_read_only = off")
        slot = LogicalSlot(db, ctx.slot, ctx.publication)
        if held:
            slot.advance(min(int(x) for x in held))
        lag = slot.lag_bytes()
    kept = "" if lag is None else f"; the server keeps {human_bytes(lag)} of log for the slot"
    return kept, lag


def _qualified(table: str) -> str:
    return table if "." in table else f"public.{table}"


def _check_defaults(db: Any, ctx: CdcContext, new: list[str]) -> None:
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
    ctx: CdcContext, relation: Relation, plan: list[Delivery]
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


def _image(before: tuple[Value, ...] | None, change: Change, plan: list[Delivery]) -> Any:
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
    rows: _Rows,
    parts: BatchParts,
    ctx: CdcContext,
    going: Parts | None,
    taken: set[tuple[Any, ...]] | None,
) -> Iterator[Parts]:
    """Every row of `table` now, as `r` changes, in a REPEATABLE READ snapshot, written
    ROWS_PER_FILE rows at a time to `parts` (memory stays bounded). A table whose primary key Python orders
    as the server does (KEY_KINDS) is read in key order, above the parts `going` holds (an
    earlier run's), and what the landed parts and this one hold is yielded after every
    `snapshot_chunk_size` rows, for the caller to land; then once more at the end (the last part
    open above). `taken`, when given (a new snapshot of landed changes, read whole), collects
    the keys found."""
    label = f"source {ctx.name}"
    cols = ", ".join(f'"{d.name}"::text' for d in plan)
    key = _key_columns(ctx, plan)
    kinds = tuple(KEY_KINDS.get(_db_type(plan[j]), "") for j in key)
    parted = taken is None and bool(key) and all(kinds)
    if going is not None and not parted:
        raise ConnectorError(
            f"{label}: the snapshot a killed run began cannot be read on (the table's primary "
            f"key changed): take a new snapshot with `rivc run --full-refresh --select "
            f"source:{ctx.name}`"
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
        size = ctx.config.snapshot_chunk_size
    uptos, seen = (going.uptos, going.seen) if going is not None else ((), ())
    names = [plan[j].name for j in key]

    def flush() -> None:
        envelopes = _envelopes(ctx, plan, rows, label, parts)
        if taken is not None and names:
            after = envelopes.column("after").combine_chunks()
            taken.update(zip(*(after.field(k).to_pylist() for k in names), strict=True))
        parts.write(envelopes)
        rows.clear()

    with db.transaction():
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        now = Visibility.parse(db.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
        with db.cursor(name="rivc_snapshot") as cur:
            cur.itersize = 10_000
            cur.execute(query, args)
            for n, row in enumerate(cur, 1):
                rows.add("r", None, tuple(row), None, 0)
                if len(rows) >= ROWS_PER_FILE or (size and n % size == 0):
                    flush()
                if size and n % size == 0:
                    last = Parts(kinds, (), ()).key(row[j] for j in key)
                    yield Parts(kinds, (*uptos, last), (*seen, now))
    if len(rows):
        flush()
    yield Parts(kinds if parted else (), (*uptos, None), (*seen, now))


# ----------------------------------------------------------------------------- values

_MONEY = re.compile(r"[^0-9.\-]")


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
    texts = pa.array([None if v is None else _text(d, db_type, v) for v in values], pa.string())
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
    ctx: CdcContext, plan: list[Delivery], rows: _Rows, label: str, parts: BatchParts | None = None
) -> Any:
    """`rows` as an Arrow table of change envelopes, values delivered as the `postgres` source
    delivers them; untouched TOASTed values filled in from the row's last version (in `rows`,
    the batch's `parts` written so far, or the landed history)."""
    import pyarrow as pa

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
                [None if x is None else _dec(x) for x in rows.lsn], pa.decimal128(20, 0)
            ),
            "seq": pa.array([_dec(x) for x in rows.seq], pa.decimal128(38, 0)),
            "txid": pa.array(rows.txid, pa.int64()),
            "commit_time": pa.array(rows.time, pa.timestamp("us", tz="UTC")),
        }
    )


def _newest(ctx: CdcContext, plan: list[Delivery], files: list[str]) -> dict[Any, Any]:
    """Each key's newest image in `files` before a truncate is applied; a table without a
    primary key cannot be emptied key by key: refused by name."""
    names = [plan[j].name for j in _key_columns(ctx, plan)]
    if not names:
        raise ConnectorError(
            f"source {ctx.name}: {ctx.table.table} was truncated and has no primary key, so its "
            "rows cannot be deleted one by one in the consumers: take a new snapshot with "
            f"`rivc run --full-refresh --select source:{ctx.name}`"
        )
    return newest(ctx.landing, files, names)


def _dec(value: int) -> Any:
    from decimal import Decimal

    return Decimal(value)


def _db_type(d: Delivery) -> str:
    return d.db_type.split("(")[0].split("[")[0].strip()


def _fill_unchanged(
    ctx: CdcContext, rows: _Rows, plan: list[Delivery]
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
    ctx: CdcContext,
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


def _key_columns(ctx: CdcContext, plan: list[Delivery]) -> list[int]:
    """The columns that identify a row in the log: the replica identity's index (REPLICA
    IDENTITY USING INDEX), else the primary key."""
    with connection(ctx.conn) as db:
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
