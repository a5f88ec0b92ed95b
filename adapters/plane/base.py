"""What a connector's runtime is given and must provide.

A source is a function `read(spark, ctx: SourceContext) -> DataFrame`; a sink is a `Sink`
subclass built from its config and a SinkContext. rivc.compiler.registry names both by import
path; registry.py (beside this module) imports them.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import ConnectionSpec
from rivc.compiler.rendering.transforms import DELETE_COLUMN

from ..util.storage import resolve

if TYPE_CHECKING:
    import pyarrow.dataset as pads

R = TypeVar("R")

# Spark's JSON parser (Jackson) makes a string value longer than 20,000,000 characters a
# malformed record, which the default mode turns into NULLs: every JSON read lifts the limit
JSON_OPTIONS = {"maxStringLen": str(2**31 - 1)}

_registered: set[tuple[int, str]] = set()
_registering = threading.Lock()


def register_data_source(spark: Any, source: Any) -> None:
    """Register a Python data source once per session. Sinks on several threads ask at once,
    and Spark refuses a second registration (DATA_SOURCE_ALREADY_EXISTS)."""
    key = (id(spark), source.name())
    with _registering:
        if key not in _registered:
            spark.dataSource.register(source)
            _registered.add(key)


C = TypeVar("C")  # a connector's config spec


@dataclass(frozen=True)
class SourceContext(Generic[C]):
    """What a source's read function gets: everything from the manifest and the profile, so a
    connector never reaches into the runtime. Generic over its config's spec."""

    name: str  # "source.table"
    project: str
    root: Path  # the project directory: relative paths resolve here; rivc's state is in .rivc/
    config: C  # the connector's config spec
    columns: dict[str, str]  # declared columns (name -> Spark SQL type)
    query: str | None = None  # relational sources: the compiled query
    connection: ConnectionSpec | None = None  # relational sources: the profile's connection
    tuning: dict[str, int] = field(default_factory=dict)  # relational sources: resolved tuning
    storage: Mapping[str, str] = field(default_factory=dict)  # the profile's `storage:` block

    def path(self, value: str) -> str:
        """A local path relative to the project (file:// dropped), or a URI (s3://...) as it is."""
        return resolve(value, self.root)


@dataclass(frozen=True)
class SinkContext:
    root: Path  # the project directory: relative paths in configs are relative to it
    project: str
    sink: str
    storage: Mapping[str, str] = field(default_factory=dict)  # the profile's `storage:` block
    staging: str = ""  # where a remote Spark stages batches for rivc: under the warehouse
    writer: str = ""  # this project's writer id (its warehouse's): a sink's table takes one
    shared: bool = False  # the sink's table may have other writers (`shared: true`)
    # what the batch being written consumed: input node id -> the batch of it (a landed
    # source's batch, a model's batch id), committed with the data (docs/running.md)
    places: Mapping[str, int] = field(default_factory=dict)
    # the profile's connections, for sinks that write a database (`connection:` names one)
    connections: Mapping[str, ConnectionSpec] = field(default_factory=dict)
    # the project's warehouse (a path or URI): where a sink whose target cannot hold its commits
    # (a webhook) keeps them
    warehouse: str = ""

    def path(self, value: str) -> str:
        """A local path relative to the project (file:// dropped), or a URI (s3://...) as it is."""
        return resolve(value, self.root)

    @property
    def app_id(self) -> str:
        """The id a sink's commits carry their batch ids under; a shared table's writers each
        have their own."""
        who = f"{self.project}@{self.writer}" if self.shared else self.project
        return f"rivc:{who}:{self.sink}"

    def place_id(self, source: str) -> str:
        """The id under which a commit carries what it consumed of input `source`: the
        writer's own (its landing tables number their batches), shared table or not."""
        return f"rivc:{self.project}:{self.sink}@{self.writer}:{source}"

    def claim(self, found: str | None, where: str) -> bool:
        """Whether a table whose recorded writer is `found` may be written by this project;
        True when it records none yet (the caller records ours). Another writer's table is
        refused by name, unless the sink says it is shared."""
        if found is None or found == self.writer or self.shared or not self.writer:
            return found is None and bool(self.writer) and not self.shared
        raise ConnectorError(
            f"sink {self.sink}: {where} is written by another checkout or project (writer "
            f"{found}; this one is {self.writer}): two writers would commit the same batch ids; "
            "point the sink at a location of its own, or set shared: true on both sinks"
        )


