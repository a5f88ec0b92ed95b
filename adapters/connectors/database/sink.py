"""Database sinks (postgres, mysql): a table, exactly once per batch.

A batch is loaded into a staging table beside the target: by Spark's tasks, each replacing its
own partition's rows in one transaction (a retried task adds nothing), or from rivc's process
for landed files it delivers as they are. Then one transaction applies the staged rows to the
table (append; upsert by key, with unwrap_cdc's deletes; overwrite) and records the batch id and
the batch's places in `_rivc_commits` beside it; the staging table is dropped after. A run
killed before that transaction leaves the table as it was (the next batch drops the staging
table); one killed after finds the batch in `_rivc_commits` and skips it.

A subclass is the database's dialect: how to connect, its types, its DDL, and how a task loads
rows (postgres/sink.py: COPY; mysql/sink.py: multi-row INSERTs).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ...plane.base import Can, Sink, WriteResult, arrow_columns, stream
from ...util.faults import fault
from .engine import Conn
from .spec import DatabaseSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

COMMITS = "_rivc_commits"  # beside each target: (target, id) -> version, writer
WRITER = "rivc.writer"  # the id under which a target's writer is recorded
PART = "_rivc_part"  # in a staging table: the Spark partition that loaded the row
REFUSED = "the database refused a row:"  # a task's error, found again in Spark's

# loads `batches` into the staging table as one partition: (params, stage, columns, kinds,
# batches, partition) -> (rows, bytes sent); a module-level function, so tasks can run it
Loader = Callable[
    [dict[str, Any], str, list[str], dict[str, str], Iterable["pa.RecordBatch"], int],
    tuple[int, int],
]


class DatabaseSink(Sink[DatabaseSinkConfig]):
    can = frozenset({Can.RECORD_PLACES, Can.WRITE_FROM_SPARK})
    database = ""  # the database's name in messages
    loader: Loader

    # ------------------------------------------------------------------ the dialect

    @abstractmethod
    def q(self, name: str) -> str: ...

    @abstractmethod
    def params(self, conn: Conn) -> dict[str, Any]:
        """The driver's connect() arguments (picklable: tasks connect with them)."""

    @abstractmethod
    def open(self) -> Any:
        """An autocommit connection."""

    @abstractmethod
    def transaction(self, conn: Any) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def schema(self) -> str | None:
        """The schema (database, for MySQL) the table is in; None: the connection's."""

    @abstractmethod
    def columns(self, conn: Any) -> dict[str, str]:
        """The table's columns and their types; {} when it does not exist."""

    @abstractmethod
    def column_type(self, spark_type: str, key: bool) -> str: ...

    @abstractmethod
    def create_schema(self, conn: Any) -> None: ...

    @abstractmethod
    def commits_table(self) -> str:
        """CREATE TABLE IF NOT EXISTS of _rivc_commits."""

    @abstractmethod
    def exists(self, conn: Any, qualified: str) -> bool: ...

    @abstractmethod
    def create_stage(self, conn: Any, data: list[str], flagged: bool) -> None: ...

    @abstractmethod
    def lock(self, conn: Any) -> None:
        """Serialize the transactions that apply batches to the table."""

    @abstractmethod
    def delete_keys(self, on: str) -> str:
        """DELETE of the table's rows that match a staged row (`on`, t. and s.)."""

    @abstractmethod
    def upsert_version(self) -> str:
        """INSERT of (target, id, version) into _rivc_commits, replacing the version."""

    @abstractmethod
    def insert_writer(self) -> str:
        """INSERT of (target, id, writer) into _rivc_commits, unless the row exists."""

    def is_array(self, column_type: str) -> bool:
        return False

    def table_options(self) -> str:
        """What follows a created table's columns."""
        return ""

    def analyze_stage(self, conn: Any) -> None:
        """Statistics of the loaded staging table, for the plan of an upsert's delete."""

    # ------------------------------------------------------------------ names

    def qualify(self, name: str) -> str:
        schema = self.schema()
        return f"{self.q(schema)}.{self.q(name)}" if schema else self.q(name)

    @property
    def target(self) -> str:
        return self.qualify(self.config.qualified()[1])

    @property
    def commits(self) -> str:
        return self.qualify(COMMITS)

    @property
    def stage_name(self) -> str:
        """This sink's staging table: one per sink and table, dropped after each batch."""
        digest = hashlib.sha1(f"{self.ctx.app_id}\0{self.config.table}".encode()).hexdigest()
        return f"_rivc_stage_{digest[:16]}"

    @property
    def stage(self) -> str:
        return self.qualify(self.stage_name)

    def conn_params(self) -> dict[str, Any]:
        spec = self.ctx.connections.get(self.config.connection)
        if spec is None:
            raise ConnectorError(
                f"sink {self.ctx.sink}: connection {self.config.connection!r} is not in the profile"
            )
        return self.params(Conn.resolve(spec, os.environ))

    def connect(self) -> Any:
        try:
            return self.open()
        except ConnectorError:
            raise
        except Exception as exc:  # the driver's errors
            raise self.refused("cannot connect", exc) from exc

    def refused(self, what: str, exc: Exception) -> ConnectorError:
        """A database error as one line naming the sink and table (never the staging table)."""
        text = one_line(exc).replace(self.stage_name, self.config.table)
        return ConnectorError(f"sink {self.ctx.sink}: {self.config.table}: {what}: {text}")

    def run(self, conn: Any, sql: str, params: Sequence[Any] | None = None) -> Any:
        cur = conn.cursor()
        cur.execute(sql, params)
        return cur

    # ------------------------------------------------------------------ what it holds

    def _versions(self, ids: Sequence[str]) -> dict[str, tuple[int | None, str | None]]:
        conn = self.connect()
        try:
            if not self.exists(conn, COMMITS):
                return {}
            marks = ", ".join(["%s"] * len(ids))
            rows = self.run(
                conn,
                f"SELECT id, version, writer FROM {self.commits} WHERE target = %s "
                f"AND id IN ({marks})",
                (self.config.table, *ids),
            ).fetchall()
            return {r[0]: (r[1], r[2]) for r in rows}
        finally:
            conn.close()

    def last_batch_id(self) -> int | None:
        return self._versions([self.ctx.app_id]).get(self.ctx.app_id, (None, None))[0]

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        if not inputs:
            return {}
        held = self._versions([self.ctx.place_id(i) for i in inputs])
        return {i: held.get(self.ctx.place_id(i), (None, None))[0] for i in inputs}

    def writer(self) -> str | None:
        return self._versions([WRITER]).get(WRITER, (None, None))[1]

    def record_places(self, batch_id: int) -> None:
        conn = self.connect()
        try:
            with self.transaction(conn):
                self._record(conn, batch_id)
        finally:
            conn.close()

    # ------------------------------------------------------------------ writes

    def write_spark(self, df: Any, batch_id: int) -> WriteResult:
        """Spark's tasks load the batch into the staging table; rivc applies it."""
        columns = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        kinds = self._prepare(columns)
        task = _load_task(type(self).loader, self.conn_params(), self.stage, list(columns), kinds)
        try:
            counted = df.mapInArrow(task, "rows long, bytes long").groupBy().sum().first()
        except Exception as exc:  # a task's refusal, inside Spark's error
            found = re.search(re.escape(REFUSED) + r"[^\n]*", str(exc))
            if found is None:
                raise
            text = found.group(0).replace(self.stage_name, self.config.table)
            raise ConnectorError(f"sink {self.ctx.sink}: {self.config.table}: {text}") from None
        size = int(counted[1] or 0) if counted else 0
        return self._apply(batch_id, list(columns), size)

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        """Files delivered as they are: loaded from rivc's process."""
        import pyarrow as pa

        columns = arrow_columns(data.schema)
        for f in data.schema:  # an array of scalars stays one (a PostgreSQL array's landing)
            if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
                item = arrow_columns(pa.schema([pa.field("item", f.type.value_type)]))["item"]
                columns[f.name] = f"array<{item}>"
        kinds = self._prepare(columns)
        load = type(self).loader
        try:
            _, size = load(self.conn_params(), self.stage, list(columns), kinds, stream(data), 0)
        except ConnectorError as exc:
            text = str(exc).replace(self.stage_name, self.config.table)
            raise ConnectorError(f"sink {self.ctx.sink}: {self.config.table}: {text}") from None
        return self._apply(batch_id, list(columns), size)

    def _prepare(self, columns: dict[str, str]) -> dict[str, str]:
        """Create or evolve the table as the config allows, claim it, and make an empty
        staging table of the batch's columns. Returns how each column is encoded."""
        data = [c for c in columns if c != DELETE_COLUMN]
        if not data:
            raise ConnectorError(f"sink {self.ctx.sink}: the batch has no columns")
        keys = set(self.config.key_columns)
        conn = self.connect()
        try:
            held = self.columns(conn)
            if not held:
                if not self.config.auto_create_table:
                    raise ConnectorError(
                        f"sink {self.ctx.sink}: table {self.config.table} does not exist and "
                        "auto_create_table is false: create it first (or let rivc create it)"
                    )
                body = [f"{self.q(c)} {self.column_type(columns[c], c in keys)}" for c in data]
                if keys:
                    names = ", ".join(self.q(k) for k in self.config.key_columns)
                    body.append(f"PRIMARY KEY ({names})")
                self.create_schema(conn)
                made = f"CREATE TABLE IF NOT EXISTS {self.target} ({', '.join(body)})"
                self.run(conn, made + self.table_options())
                held = self.columns(conn)
            missing = [c for c in data if c not in held]
            if missing and self.config.schema_evolution == "strict":
                raise ConnectorError(
                    f"sink {self.ctx.sink}: table {self.config.table} has no column "
                    f"{', '.join(missing)}; add it to the table, drop it in the model, or set "
                    "schema_evolution: add_columns"
                )
            for c in missing:
                kind = self.column_type(columns[c], False)
                self.run(conn, f"ALTER TABLE {self.target} ADD COLUMN {self.q(c)} {kind}")
            held = self.columns(conn) if missing else held
            self._claim(conn)
            self.run(conn, f"DROP TABLE IF EXISTS {self.stage}")
            self.create_stage(conn, data, DELETE_COLUMN in columns)
        except ConnectorError:
            raise
        except Exception as exc:  # the driver's errors: named by table, one line
            raise self.refused("cannot prepare the batch", exc) from exc
        finally:
            conn.close()
        return {c: "array" if self.is_array(held.get(c, "")) else "text" for c in columns}

    def _claim(self, conn: Any) -> None:
        self.run(conn, self.commits_table())
        found = self.writer()
        if self.ctx.claim(found, f"table {self.config.table}"):
            self.run(conn, self.insert_writer(), (self.config.table, WRITER, self.ctx.writer))

    def _apply(self, batch_id: int, columns: list[str], size: int) -> WriteResult:
        """One transaction: the staged rows into the table, the batch id and places beside."""
        fault("before-commit", self.config.qualified()[1])  # staged; the table untouched
        data = ", ".join(self.q(c) for c in columns if c != DELETE_COLUMN)
        flag = self.q(DELETE_COLUMN)
        keep = f" WHERE NOT coalesce({flag}, false)" if DELETE_COLUMN in columns else ""
        conn = self.connect()
        started = time.perf_counter()
        try:
            if self.config.mode == "upsert":
                self.analyze_stage(conn)
            with self.transaction(conn):
                self.lock(conn)
                held = self._held(conn)
                if held is not None and held >= batch_id:  # another writer of the same ids
                    return WriteResult()
                if self.config.mode == "upsert":
                    self._refuse_keys(conn)
                    keys = self.config.key_columns
                    on = " AND ".join(f"t.{self.q(k)} = s.{self.q(k)}" for k in keys)
                    self.run(conn, self.delete_keys(on))
                elif self.config.mode == "overwrite":
                    self.run(conn, f"DELETE FROM {self.target}")
                inserted = self.run(
                    conn,
                    f"INSERT INTO {self.target} ({data}) SELECT {data} FROM {self.stage}{keep}",
                ).rowcount
                self._record(conn, batch_id)
            self.run(conn, f"DROP TABLE IF EXISTS {self.stage}")
        except ConnectorError:
            raise
        except Exception as exc:
            raise self.refused(f"batch {batch_id} was not applied", exc) from exc
        finally:
            conn.close()
        elapsed = time.perf_counter() - started
        return WriteResult(rows=max(inserted, 0), bytes=size, commits=1, commit_s=elapsed)

    def _held(self, conn: Any) -> int | None:
        row = self.run(
            conn,
            f"SELECT version FROM {self.commits} WHERE target = %s AND id = %s",
            (self.config.table, self.ctx.app_id),
        ).fetchone()
        return None if row is None else row[0]

    def _refuse_keys(self, conn: Any) -> None:
        keys = self.config.key_columns
        names = ", ".join(self.q(k) for k in keys)
        null = self.run(
            conn,
            f"SELECT 1 FROM {self.stage} WHERE "
            f"{' OR '.join(f'{self.q(k)} IS NULL' for k in keys)} LIMIT 1",
        ).fetchone()
        if null is not None:
            raise ConnectorError(
                f"sink {self.ctx.sink}: an upsert batch has a row without a key "
                f"({', '.join(keys)} null); a row without a key cannot replace one"
            )
        twice = self.run(
            conn, f"SELECT {names} FROM {self.stage} GROUP BY {names} HAVING count(*) > 1 LIMIT 1"
        ).fetchone()
        if twice is not None:
            key = ", ".join(f"{k}={v!r}" for k, v in zip(keys, twice, strict=True))
            raise ConnectorError(
                f"sink {self.ctx.sink}: an upsert batch holds key {key} more than once; "
                "which row would win is undefined"
            )

    def _record(self, conn: Any, batch_id: int) -> None:
        versions = [(self.ctx.app_id, batch_id)]
        versions += [(self.ctx.place_id(k), v) for k, v in sorted(self.ctx.places.items())]
        cur = conn.cursor()
        cur.executemany(self.upsert_version(), [(self.config.table, i, v) for i, v in versions])


