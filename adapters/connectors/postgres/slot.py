"""A PostgreSQL logical replication slot read through SQL (docs/cdc.md): the `postgres-cdc`
source's access to the log, with no streaming protocol.

- `ensure` creates the publication and the slot when asked (the built-in `pgoutput` plugin: no
  server extension) and refuses by name a server that cannot decode (`wal_level`). A table
  without a replica identity (`refusals`) is never published: the application's own updates
  and deletes of it would fail. A publication dropped under a slot is refused, never made
  again silently: the log since cannot be decoded through it (`Undecodable`).
- `changes` peeks whole transactions past a position without consuming them:
  `pg_logical_slot_peek_binary_changes` stops only at a commit, so a transaction is never split.
- `advance` moves the slot's confirmed position, and only forward: the source calls it once
  the changes up to there are committed in the tables, so the server keeps what a killed run
  has not landed.
- `snapshot` reads tables in one REPEATABLE READ transaction taken after the slot exists, and
  returns which transactions it already holds (`Visibility`): the stream's copies of those are
  skipped, so no change between the snapshot and the stream is lost or doubled.
- `Parts`: a snapshot read in key order and landed in parts, each run that reads on taking a
  snapshot of its own: a change is skipped by the snapshot of the part that holds its key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rivc.compiler.errors import ConnectorError

from .pgoutput import Decoder, Transaction, lsn_int, lsn_text


@dataclass(frozen=True)
class Visibility:
    """A snapshot's `pg_current_snapshot()`: which transactions it sees."""

    xmin: int
    xmax: int
    running: frozenset[int]  # in progress when it was taken: not in it

    @classmethod
    def parse(cls, text: str) -> Visibility:
        xmin, xmax, running = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in running.split(",") if x))

    def holds(self, xid: int) -> bool:
        """True when the snapshot saw transaction `xid` (32 bits, as pgoutput gives it)
        committed: its changes are in the snapshot already."""
        full = (self.xmax & ~0xFFFFFFFF) | xid  # the 64-bit id nearest the snapshot's horizon
        if full - self.xmax > 1 << 31:
            full -= 1 << 32
        elif self.xmax - full > 1 << 31:
            full += 1 << 32
        return full < self.xmin or (full < self.xmax and full not in self.running)

    def to_json(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(map(str, sorted(self.running)))}"


# primary key types a snapshot can be read in parts by: Python orders their values (from the
# log's text or a landed table) as PostgreSQL orders them (text under COLLATE "C")
KEY_KINDS = {
    "int2": "int",
    "int4": "int",
    "int8": "int",
    "text": "text",
    "varchar": "text",
    "uuid": "uuid",
}


@dataclass(frozen=True)
class Parts:
    """What a snapshot taken in parts holds. It is read in primary-key order; a run killed
    during it leaves the parts it landed, and the next run reads on above the last landed key
    in a snapshot of its own. Part i holds the keys above part i-1's last key up to its own
    (`None`: every key above), as snapshot `seen[i]` saw them. A table read whole is one part."""

    kinds: tuple[str, ...]  # each key column's KEY_KINDS kind, in the plan's order
    uptos: tuple[tuple[Any, ...] | None, ...]
    seen: tuple[Visibility, ...]

    def key(self, values: Any) -> tuple[Any, ...]:
        """A key as Python orders it like the server: from the log's text or a landed row."""
        return tuple(
            int(v) if kind == "int" else str(v).lower() if kind == "uuid" else str(v)
            for kind, v in zip(self.kinds, values, strict=True)
        )

    def holds(self, xid: int, key: Any = None) -> bool:
        """True when the snapshot that read `key`'s part saw transaction `xid` committed."""
        if len(self.seen) == 1:
            return self.seen[0].holds(xid)
        at = self.key(key)
        for upto, seen in zip(self.uptos, self.seen, strict=True):
            if upto is None or at <= upto:
                return seen.holds(xid)
        raise AssertionError("a key above every part: the snapshot is read whole first")

    def unread(
        self, xid: int, key_cols: list[int], op: str, before: Any, after: Any
    ) -> tuple[str, Any, Any]:
        """A change (op and images; an update that moved its row's key comes as a delete and
        an insert) as the parts have not read it: as it is, or op "" when the part that read
        its key holds its transaction."""
        image = after if after is not None else before
        if self.holds(xid, tuple(image[j] for j in key_cols)):
            return ("", None, None)
        return (op, before, after)

    def everywhere(self, xid: int) -> bool:
        for seen in self.seen:  # once per transaction read: no generator
            if not seen.holds(xid):
                return False
        return True

    def after(self) -> tuple[Any, ...] | None:
        """The last key read, where the next part begins; None before the first."""
        return self.uptos[-1] if self.uptos else None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": list(self.kinds),
            "parts": [
                {"upto": None if u is None else list(u), "visibility": s.to_json()}
                for u, s in zip(self.uptos, self.seen, strict=True)
            ],
        }

    @classmethod
    def from_json(cls, held: dict[str, Any]) -> Parts:
        """A landed position's parts; one written before parts existed is a single part."""
        if "parts" not in held:
            return cls((), (None,), (Visibility.parse(held["visibility"]),))
        uptos = tuple(None if p["upto"] is None else tuple(p["upto"]) for p in held["parts"])
        seen = tuple(Visibility.parse(p["visibility"]) for p in held["parts"])
        return cls(tuple(held["key"]), uptos, seen)