@dataclass
class WriteResult:
    rows: int = 0
    bytes: int = 0
    files: list[tuple[str, int | None, int]] = field(default_factory=list)  # (path, rows, bytes)
    retries: int = 0
    commits: int = 0  # transactions added to a table's log (Delta, Iceberg)
    commit_s: float = 0.0  # time in the commit, its retries included
    removed: int = 0  # files a merge rewrote (removed in the same commit)


RETRY_DELAYS = (0.1, 0.2, 0.4)  # commit conflicts: exponential backoff


def commit_with_retries(
    attempt: Callable[[], R], conflict: type[BaseException], target: str
) -> tuple[R, int, float]:
    """Run a commit; after a conflict, wait 100, 200, then 400 ms and run it again (`attempt`
    re-reads the table each time). Returns (its result, retries, seconds it took)."""
    started = time.perf_counter()
    for retries, delay in enumerate((*RETRY_DELAYS, None)):
        try:
            return attempt(), retries, time.perf_counter() - started
        except conflict as exc:
            if delay is None:
                raise ConnectorError(
                    f"commit to {target} failed after {retries} retries: {exc}"
                ) from exc
            time.sleep(delay)
    raise AssertionError("unreachable")


class Can(StrEnum):
    """What a sink can do beyond `write`, declared on its class (`Sink.can`): callers ask the
    declaration, never call a method to find out."""

    # places(), record_places(), writer(): it commits `ctx.places` with its data, so it is a
    # consumer that catches up after partial selections and failures, and refuses another
    # project's table
    RECORD_PLACES = "record places"
    WRITE_FROM_SPARK = "write from Spark"  # write_spark(): Spark's executors write, rivc commits
    ADOPT_FILES = "adopt files"  # adopt(): Parquet files that hold the batch, taken as they are
    PREVIEW = "preview"  # preview(): what it holds, read without Spark (`rivc show`)
    MAINTAIN = "maintain"  # maintain(): its own housekeeping (`rivc maintain`)


class Sink(ABC, Generic[C]):
    """Idempotent per batch id: Spark replays a micro-batch after a failure. Generic over its
    config's spec; what it can do beyond `write` is declared in `can`."""

    can: ClassVar[frozenset[Can]] = frozenset()
    max_rows: int | None = None  # a sink that shows only the first rows asks for no more

    def __init__(self, config: C, ctx: SinkContext) -> None:
        self.config, self.ctx = config, ctx

    def _cannot(self, what: Can) -> ConnectorError:
        return ConnectorError(f"sink {self.ctx.sink} cannot {what.value} (a caller's bug)")

    @abstractmethod
    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        """Write one batch; `data` is read in record batches, so memory stays bounded."""

    def last_batch_id(self) -> int | None:
        """The highest batch id the target records (None: none, or it cannot tell)."""
        return None

    def committed(self, batch_id: int) -> bool:
        """True when the target already holds this batch (only sinks that can tell)."""
        last = self.last_batch_id()
        return last is not None and last >= batch_id

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        """Can.RECORD_PLACES: what the target holds of each input (the `ctx.places` its last
        commit recorded; None for an input it never consumed)."""
        raise self._cannot(Can.RECORD_PLACES)

    def record_places(self, batch_id: int) -> None:
        """Can.RECORD_PLACES: commit `ctx.places` as batch `batch_id`, with no rows (`rivc
        state rewind`)."""
        raise self._cannot(Can.RECORD_PLACES)

    def writer(self) -> str | None:
        """Can.RECORD_PLACES: the writer id the target records (None: none yet)."""
        raise self._cannot(Can.RECORD_PLACES)

    def write_spark(self, df: Any, batch_id: int) -> WriteResult | None:
        """Can.WRITE_FROM_SPARK: write through Spark's executors and commit here; None when
        this batch goes through `write` instead (its mode, its size)."""
        raise self._cannot(Can.WRITE_FROM_SPARK)

    def adopt(self, paths: list[str], batch_id: int) -> WriteResult | None:
        """Can.ADOPT_FILES: take Parquet files that already hold the batch as they are; None
        when this batch cannot be taken so (its mode, its target)."""
        raise self._cannot(Can.ADOPT_FILES)

    def preview(self, limit: int) -> Any | None:
        """Can.PREVIEW: the first `limit` rows the target holds, as an Arrow table read
        without Spark (`rivc show`); None before its first delivery, or when this target
        cannot be read back (its format): its preview is then its input, computed by Spark."""
        raise self._cannot(Can.PREVIEW)

    def maintain(self, retain_hours: int, dry_run: bool) -> str | None:
        """Can.MAINTAIN: the target's own housekeeping (`rivc maintain`): compact, expire,
        remove files no version references and older than `retain_hours`. Returns what it did
        (or, on a dry run, would do), one line; None when there was nothing to do."""
        raise self._cannot(Can.MAINTAIN)

    def unreachable_from_server(self, root: Path) -> str | None:
        """Why a stream on a Spark that cannot see the project (its batches commit from the
        server's Python worker) cannot write this target; None when it can."""
        return None


