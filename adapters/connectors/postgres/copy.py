"""PostgreSQL extraction through COPY: a Python data source whose tasks stream `COPY ... TO
STDOUT (FORMAT csv)` into Arrow record batches (pyarrow's C++ CSV reader).

Spark's JDBC reader converts rows one at a time in the JVM; this path moves the parsing into
Arrow and is several times faster. Columns travel as compiler/dbtypes.py says: natively where
CSV carries the value exactly, else as PostgreSQL's text, converted here exactly or refused by
name. A query with a bytea or array column is read through JDBC instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rivc.compiler import dbtypes
from rivc.compiler.dbtypes import Delivery, decimal_args, refusal
from rivc.compiler.dialects import dialect
from rivc.compiler.errors import ConnectorError

NAME = "rivc_pgcopy"


@dataclass(frozen=True)
class CopyPlan:
    columns: list[Delivery]
    label: str  # "source src.events", for refusals

    def select(self, base: str, predicate: str) -> str:
        where = f" WHERE {predicate}" if predicate else ""
        names = (f"{d.copy_expr} AS {dialect('postgres').quote(d.name)}" for d in self.columns)
        return f"SELECT {', '.join(names)} FROM ({base}) AS _rivc{where}"

    def dumps(self) -> str:
        return json.dumps({"label": self.label, "columns": [asdict(d) for d in self.columns]})

    @classmethod
    def loads(cls, text: str) -> CopyPlan:
        data = json.loads(text)
        return cls([Delivery(**d) for d in data["columns"]], data["label"])


def copy_plan(plan: list[Delivery], label: str) -> CopyPlan | None:
    """A COPY plan if the reader carries every column, else None (use JDBC)."""
    return CopyPlan(plan, label) if all(d.copy for d in plan) else None


def arrow_type(spark_type: str) -> Any:
    import pyarrow as pa

    if spark_type.startswith("decimal"):
        return pa.decimal128(*decimal_args(spark_type))
    return {
        "boolean": pa.bool_(),
        "string": pa.string(),
        "bigint": pa.int64(),
        "smallint": pa.int16(),
        "tinyint": pa.int8(),
        "int": pa.int32(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }[spark_type]


def _first_bad(values: Any, ok: Any) -> str:
    """The first non-null value where `ok` is false."""
    import pyarrow.compute as pc

    bad = pc.and_kleene(pc.invert(ok), pc.is_valid(values))
    return str(values.filter(bad)[0].as_py())


def _refuse(plan: CopyPlan, d: Delivery, value: str) -> ConnectorError:
    return ConnectorError(refusal(plan.label, d, value))


def convert(plan: CopyPlan, d: Delivery, values: Any) -> Any:
    """The delivered Arrow array of one column carried as text (the same rules as the
    Spark expressions of dbtypes.spark_convert), or a refusal naming the first bad value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    target = arrow_type(d.spark)
    if d.kind in ("native", "text"):
        return values if values.type == target else values.cast(target)
    if d.kind == "decimal":
        return _exact_decimal(plan, d, values, target)
    if d.kind == "round":
        return _round(plan, d, values)
    if d.kind in ("timestamp", "date"):
        # Arrow reads PostgreSQL's ISO text and fails on what Spark cannot hold (infinity,
        # BC, years past 9999); a failure is rare, and only then is the value looked for.
        if not pa.types.is_string(values.type):  # parsed by the CSV reader
            return values.cast(target)
        read_as = pa.timestamp("us") if d.kind == "timestamp" else target
        try:
            parsed = values.cast(read_as)
        except pa.ArrowInvalid:
            raise _refuse(plan, d, _first_unparsed(values, read_as)) from None
        return parsed.cast(target) if d.kind == "timestamp" else parsed
    # cast: a declared scalar type
    if d.spark == "boolean":
        known = pc.is_in(values, pa.array(["t", "f", "true", "false"]))
        if not pc.all(known).as_py():
            raise _refuse(plan, d, _first_bad(values, known))
        true = pc.is_in(values, pa.array(["t", "true"]))
        return pc.if_else(pc.is_valid(values), true, pa.scalar(None, pa.bool_()))
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _refuse(plan, d, _first_unparsed(values, target)) from None