def _load_task(
    load: Loader, params: dict[str, Any], stage: str, columns: list[str], kinds: dict[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function: a task loads its partition's rows and yields (rows, bytes)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        task = TaskContext.get()
        part = task.partitionId() if task is not None else 0
        rows, size = load(params, stage, columns, kinds, batches, part)
        yield pa.RecordBatch.from_pydict({"rows": [rows], "bytes": [size]})

    return run


def load_partition(
    transaction: Callable[[], AbstractContextManager[Any]],
    lock: tuple[str, tuple[Any, ...]],
    stage: str,
    part: int,
    batches: Iterable[pa.RecordBatch],
    write: Callable[[Any, Iterator[pa.RecordBatch]], tuple[int, int]],
    errors: type[Exception] | tuple[type[Exception], ...],
) -> tuple[int, int]:
    """What every database sink's loader does: in one transaction (`transaction()` opens it and
    yields an object with `execute(sql, args)`), take the partition's lock, remove what an earlier
    attempt of the same partition loaded, and `write` the batches (-> rows, bytes sent). A
    partition without rows never connects; the driver's `errors` are a refused row, named."""
    given = nonempty(batches)
    if given is None:
        return 0, 0
    try:
        with transaction() as db:
            db.execute(*lock)
            db.execute(f"DELETE FROM {stage} WHERE {PART} = %s", (part,))
            return write(db, given)
    except errors as exc:
        raise ConnectorError(f"{REFUSED} {one_line(exc)}") from exc


def one_line(exc: Exception) -> str:
    """A driver's error: its message and, where the database gives one, its context (the
    COPY line and column)."""
    diag = getattr(exc, "diag", None)
    text = getattr(diag, "message_primary", None)
    if text is None:
        args: tuple[Any, ...] = exc.args  # pymysql: (error code, message)
        text = str(args[1]) if len(args) == 2 and isinstance(args[0], int) else str(exc)
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    where = getattr(diag, "context", None)
    return text + (f" ({where.strip().splitlines()[0]})" if where else "")


def nonempty(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The batches that hold rows; None when none does (a partition that never connects)."""
    given = (b for b in batches if b.num_rows)
    first = next(given, None)
    return None if first is None else itertools.chain((first,), given)


def partition_column(batch: pa.RecordBatch, part: int) -> pa.Array:
    import pyarrow as pa

    return pa.array([part] * batch.num_rows, pa.int32())