def arrow_columns(schema: Any) -> dict[str, str]:
    """An Arrow schema's columns with the type names Spark gives them when it reads the files."""
    import pyarrow as pa

    def name(t: Any) -> str:
        if pa.types.is_timestamp(t):
            return "timestamp" if t.tz else "timestamp_ntz"
        if pa.types.is_decimal(t):
            return f"decimal({t.precision},{t.scale})"
        simple = {
            pa.bool_(): "boolean",
            pa.int8(): "tinyint",
            pa.int16(): "smallint",
            pa.int32(): "int",
            pa.int64(): "bigint",
            pa.float32(): "float",
            pa.float64(): "double",
            pa.string(): "string",
            pa.large_string(): "string",
            pa.binary(): "binary",
            pa.large_binary(): "binary",
            pa.date32(): "date",
        }
        return simple.get(t, str(t))

    return {f.name: name(f.type) for f in schema}


def estimated_bytes(df: Any) -> int | None:
    """Spark's own size estimate of a batch (the optimizer's statistics), or None where it has
    none to give (Spark Connect; sources without statistics report an enormous size)."""
    try:
        return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001  (Spark Connect has no _jdf; any failure means unknown)
        return None


def large(df: Any, threshold: int) -> bool:
    """Whether a batch is big enough for Spark's executors to write it (unknown counts as big)."""
    size = estimated_bytes(df)
    return size is None or size >= threshold


@dataclass(frozen=True)
class SparkFile:
    """A Parquet file Spark's executors wrote: where, its Hive partition values, its footer."""

    path: Path
    rel: str  # relative to the directory the batch was written into
    partition: dict[str, str | None]
    rows: int
    size: int
    stats: dict[str, Any]  # Delta-style: numRecords, minValues, maxValues, nullCount


def spark_write(df: Any, target: Path, codec: str, partition_by: list[str]) -> list[SparkFile]:
    """Let Spark's executors write `df` as Parquet under `target` (Hive-style directories for
    `partition_by`) and describe every file from its footer; Spark's marker files are removed."""
    from urllib.parse import unquote

    writer = df.write.option("compression", codec)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(str(target))
    out = []
    for f in sorted(target.rglob("*.parquet")):
        rel = f.relative_to(target).as_posix()
        values: dict[str, str | None] = {}
        for part in rel.split("/")[:-1]:
            key, _, value = part.partition("=")
            value = unquote(value)
            values[unquote(key)] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
        rows, stats = parquet_stats(f)
        out.append(SparkFile(f, rel, values, rows, f.stat().st_size, stats))
    for extra in target.rglob("*"):
        if extra.is_file() and extra.suffix != ".parquet":  # _SUCCESS and .crc files
            extra.unlink()
    return out


