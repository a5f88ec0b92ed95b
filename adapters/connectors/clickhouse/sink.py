"""The `clickhouse` sink: a ClickHouse table over the HTTP interface, exactly once per batch.

ClickHouse has no transactions, so a batch is made to count by a marker. Every row carries its
batch id in `_rivc_batch`; the batch counts once one INSERT of its marker rows (the sink's batch
id and the batch's places) into `_rivc_commits` beside the table succeeded; one INSERT into a
MergeTree table is one part, all or nothing. An attempt begins by deleting the rows of batches
the markers do not hold (what a killed or failed attempt inserted: `ALTER TABLE ... DELETE`,
waited for), then inserts the batch in requests of `batch_size` rows, then the marker. A batch
whose marker is there is skipped. `insert_deduplication_token` is not used: it deduplicates only
on replicated tables of servers from 22.2, and the marker makes any server exact.

`mode: upsert` writes a ReplacingMergeTree ordered by the key columns with `_rivc_batch` its
version: a key's row of the highest batch wins when parts merge, and reads `FINAL` see only it.
unwrap_cdc's deletes are rows with `_rivc_deleted = 1` (the key's newest version): read the
table as `SELECT ... FROM t FINAL WHERE _rivc_deleted = 0`.

Rows go as RowBinary, each value exact or refused by column and value (rowbinary.py).
"""

from __future__ import annotations

import base64
import gzip
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.secrets import mask_url
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ...plane.base import Can, Sink, WriteResult, stream
from ...util.faults import fault
from .rowbinary import bare, clickhouse_type, encode
from .spec import ClickHouseSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

COMMITS = "_rivc_commits"  # beside each table: (target, id) -> version, writer
BATCH = "_rivc_batch"  # on every row: the batch that wrote it
DELETED = "_rivc_deleted"  # upsert: 1 on a row that deletes its key
WRITER = "rivc.writer"  # the id under which a table's writer is recorded
# ClickHouse's codes for a server too busy or a connection lost: the batch is begun again
TRANSIENT_CODES = frozenset({159, 202, 209, 210, 252})


class Transient(ConnectorError):
    """A lost connection, a timeout or a busy server: worth beginning the batch again."""