def _exact_decimal(plan: CopyPlan, d: Delivery, values: Any, target: Any) -> Any:
    """PostgreSQL's text of numerics as decimal(p,s), exactly. The text is parsed at the scale
    it has (pyarrow turns a value with too many digits for its target into a wrong number, so
    the parse target always has room), then rescaled with Arrow's safe cast, which refuses any
    lost digit; trailing zeros are no change. A value that does not fit is named."""
    import pyarrow as pa
    import pyarrow.compute as pc

    p, s = decimal_args(d.spark)
    lengths = pc.utf8_length(values)
    dots = pc.find_substring(values, ".")
    whole = pc.if_else(pc.less(dots, 0), lengths, dots)  # digits before the point, and a sign
    frac = pc.if_else(pc.less(dots, 0), 0, pc.subtract(pc.subtract(lengths, dots), 1))
    most_whole, most_frac = pc.max(whole).as_py() or 0, pc.max(frac).as_py() or 0
    scale = max(most_frac, s)
    if most_whole + scale <= MAX_DIGITS:
        try:
            return values.cast(pa.decimal128(MAX_DIGITS, scale)).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # NaN, or digits the target cannot hold: named below
    ok = pc.match_substring_regex(values, dbtypes.exact_decimal_pattern(p, s))
    if not pc.all(ok).as_py():
        raise _refuse(plan, d, _first_bad(values, ok))
    # more than 38 digits, all the extra ones trailing zeros: drop them and parse again
    trimmed = pc.replace_substring_regex(values, r"([.][0-9]*?)0+$", r"\1")
    return trimmed.cast(target)


MAX_DIGITS = 38


def delivered(plan: CopyPlan, schema: Any, batch: Any) -> Any:
    """A CSV record batch converted column by column to the delivered schema."""
    import pyarrow as pa

    columns = zip(batch.columns, plan.columns, strict=True)
    return pa.RecordBatch.from_arrays([convert(plan, d, a) for a, d in columns], schema=schema)


def _first_unparsed(values: Any, target: Any) -> str:
    import pyarrow as pa

    for v in values:
        if v.is_valid:
            try:
                pa.array([v.as_py()]).cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return str(v.as_py())
    return "?"


def _round(plan: CopyPlan, d: Delivery, values: Any) -> Any:
    """A declared decimal(p,s): half-even to s digits (the one place rivc rounds)."""
    import decimal

    import pyarrow as pa

    p, s = decimal_args(d.spark)
    quantum = decimal.Decimal(1).scaleb(-s)
    exact = decimal.Context(prec=200_000, rounding=decimal.ROUND_HALF_EVEN)
    limit = exact.power(10, p - s)
    out: list[decimal.Decimal | None] = []
    for text in values.to_pylist():
        if text is None:
            out.append(None)
            continue
        try:  # the context holds any PostgreSQL numeric (the default's 28 digits do not)
            value = exact.quantize(decimal.Decimal(text), quantum)
        except decimal.InvalidOperation:
            raise _refuse(plan, d, text) from None
        # in `exact`: the default context's 28 digits would round 38 nines up to the limit
        if not value.is_finite() or exact.abs(value) >= limit:
            raise _refuse(plan, d, text)
        out.append(value)
    return pa.array(out, type=pa.decimal128(p, s))