def parquet_stats(path: Path) -> tuple[int, dict[str, Any]]:
    """Rows and per-column min, max and null count of a Parquet file, from its footer."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    return footer_stats(file.metadata, file.schema_arrow)


def footer_stats(meta: Any, schema: Any) -> tuple[int, dict[str, Any]]:
    """Rows and Delta-style statistics from a Parquet footer and its Arrow schema."""
    import pyarrow as pa

    # min/max only where they are exact in Delta's JSON: integers, text, dates (see _json_value);
    # decided from the schema, since reading a timestamp's min/max costs a time-zone lookup.
    # Floats get none: Parquet leaves NaN out of its min/max and JSON has no Infinity, so a
    # reader could skip a file that holds the value it looks for.
    ranged = {
        f.name
        for f in schema
        if pa.types.is_integer(f.type)
        or pa.types.is_string(f.type)
        or pa.types.is_large_string(f.type)
        or pa.types.is_date(f.type)
    }
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    exact: set[str] = set()
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            col = group.column(c)
            name = col.path_in_schema
            if "." in name:  # nested fields: no statistics
                continue
            st = col.statistics
            if st is None or not st.has_null_count:
                exact.discard(name)
                nulls.pop(name, None)
                continue
            nulls[name] = nulls.get(name, 0) + st.null_count
            if g == 0:
                exact.add(name)
            if name not in ranged:
                continue
            if not st.has_min_max or not _json_value(st.min) or not _json_value(st.max):
                if st.null_count < group.num_rows:  # values without a range: no file range
                    ranged.discard(name)
                continue
            lo, hi = st.min, st.max
            mins[name] = lo if name not in mins else min(mins[name], lo)
            maxs[name] = hi if name not in maxs else max(maxs[name], hi)
    return meta.num_rows, {
        "numRecords": meta.num_rows,
        "minValues": {k: _json(v) for k, v in mins.items() if k in ranged},
        "maxValues": {k: _json(v) for k, v in maxs.items() if k in ranged},
        "nullCount": {k: v for k, v in nulls.items() if k in exact},
    }


def _json_value(value: Any) -> bool:
    """Statistics rivc records exactly: integers, text, dates. Timestamps would be cut to Delta's
    milliseconds and decimals rounded to JSON floats, and a max rounded down makes readers skip
    files that hold matching rows, so those columns get null counts only."""
    from datetime import date, datetime

    if isinstance(value, datetime):
        return False
    return isinstance(value, int | str | date) and not isinstance(value, bool)


def _json(value: Any) -> Any:
    from datetime import date

    return value.isoformat() if isinstance(value, date) else value


def repeated_key(keys: Any) -> str | None:
    """The first key of an Arrow table of key columns that occurs more than once, as
    `k=v, ...`; None when every key is unique. A merge or upsert takes one row per key: with
    two, which one wins is undefined (delta-rs inserts both when the key is new)."""
    import pyarrow.compute as pc

    names = keys.column_names
    counts = keys.group_by(names).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    if repeated.num_rows == 0:
        return None
    row = repeated.slice(0, 1).to_pylist()[0]
    return ", ".join(f"{k}={row[k]!r}" for k in names)


def spark_repeated_key(df: Any, keys: tuple[str, ...]) -> str | None:
    """repeated_key for a Spark DataFrame, counted by Spark's tasks."""
    dupe = df.groupBy(*keys).count().where("count > 1").first()
    return None if dupe is None else ", ".join(f"{k}={dupe[k]!r}" for k in keys)


def stream(data: pads.Dataset, without_deletes: bool = False, rows: int = 65_536) -> Any:
    """A RecordBatchReader over `data` of batches of at most `rows` rows that reads ahead
    little: memory stays near one batch. `without_deletes`: only the rows unwrap_cdc did not
    flag as deletes, without the flag."""
    import pyarrow.compute as pc

    columns = filter_ = None
    if without_deletes and DELETE_COLUMN in data.schema.names:
        columns = [n for n in data.schema.names if n != DELETE_COLUMN]
        filter_ = ~pc.field(DELETE_COLUMN)
    return data.scanner(
        columns=columns,
        filter=filter_,
        batch_size=rows,
        batch_readahead=1,
        fragment_readahead=1,
        use_threads=False,
    ).to_reader()