class Server:
    """ClickHouse's HTTP interface: one statement per request, answers as text."""

    def __init__(self, cfg: ClickHouseSinkConfig) -> None:
        self.cfg = cfg
        self.base = cfg.url.rstrip("/") + "/"

    def authorization(self) -> str:
        """The Authorization header: the bearer token, or the user and password (Basic)."""
        cfg = self.cfg
        if cfg.access_token is not None:
            return f"Bearer {cfg.access_token}"
        password = cfg.password or ""
        if cfg.password_env:
            if cfg.password_env not in os.environ:
                raise ConnectorError(
                    f"password_env {cfg.password_env} is not set in the environment"
                )
            password = os.environ[cfg.password_env]
        return "Basic " + base64.b64encode(f"{cfg.username}:{password}".encode()).decode()

    @property
    def where(self) -> str:
        return f"clickhouse {mask_url(self.cfg.url)}"

    def query(self, sql: str, body: bytes | None = None) -> str:
        """Run `sql` (an INSERT's rows in `body`) and return the answer's text."""
        headers = {"Authorization": self.authorization()}
        if body is None:
            url, data = self.base, sql.encode()
        else:
            url = self.base + "?" + urllib.parse.urlencode({"query": sql})
            data = body
            if self.cfg.compression == "gzip":
                data = gzip.compress(body, compresslevel=1)
                headers["Content-Encoding"] = "gzip"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as answer:
                text: str = answer.read().decode()
                return text
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            found = re.search(
                r"Code: (\d+), e\.displayText\(\) = (?:DB::Exception: )?(.*?)(?:, e\.what\(\).*)?$",
                text.strip(),
                re.S,
            )
            code = int(found.group(1)) if found else None
            said = " ".join((found.group(2) if found else text or exc.reason).split())[:400]
            kind = (
                Transient
                if exc.code in (502, 503, 504) or code in TRANSIENT_CODES
                else ConnectorError
            )
            raise kind(f"{self.where}: {said}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Transient(f"{self.where}: {reason}") from None

    def rows(self, sql: str) -> list[list[str]]:
        """A SELECT's rows, each a list of its values as TabSeparated text (unescaped)."""
        text = self.query(sql + " FORMAT TabSeparated")
        return [[unescape(v) for v in line.split("\t")] for line in text.splitlines()]


class ClickHouseSink(Sink[ClickHouseSinkConfig]):
    can = frozenset({Can.RECORD_PLACES})

    def __init__(self, config: ClickHouseSinkConfig, ctx: Any) -> None:
        super().__init__(config, ctx)
        self.server = Server(config)

    # ------------------------------------------------------------------ names

    @property
    def target(self) -> str:
        return f"{q(self.config.database)}.{q(self.config.table)}"

    @property
    def commits(self) -> str:
        return f"{q(self.config.database)}.{q(COMMITS)}"

    def where_to(self) -> str:
        return f"{self.server.where} table {self.config.database}.{self.config.table}"

    def refused(self, text: str) -> ConnectorError:
        return ConnectorError(text)  # the run names the sink and batch

    # ------------------------------------------------------------------ what it holds

    def _versions(self, ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        db = literal(self.config.database)
        found = self.server.rows(
            f"SELECT count() FROM system.tables WHERE database = {db} AND name = '{COMMITS}'"
        )
        if found[0][0] == "0":
            return {}
        wanted = ", ".join(literal(i) for i in ids)
        got = self.server.rows(
            f"SELECT id, argMax(version, seq), argMax(writer, seq) FROM {self.commits} "
            f"WHERE target = {literal(self.config.table)} AND id IN ({wanted}) GROUP BY id"
        )
        return {row[0]: (int(row[1]), row[2]) for row in got}

    def last_batch_id(self) -> int | None:
        held = self._versions([self.ctx.app_id]).get(self.ctx.app_id)
        return None if held is None else held[0]

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        if not inputs:
            return {}
        held = self._versions([self.ctx.place_id(i) for i in inputs])
        out: dict[str, int | None] = {}
        for i in inputs:
            found = held.get(self.ctx.place_id(i))
            out[i] = None if found is None else found[0]
        return out

    def writer(self) -> str | None:
        found = self._versions([WRITER]).get(WRITER)
        return None if found is None else found[1]

    def record_places(self, batch_id: int) -> None:
        self._mark(batch_id)

    # ------------------------------------------------------------------ writes

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        """The batch, begun again (its inserted rows deleted first) after a transient failure,
        up to max_retries times with a doubling backoff."""
        cfg = self.config
        delay = cfg.initial_backoff_ms / 1000
        for attempt in range(cfg.max_retries + 1):
            try:
                return self._attempt(data, batch_id)
            except Transient as exc:
                if attempt == cfg.max_retries:
                    raise self.refused(f"{exc} (after {attempt + 1} attempts)") from None
                time.sleep(delay)
                delay = min(delay * 2, cfg.max_backoff_ms / 1000)
        raise AssertionError("unreachable")

    def _attempt(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        cfg = self.config
        upsert = cfg.mode == "upsert"
        started = time.perf_counter()
        major = int(self.server.query("SELECT version()").strip().split(".")[0])
        columns = self._prepare(data.schema, micros=major >= 20)  # DateTime64 came in 20.1
        held = self.last_batch_id()
        if held is not None and held >= batch_id:
            return WriteResult()
        self._forget_after(held)
        names = [c for c in data.schema.names if c != DELETE_COLUMN]
        listed = ", ".join(q(c) for c in [*names, BATCH, *([DELETED] if upsert else [])])
        insert = f"INSERT INTO {self.target} ({listed}) FORMAT RowBinary"
        if upsert:
            self._refuse_keys(data)
        rows = size = 0
        # one request in flight while the next is encoded (Arrow's kernels, gzip and the wait
        # for the server all let go of the GIL)
        with ThreadPoolExecutor(1, thread_name_prefix="rivc-clickhouse") as sender:
            pending: Future[str] | None = None
            for chunk in stream(data, rows=cfg.batch_size):
                if not chunk.num_rows:
                    continue
                body = encode(chunk, columns, self._tail(chunk, batch_id))
                if pending is not None:
                    pending.result()
                    fault("mid-publish", self.ctx.sink)  # part of the batch inserted
                pending = sender.submit(self.server.query, insert, body)
                rows, size = rows + chunk.num_rows, size + len(body)
            if pending is not None:
                pending.result()
        fault("before-commit", self.ctx.sink)  # every row inserted; the marker not
        self._mark(batch_id)
        return WriteResult(rows=rows, bytes=size, commits=1, commit_s=time.perf_counter() - started)

    def _tail(self, chunk: pa.RecordBatch, batch_id: int) -> list[pa.Array]:
        """The columns rivc adds: the batch id and, for an upsert, the delete flag."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = chunk.num_rows
        tail = [pa.array([batch_id] * n, pa.int64())]
        if self.config.mode == "upsert":
            names = chunk.schema.names
            flags = (
                chunk.column(DELETE_COLUMN) if DELETE_COLUMN in names else pa.nulls(n, pa.bool_())
            )
            tail.append(pc.cast(pc.fill_null(flags, False), pa.uint8()))
        return tail

    def _prepare(self, schema: pa.Schema, micros: bool) -> dict[str, str]:
        """Create the table (and `_rivc_commits`) if needed, check its columns against the
        batch's, and claim it. Returns each column's ClickHouse type."""
        cfg = self.config
        want = {}
        for f in schema:
            if f.name == DELETE_COLUMN:
                continue
            kind = clickhouse_type(f.type, micros)
            if kind is None:
                raise self.refused(
                    f"column {f.name!r} of type {f.type} has no ClickHouse type rivc writes "
                    "exactly; cast it in the model"
                )
            want[f.name] = kind
        if self.ctx.shared:
            raise self.refused(
                "shared: true is not supported by the clickhouse sink: its rows carry batch ids "
                "of one writer, and a rerun deletes what that writer's markers do not hold"
            )
        if DELETE_COLUMN in schema.names and cfg.mode != "upsert":
            raise self.refused(
                "unwrap_cdc's deletes need mode upsert (an appended table cannot remove a row)"
            )
        db = q(cfg.database)
        self.server.query(f"CREATE DATABASE IF NOT EXISTS {db}")
        self.server.query(
            f"CREATE TABLE IF NOT EXISTS {self.commits} (target String, id String, "
            "version Int64, writer String, seq UInt64) "
            "ENGINE = ReplacingMergeTree(seq) ORDER BY (target, id)"
        )
        held = self._columns()
        keys = set(cfg.key_columns)
        if not held:
            if not cfg.auto_create_table:
                raise self.refused(
                    f"table {cfg.database}.{cfg.table} does not exist and auto_create_table is "
                    "false: create it first (or let rivc create it)"
                )
            body = [
                f"{q(c)} {t if c in keys or t.startswith('Array(') else f'Nullable({t})'}"
                for c, t in want.items()
            ]
            body.append(f"{q(BATCH)} Int64")
            if cfg.mode == "upsert":
                body.append(f"{q(DELETED)} UInt8")
                order = ", ".join(q(k) for k in cfg.key_columns)
                engine = f"ReplacingMergeTree({q(BATCH)}) ORDER BY ({order})"
            else:
                engine = f"MergeTree ORDER BY {q(BATCH)}"
            self.server.query(
                f"CREATE TABLE IF NOT EXISTS {self.target} ({', '.join(body)}) ENGINE = {engine}"
            )
            held = self._columns()
        self._check(held, want)
        found = self.writer()
        if self.ctx.claim(found, f"table {cfg.database}.{cfg.table}"):
            self._insert_commits([(WRITER, 0, self.ctx.writer)])
        return {c: held[c] for c in want}

    def _columns(self) -> dict[str, str]:
        got = self.server.rows(
            f"SELECT name, type FROM system.columns WHERE database = "
            f"{literal(self.config.database)} AND table = {literal(self.config.table)}"
        )
        return {name: kind for name, kind in got}

    def _check(self, held: dict[str, str], want: dict[str, str]) -> None:
        """The table's columns hold the batch's exactly: each there, of the batch's type."""
        cfg = self.config
        where = f"table {cfg.database}.{cfg.table}"
        missing = [c for c in want if c not in held]
        if missing:
            raise self.refused(
                f"{where} has no column {', '.join(missing)}; add it to the table or drop it in "
                "the model"
            )
        for c, kind in want.items():
            if bare(held[c]) != bare(kind):
                raise self.refused(
                    f"{where}: column {c!r} is {held[c]}; the batch's values need {kind} to "
                    "land exactly"
                )
        needed = {BATCH: "Int64", **({DELETED: "UInt8"} if cfg.mode == "upsert" else {})}
        adds = {BATCH: "DEFAULT -1", DELETED: "DEFAULT 0"}  # rows already there: no batch's
        for c, kind in needed.items():
            if held.get(c) != kind:
                raise self.refused(
                    f"{where} has no column {c} {kind}, which rivc's commits need "
                    f"(docs/sinks.md): let rivc create the table, or ALTER TABLE "
                    f"{cfg.database}.{cfg.table} ADD COLUMN {c} {kind} {adds[c]} (the rows "
                    "already there are then never touched)"
                )
        if cfg.mode == "upsert":
            engine = self.server.rows(
                f"SELECT engine_full FROM system.tables WHERE database = "
                f"{literal(cfg.database)} AND name = {literal(cfg.table)}"
            )[0][0]
            if not engine.startswith(f"ReplacingMergeTree({BATCH})"):
                raise self.refused(
                    f"{where} is {engine.split(' ')[0]}: mode upsert needs ReplacingMergeTree"
                    f"({BATCH}) ordered by the key columns"
                )

    def _forget_after(self, held: int | None) -> None:
        """Delete the rows of batches the markers do not hold (an unfinished attempt's) and
        wait until ClickHouse has."""
        after = -1 if held is None else held
        cond = f"{q(BATCH)} > {after}"
        found = self.server.rows(f"SELECT count() FROM {self.target} WHERE {cond}")
        if found[0][0] == "0":
            return
        self.server.query(f"ALTER TABLE {self.target} DELETE WHERE {cond}")
        deadline = time.monotonic() + self.config.timeout_s
        db, table = literal(self.config.database), literal(self.config.table)
        while True:
            waiting = self.server.rows(
                f"SELECT count() FROM system.mutations WHERE database = {db} AND "
                f"table = {table} AND is_done = 0"
            )
            if waiting[0][0] == "0":
                return
            if time.monotonic() > deadline:
                raise Transient(
                    f"{self.where_to()}: the delete of an unfinished batch's rows did not finish "
                    f"in {self.config.timeout_s:g} s"
                )
            time.sleep(0.05)

    def _refuse_keys(self, data: pads.Dataset) -> None:
        """A row without a key, or a key twice in the batch, refused (the batch's keys read
        once, before any insert)."""
        import pyarrow.compute as pc

        keys = list(self.config.key_columns)
        table = data.to_table(columns=keys)
        if any(table.column(k).null_count for k in keys):
            raise self.refused(
                f"an upsert batch has a row without a key ({', '.join(keys)} null); a row "
                "without a key cannot replace one"
            )
        counted = table.group_by(keys).aggregate([([], "count_all")])
        twice = counted.filter(pc.greater(counted["count_all"], 1))
        if twice.num_rows:
            row = twice.slice(0, 1).to_pylist()[0]
            key = ", ".join(f"{k}={row[k]!r}" for k in keys)
            raise self.refused(
                f"an upsert batch holds key {key} more than once; which row would win is undefined"
            )

    def _mark(self, batch_id: int) -> None:
        """One INSERT: the batch id and the batch's places (all or nothing)."""
        marks = [(self.ctx.app_id, batch_id, "")]
        marks += [(self.ctx.place_id(k), v, "") for k, v in sorted(self.ctx.places.items())]
        self._insert_commits(marks)

    def _insert_commits(self, marks: list[tuple[str, int, str]]) -> None:
        seq = time.time_ns()
        table = escape(self.config.table)
        body = "".join(
            f"{table}\t{escape(i)}\t{v}\t{escape(w)}\t{seq}\n" for i, v, w in marks
        ).encode()
        self.server.query(
            f"INSERT INTO {self.commits} (target, id, version, writer, seq) FORMAT TabSeparated",
            body,
        )


# ---------------------------------------------------------------------- SQL text


def q(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def escape(text: str) -> str:
    """A TabSeparated field's text."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


_UNESCAPE = {"\\": "\\", "t": "\t", "n": "\n", "0": "\0", "r": "\r", "'": "'", "b": "\b", "f": "\f"}


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _UNESCAPE.get(m.group(1), m.group(1)), text)


def probe(cfg: ClickHouseSinkConfig, _root: Any, _storage: Any) -> tuple[bool, str]:
    """Ask the server its version and whether the table is there."""
    server = Server(cfg)
    try:
        version = server.query("SELECT version()").strip()
        found = server.rows(
            f"SELECT count() FROM system.tables WHERE database = {literal(cfg.database)} "
            f"AND name = {literal(cfg.table)}"
        )
    except ConnectorError as exc:
        return False, f"connectivity error: {exc}"
    there = "" if found[0][0] != "0" else " (does not exist yet)"
    return True, f"{server.where} ClickHouse {version}: {cfg.database}.{cfg.table}{there}"