class _CopyOut:
    """`COPY ... TO STDOUT` read straight from libpq, as a file for pyarrow's streaming CSV
    reader. psycopg's Copy iterator runs five Python frames per row (half the extraction's time
    at 2M rows); this loop costs one C call and one append per row. Rows gather in a bytearray
    (amortized constant time) and leave in the block sizes pyarrow asks for."""

    def __init__(self, db: Any, sql: str) -> None:
        from psycopg import pq

        self.pgconn, self.closed, self.done = db.pgconn, False, False
        self.buffer = bytearray()
        self.pgconn.send_query(sql.encode())
        while self.pgconn.flush():
            self._wait(write=True)
        result = self._result()
        if result is None or result.status != pq.ExecStatus.COPY_OUT:
            self._drain()
            self._raise(result)

    def _wait(self, write: bool = False) -> None:
        import select

        fd = self.pgconn.socket
        select.select([] if write else [fd], [fd] if write else [], [])

    def _result(self) -> Any:
        pgconn = self.pgconn
        pgconn.consume_input()
        while pgconn.is_busy():
            self._wait()
            pgconn.consume_input()
        return pgconn.get_result()

    def _raise(self, result: Any) -> None:
        import psycopg
        from psycopg import errors

        if result is None:
            message = self.pgconn.error_message.decode("utf-8", "replace").strip()
            raise psycopg.OperationalError(message or "the server ended the COPY")
        raise errors.error_from_result(result, encoding="utf-8")

    def _finish(self) -> None:
        """The COPY's final result: an error the server sent after the rows is raised here."""
        from psycopg import pq

        self.done = True
        failed = None
        while (result := self._result()) is not None:
            if result.status != pq.ExecStatus.COMMAND_OK and failed is None:
                failed = result
        if failed is not None:
            self._raise(failed)

    def _drain(self) -> None:
        """Read the rest of the query's results, so that the connection is idle again."""
        while self._result() is not None:
            pass

    def _fill(self, want: int) -> None:
        buffer, get = self.buffer, self.pgconn.get_copy_data
        while not self.done and len(buffer) < want:
            n, data = get(1)
            while n > 0:  # the hot loop: one row per turn
                buffer += data
                if len(buffer) >= want:
                    return
                n, data = get(1)
            if n == 0:  # nothing received yet: wait for the server
                self._wait()
                self.pgconn.consume_input()
            elif n == -1:
                self._finish()
            else:
                self._raise(None)

    def has_rows(self) -> bool:
        """Whether the COPY returns any row (pyarrow refuses an empty CSV)."""
        self._fill(1)
        return len(self.buffer) > 0

    def read(self, size: int = -1) -> bytes:
        self._fill(size if size >= 0 else 1 << 62)
        size = len(self.buffer) if size < 0 else min(size, len(self.buffer))
        out = bytes(memoryview(self.buffer)[:size])
        del self.buffer[:size]
        return out

    def close(self) -> None:
        self.closed = True


def _write_behind(batches: Iterator[Any], write: Any) -> int:
    """Write `batches` in a second thread while this one reads the next from the server: Arrow
    releases the GIL while it encodes, so reading and writing overlap. Returns the rows."""
    import queue
    import threading

    todo: queue.Queue[Any] = queue.Queue(maxsize=2)
    failed: list[BaseException] = []

    def writer() -> None:
        from ...util.faults import fault

        while (batch := todo.get()) is not None:
            if not failed:
                try:
                    write(batch)
                except BaseException as exc:  # noqa: BLE001  (raised again by the reader)
                    failed.append(exc)
                fault("mid-extraction")

    thread = threading.Thread(target=writer, name="rivc-parquet-writer", daemon=True)
    thread.start()
    rows = 0
    try:
        for batch in batches:
            if failed:
                break
            todo.put(batch)
            rows += batch.num_rows
    finally:
        todo.put(None)
        thread.join()
    if failed:
        raise failed[0]
    return rows


BLOCK = 8 << 20  # the CSV reader's block: a row must fit in one
MAX_BLOCK = 1 << 30  # PostgreSQL's largest value


class CopyPartition(InputPartition):
    def __init__(self, index: int, predicate: str) -> None:
        super().__init__((index, predicate))
        self.index, self.predicate = index, predicate