class Undecodable(ConnectorError):
    """The slot's log cannot be read through the publication: it was dropped (and perhaps made
    again) after the slot began, and pgoutput looks it up as of each change."""


class LogicalSlot:
    """One slot and its publication, over a psycopg connection in autocommit mode."""

    def __init__(self, con: Any, slot: str, publication: str) -> None:
        self.con, self.slot, self.publication = con, slot, publication

    @contextmanager
    def _serial(self) -> Iterator[None]:
        """Hold the slot for this session: PostgreSQL lets one backend use a slot at a time
        (another gets "replication slot ... is active"), and the tables of one source read,
        advance and remake it from several threads or processes. A session-level advisory lock,
        re-entrant within the session, released on the way out."""
        self.con.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"rivc slot {self.slot}",))
        try:
            yield
        finally:
            self.con.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"rivc slot {self.slot}",))

    def refusals(self, tables: list[str]) -> dict[str, str]:
        """Each of `tables` that must not be published, with why: with no replica identity
        (no primary key, a DEFERRABLE one, or REPLICA IDENTITY NOTHING), a published table's
        own UPDATE and DELETE statements fail in PostgreSQL."""
        out = {}
        for table in tables:
            row = self.con.execute(
                "SELECT c.relreplident, (SELECT i.indimmediate FROM pg_index i "
                "WHERE i.indrelid = c.oid AND i.indisprimary) "
                "FROM pg_class c WHERE c.oid = to_regclass(%s)",
                (table,),
            ).fetchone()
            if row is None:
                out[table] = f"table {table} does not exist"
                continue
            identity, immediate = row
            why = (
                "has REPLICA IDENTITY NOTHING"
                if identity == "n"
                else "has no primary key"
                if identity == "d" and immediate is None
                else "has a DEFERRABLE primary key, which cannot identify its rows in the log"
                if identity == "d" and not immediate
                else None
            )
            if why:
                out[table] = (
                    f"table {table} {why}: published, its own UPDATE and DELETE statements "
                    "would fail in PostgreSQL, so rivc does not publish it; give it a replica "
                    f"identity with `ALTER TABLE {table} REPLICA IDENTITY FULL` or a primary "
                    "key (docs/cdc.md)"
                )
        return out

    def ensure(
        self,
        tables: list[str],
        create_slot: bool,
        create_publication: bool,
        held: bool = False,
    ) -> None:
        """The slot and a publication of `tables`, made when missing (as allowed). `held`:
        a table of the source holds a position in the slot's log, so a missing publication
        was dropped under it: refused (`Undecodable`), never made again silently."""
        level = self.con.execute("SHOW wal_level").fetchone()[0]
        if level != "logical":
            raise ConnectorError(
                f"PostgreSQL's wal_level is {level}: change data capture needs "
                "wal_level = logical (and a restart; docs/cdc.md)"
            )
        published = self.con.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
            (self.publication,),
        ).fetchall()
        exists = self.con.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)
        ).fetchone()
        if not exists and held and self.confirmed() is not None:
            raise Undecodable(f"publication {self.publication} was dropped")
        missing = [t for t in tables if _qualified_name(t) not in {r[0] for r in published}]
        if missing:
            if not create_publication:
                raise ConnectorError(
                    f"publication {self.publication} does not publish {', '.join(missing)} "
                    "(set auto_create_publication, or ALTER PUBLICATION ... ADD TABLE)"
                )
            names = ", ".join(_qualified(t) for t in missing)
            verb = (
                "ALTER PUBLICATION {} ADD TABLE {}"
                if exists
                else "CREATE PUBLICATION {} FOR TABLE {}"
            )
            self._racing(verb.format(_ident(self.publication), names))
        if self.confirmed() is None:
            if not create_slot:
                raise ConnectorError(f"replication slot {self.slot} does not exist")
            self._racing(f"SELECT pg_create_logical_replication_slot('{self.slot}', 'pgoutput')")

    def _racing(self, sql: str) -> None:
        """Create what a sibling table's run (another thread) may be creating at once: the
        one that loses finds it made."""
        from psycopg import errors

        try:
            self.con.execute(sql)
        except errors.DuplicateObject:
            pass

    def confirmed(self) -> int | None:
        """The slot's confirmed position; None when there is no slot."""
        row = self.con.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        return None if row is None or row[0] is None else lsn_int(row[0])

    def current(self) -> int:
        """The server's log position now: where a batch read stops."""
        return lsn_int(self.con.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

    def unpublish(self, tables: list[str]) -> list[str]:
        """Remove those of `tables` the publication holds from it; returns them."""
        published = {
            r[0]
            for r in self.con.execute(
                "SELECT schemaname || '.' || tablename FROM pg_publication_tables "
                "WHERE pubname = %s",
                (self.publication,),
            ).fetchall()
        }
        gone = [t for t in tables if _qualified_name(t) in published]
        if gone:
            names = ", ".join(_qualified(t) for t in gone)
            self.con.execute(f"ALTER PUBLICATION {_ident(self.publication)} DROP TABLE {names}")
        return gone

    def changes(self, after: int, upto: int, piece: int | None = None) -> Iterator[Transaction]:
        """The transactions that commit before `upto` and end past `after` (an end LSN), in
        commit order; with `piece`, a large transaction in pieces of that many changes
        (Decoder)."""
        yield from Decoder(after, piece).feed(self.messages(upto))

    def messages(self, upto: int) -> Iterator[bytes]:
        """The slot's pgoutput messages of the transactions that commit before `upto`, streamed
        from the server (a named cursor: a large backlog is never held whole in memory). A
        publication missing as of a change (dropped, perhaps made again, after the slot began)
        or a slot dropped meanwhile raise `Undecodable`."""
        from psycopg import errors

        try:
            with (
                self._serial(),
                self.con.transaction(),
                self.con.cursor(name="rivc_changes") as cur,
            ):
                cur.itersize = 2000
                cur.execute(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
                    "'proto_version', '1', 'publication_names', %s)",
                    (self.slot, lsn_text(upto), self.publication),
                )
                for row in cur:
                    yield bytes(row[0])
        except errors.UndefinedObject as exc:  # the publication, or the slot itself
            raise Undecodable(str(exc.diag.message_primary or exc)) from None

    def remake(self, tables: list[str]) -> None:
        """A new slot after a publication of `tables`: for a log that cannot be decoded any
        more (`Undecodable`), taken by a new snapshot of every table. Serialised on the server
        with the source's other tables; a slot another table's run remade meanwhile (one that
        decodes) is kept."""
        with self._serial():
            if self.decodes():
                return
            if self.confirmed() is not None:
                self.con.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            exists = self.con.execute(
                "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)
            ).fetchone()
            if exists:  # made again by someone: ours is made by what the source lists
                self.con.execute(f"DROP PUBLICATION {_ident(self.publication)}")
            names = ", ".join(_qualified(t) for t in tables)
            self.con.execute(f"CREATE PUBLICATION {_ident(self.publication)} FOR TABLE {names}")
            self.con.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,)
            )

    def decodes(self) -> bool:
        """Whether the slot's log up to now reads through the publication."""
        exists = self.con.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)
        ).fetchone()
        if not exists or self.confirmed() is None:
            return False
        try:
            for _ in self.changes(0, self.current()):
                pass
        except Undecodable:
            return False
        return True

    def advance(self, lsn: int) -> None:
        """Confirm everything up to `lsn`: the server may recycle the log before it."""
        with self._serial():
            at = self.confirmed()
            if at is not None and lsn > at:
                self.con.execute(
                    "SELECT pg_replication_slot_advance(%s, %s)", (self.slot, lsn_text(lsn))
                )

    def lag_bytes(self) -> int | None:
        row = self.con.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        return None if row is None else int(row[0])

    def drop(self) -> None:
        with self._serial():
            if self.confirmed() is not None:
                self.con.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        self.con.execute(f"DROP PUBLICATION IF EXISTS {_ident(self.publication)}")


def preflight(conn: Any, tables: list[str], table: str) -> list[str]:
    """`rivc check` of a postgres-cdc table: what stops it from running (the server's
    wal_level, a table that has no replica identity), each named."""
    from ..database.engine import connection

    with connection(conn) as db:
        level = db.execute("SHOW wal_level").fetchone()[0]
        refused = LogicalSlot(db, "", "").refusals([table])
    problems = list(refused.values())
    if level != "logical":
        problems.insert(0, f"wal_level is {level}: change data capture needs logical")
    return problems


def snapshot(con: Any, query: str) -> tuple[Visibility, list[tuple[Any, ...]]]:
    """`query`'s rows in a REPEATABLE READ transaction, with what that snapshot sees. Taken
    after the slot exists, every transaction is in the snapshot, in the stream, or (when
    `Visibility.holds` it) in both."""
    with con.transaction():
        con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        seen = Visibility.parse(con.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
        rows = con.execute(query).fetchall()
    return seen, rows


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _qualified(table: str) -> str:
    return ".".join(_ident(p) for p in table.split(".", 1))


def _qualified_name(table: str) -> str:
    """`schema.name` as pg_publication_tables lists it."""
    return table if "." in table else f"public.{table}"
