"""PostgreSQL extraction through COPY: a Python data source whose tasks stream `COPY ... TO
STDOUT (FORMAT csv)` into Arrow record batches (pyarrow's C++ CSV reader).

Spark's JDBC reader converts rows one at a time in the JVM; this path moves the parsing into
Arrow and is several times faster. It handles the common scalar types; a query with any other
column type (bytea, arrays, intervals, ...) is read through JDBC instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "rivc_pgcopy"

# type oid -> Spark type; numeric gets its precision from the column's typmod
SCALARS: dict[int, str] = {
    16: "boolean",
    19: "string",  # name
    20: "bigint",
    21: "smallint",
    23: "int",
    25: "string",
    114: "string",  # json
    700: "float",
    701: "double",
    1042: "string",  # char(n)
    1043: "string",  # varchar
    1082: "date",
    1114: "timestamp",
    1184: "timestamp",  # timestamptz, read in UTC
    1700: "decimal",
    2950: "string",  # uuid
    3802: "string",  # jsonb
}


@dataclass(frozen=True)
class CopyPlan:
    columns: list[tuple[str, str, int]]  # (name, Spark type, oid)

    @property
    def ddl(self) -> str:
        return ", ".join(f"`{n}` {t}" for n, t, _ in self.columns)

    def select(self, base: str, predicate: str) -> str:
        cols = ", ".join(
            f'"{n}" AT TIME ZONE \'UTC\' AS "{n}"' if oid == 1184 else f'"{n}"'
            for n, _, oid in self.columns
        )
        where = f" WHERE {predicate}" if predicate else ""
        return f"SELECT {cols} FROM ({base}) AS _rivc{where}"


def copy_plan(db: Any, base: str) -> CopyPlan | None:
    """The columns of `base` if every one has a COPY mapping, else None (use JDBC)."""
    with db.cursor() as cur:
        cur.execute(f"SELECT * FROM ({base}) AS _rivc LIMIT 0")
        description = cur.description
    columns = []
    for col in description:
        spark_type = SCALARS.get(col.type_code)
        if spark_type is None or '"' in col.name:
            return None
        if spark_type == "decimal":
            p, s = col.precision, col.scale
            spark_type = f"decimal({p}, {s})" if p and p <= 38 else "decimal(38, 18)"
        columns.append((col.name, spark_type, col.type_code))
    return CopyPlan(columns)


def _arrow_type(spark_type: str) -> Any:
    import pyarrow as pa

    if spark_type.startswith("decimal"):
        p, s = spark_type[8:-1].split(",")
        return pa.decimal128(int(p), int(s))
    return {
        "boolean": pa.bool_(),
        "string": pa.string(),
        "bigint": pa.int64(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
    }[spark_type]


class _Stream:
    """A file-like view of psycopg's COPY messages (one per row), for pyarrow's streaming CSV
    reader. Rows are appended to a bytearray (amortized constant time) and handed out in the
    block sizes pyarrow asks for; the loop over rows is the hot path, so it stays minimal."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self.chunks, self.closed = iter(chunks), False
        self.buffer = bytearray()

    def read_ahead(self) -> bool:
        """Buffer the first row; False when the stream is empty."""
        for chunk in self.chunks:
            self.buffer += chunk
            break
        return len(self.buffer) > 0

    def read(self, size: int = -1) -> bytes:
        buffer = self.buffer
        if size < 0:
            for chunk in self.chunks:
                buffer += chunk
            size = len(buffer)
        elif len(buffer) < size:
            for chunk in self.chunks:
                buffer += chunk
                if len(buffer) >= size:
                    break
        out = bytes(memoryview(buffer)[:size])
        del buffer[:size]
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
        while (batch := todo.get()) is not None:
            if not failed:
                try:
                    write(batch)
                except BaseException as exc:  # noqa: BLE001  (raised again by the reader)
                    failed.append(exc)

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


class CopyPartition(InputPartition):
    def __init__(self, index: int, predicate: str) -> None:
        super().__init__((index, predicate))
        self.index, self.predicate = index, predicate


class PgCopySource(DataSource):
    """Options: conn (JSON without the password), password, base, plan (JSON), predicates
    (JSON list: one partition each), settings (JSON list of SET statements), throttle_ms,
    stage (a directory: tasks write Parquet there and return file names)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        if "stage" in self.options:  # tasks write Parquet themselves and report each file
            return "path string, rows bigint"
        return CopyPlan([tuple(c) for c in json.loads(self.options["plan"])]).ddl

    def reader(self, schema: Any) -> DataSourceReader:
        return CopyReader(dict(self.options))


class CopyReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[CopyPartition]:
        return [CopyPartition(i, p) for i, p in enumerate(json.loads(self.options["predicates"]))]

    def read(self, partition: CopyPartition) -> Iterator[Any]:  # type: ignore[override]
        batches = self._batches(partition)
        stage = self.options.get("stage")
        if stage is None:
            yield from batches
            return
        import os

        import pyarrow.parquet as pq

        final = os.path.join(stage, f"part-{partition.index:05d}.parquet")
        tmp = os.path.join(stage, f".part-{partition.index:05d}.parquet.tmp")
        os.makedirs(stage, exist_ok=True)
        # snappy, as Spark's JDBC stager and Delta's default: a Delta sink can adopt the files.
        # No dictionaries: for the high-cardinality text of extracted rows they cost twice the
        # write time and gain nothing; snappy still compresses repeated values.
        out = pq.ParquetWriter(tmp, self._schema(), compression="snappy", use_dictionary=False)
        try:
            rows = _write_behind(batches, out.write_batch)
        except BaseException:
            out.close()
            os.unlink(tmp)
            raise
        out.close()
        os.replace(tmp, final)
        yield (final, rows)

    def _plan(self) -> CopyPlan:
        return CopyPlan([tuple(c) for c in json.loads(self.options["plan"])])

    def _schema(self) -> Any:
        import pyarrow as pa

        def arrow(t: str) -> Any:
            return pa.timestamp("us", tz="UTC") if t == "timestamp" else _arrow_type(t)

        return pa.schema([(n, arrow(t)) for n, t, _ in self._plan().columns])

    def _batches(self, partition: CopyPartition) -> Iterator[Any]:
        import psycopg
        import pyarrow as pa
        import pyarrow.csv as pacsv

        o = self.options
        conn = json.loads(o["conn"])
        plan = self._plan()
        names = [n for n, _, _ in plan.columns]
        types = {n: _arrow_type(t) for n, t, _ in plan.columns}
        schema = self._schema()
        with psycopg.connect(
            host=conn["host"],
            port=conn["port"],
            user=conn["user"],
            password=o.get("password") or None,
            dbname=conn["database"],
            connect_timeout=10,
            autocommit=True,
        ) as db:
            for statement in json.loads(o["settings"]):
                db.execute(statement)
            sql = plan.select(o["base"], partition.predicate)
            with db.cursor() as cur, cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT csv)") as copy:
                stream = _Stream(iter(copy))
                if not stream.read_ahead():
                    return  # no rows: pyarrow refuses an empty CSV
                reader = pacsv.open_csv(
                    stream,
                    read_options=pacsv.ReadOptions(column_names=names, block_size=8 << 20),
                    parse_options=pacsv.ParseOptions(newlines_in_values=True),
                    convert_options=pacsv.ConvertOptions(
                        column_types=types,
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
                    yield pa.RecordBatch.from_arrays(
                        [
                            a if a.type == f.type else a.cast(f.type)  # timestamps: to UTC
                            for a, f in zip(batch.columns, schema, strict=True)
                        ],
                        schema=schema,
                    )