class PgCopySource(DataSource):
    """Options: conn (JSON without the password), password, base, plan (JSON), predicates
    (JSON list: one partition each), settings (JSON list of SET statements), throttle_ms,
    stage (a directory URI: tasks write Parquet there and return file names) and
    storage_secret (the stage's Store options, JSON)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "path string, rows bigint"  # tasks write Parquet themselves and report each file

    def reader(self, schema: Any) -> DataSourceReader:
        return CopyReader(dict(self.options))


class CopyReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[CopyPartition]:
        return [CopyPartition(i, p) for i, p in enumerate(json.loads(self.options["predicates"]))]

    def read(self, partition: CopyPartition) -> Iterator[Any]:  # type: ignore[override]
        """Write the partition's rows as one Parquet file of the stage, and report it. A row
        longer than the CSV reader's block cannot be parsed: the partition is read again with
        blocks that hold it (a text value of up to PostgreSQL's 1 GB)."""
        import pyarrow as pa

        block = BLOCK
        while True:
            try:
                yield self._stage(partition, block)
                return
            except pa.ArrowInvalid as exc:
                if "straddl" not in str(exc) or block >= MAX_BLOCK:
                    raise
                block = min(block * 8, MAX_BLOCK)

    def _stage(self, partition: CopyPartition, block: int) -> tuple[str, int]:
        import pyarrow.parquet as pq

        from ...util.storage import Store, is_local, join

        stage = self.options["stage"]
        store = Store(json.loads(self.options.get("storage_secret", "{}")))
        final = join(stage, f"part-{partition.index:05d}.parquet")
        fs, path = store.filesystem(final)
        fs.create_dir(store.filesystem(stage)[1])
        # On this disk a temporary name renamed at the end; an object store's upload appears
        # whole when it is closed (a failed one leaves a file the stage's removal takes away).
        tmp = join(stage, f".part-{partition.index:05d}.parquet.tmp") if is_local(stage) else final
        # snappy, as Spark's JDBC stager and Delta's default: a Delta sink can adopt the files.
        # No dictionaries: for the high-cardinality text of extracted rows they cost twice the
        # write time and gain nothing; snappy still compresses repeated values.
        sink = fs.open_output_stream(store.filesystem(tmp)[1], compression=None)
        out = pq.ParquetWriter(sink, self._schema(), compression="snappy", use_dictionary=False)
        try:
            # conversion runs in the writer thread, beside the next CSV block's parsing
            plan, schema = self._plan(), self._schema()
            batches = self._batches(partition, block)
            rows = _write_behind(batches, lambda b: out.write_batch(delivered(plan, schema, b)))
        except BaseException:
            out.close()
            sink.close()
            fs.delete_file(store.filesystem(tmp)[1])
            raise
        out.close()
        sink.close()
        if tmp != final:
            fs.move(store.filesystem(tmp)[1], path)
        return final, rows

    def _plan(self) -> CopyPlan:
        return CopyPlan.loads(self.options["plan"])

    def _schema(self) -> Any:
        import pyarrow as pa

        return pa.schema([(d.name, arrow_type(d.spark)) for d in self._plan().columns])

    def _batches(self, partition: CopyPartition, block: int) -> Iterator[Any]:
        """The partition's rows as parsed, for delivered() to convert. Times are parsed by the
        CSV reader itself (the fast path); a value it cannot parse stops the read, and a second
        read with times as text then names the value."""
        import pyarrow as pa

        plan, schema = self._plan(), self._schema()
        try:
            yield from self._read(partition, block, parse_times=True)
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc):
                raise
            for batch in self._read(partition, block, parse_times=False):
                delivered(plan, schema, batch)  # raises the refusal naming column and value
            raise

    def _read(self, partition: CopyPartition, block: int, parse_times: bool) -> Iterator[Any]:
        import psycopg
        import pyarrow as pa
        import pyarrow.csv as pacsv

        o = self.options
        conn = json.loads(o["conn"])
        plan = self._plan()
        names = [d.name for d in plan.columns]
        # CSV tells SQL NULL (an unquoted empty field) from text (always quoted when empty or
        # NULL-like): only the empty unquoted field is null, and every text stays text.
        parsed = {"timestamp": pa.timestamp("us"), "date": pa.date32()} if parse_times else {}
        types = {d.name: parsed.get(d.kind) or arrow_type(d.transport) for d in plan.columns}
        with psycopg.connect(
            host=conn["host"],
            port=conn["port"],
            user=conn["user"],
            password=o.get("password") or None,
            dbname=conn["database"],
            connect_timeout=10,
            autocommit=True,
            **conn.get("tls", {}),
        ) as db:
            for statement in json.loads(o["settings"]):
                db.execute(statement)
            sql = plan.select(o["base"], partition.predicate)
            stream = _CopyOut(db, f"COPY ({sql}) TO STDOUT (FORMAT csv)")
            if not stream.has_rows():
                return
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(column_names=names, block_size=block),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    column_types=types,
                    null_values=[""],
                    true_values=["t"],
                    false_values=["f"],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                ),
            )
            pause = int(o.get("throttle_ms", "0")) / 1000
            for i, batch in enumerate(reader):
                if pause and i:
                    time.sleep(pause)  # the tuning profile's breather for the server
                yield batch
