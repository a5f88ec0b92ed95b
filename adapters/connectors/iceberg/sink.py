"""Apache Iceberg tables through pyiceberg: SQL (SQLite or PostgreSQL) and REST catalogs.

Exactly once per (sink, batch id): the batch id is written in the same commit as the data, as a
snapshot summary property and as the table property `rivc.batch.<sink>`; a batch whose id the
table already holds is skipped. pyiceberg's own commit retry is off (it would re-apply an append
on a stale table and duplicate rows); rivc retries itself after re-reading the committed id.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivc.compiler.connector import parse_size
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.locate import STATE_DIR
from rivc.compiler.rendering.transforms import DELETE_COLUMN
from rivc.compiler.sql import quote

from ...lake.history import closed_apart, versions
from ...plane.base import (
    Can,
    Sink,
    WriteResult,
    commit_with_retries,
    large,
    repeated_key,
    spark_repeated_key,
    stream,
)
from ...util.faults import fault
from ...util.storage import Store, join, shares_disk
from .catalog import CODECS, open_catalog, replace_files, store_path, transform_of
from .files import data_files, in_partitions, upsert_files, upserted
from .maintenance import housekeep
from .spec import IcebergSinkConfig

if TYPE_CHECKING:
    import pyarrow.dataset as pads


WRITER = "rivc.writer"  # the table property naming the project that writes the table


# Partition transforms Spark can reproduce, so that each file it writes holds one partition value
# (truncate and bucket: see _spark_partition)
SPARK_PARTITIONS = {
    "identity": "{}",
    "year": "date_trunc('year', {})",
    "month": "date_trunc('month', {})",
    "day": "to_date({})",
    "hour": "date_trunc('hour', {})",
}


class IcebergSink(Sink[IcebergSinkConfig]):
    can = frozenset({Can.RECORD_PLACES, Can.WRITE_FROM_SPARK, Can.PREVIEW, Can.MAINTAIN})

    @property
    def marker(self) -> str:
        return f"rivc.batch.{self.ctx.app_id}"

    @property
    def identifier(self) -> str:
        return f"{self.config.namespace}.{self.config.table}"

    def catalog(self) -> Any:
        c = self.config.catalog
        store = Store.of(c.warehouse or "", self.ctx.storage, self.config.storage_options)
        return open_catalog(c, self.ctx.root, store)

    def _table(self, catalog: Any) -> Any | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None

    def last_batch_id(self) -> int | None:
        table = self._table(self.catalog())
        if table is None or self.marker not in table.properties:
            return None
        return int(table.properties[self.marker])

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        table = self._table(self.catalog())
        props = {} if table is None else table.properties
        found = {i: props.get(f"rivc.place.{self.ctx.place_id(i)}") for i in inputs}
        return {i: None if v is None else int(v) for i, v in found.items()}

    def writer(self) -> str | None:
        table = self._table(self.catalog())
        return None if table is None else table.properties.get(WRITER)

    def record_places(self, batch_id: int) -> None:
        table = self._table(self.catalog())
        if table is None:
            raise ConnectorError(f"sink {self.ctx.sink}: {self.identifier} holds no table yet")
        with table.transaction() as tx:
            tx.set_properties(self._props(table, batch_id))

    def _props(self, table: Any, batch_id: int) -> dict[str, str]:
        """The properties a batch's commit sets: its batch id, the places of what it consumed,
        and (on a table that records no writer yet) this project's writer id."""
        props = {self.marker: str(batch_id)}
        props.update(
            {f"rivc.place.{self.ctx.place_id(k)}": str(v) for k, v in self.ctx.places.items()}
        )
        found = None if table is None else table.properties.get(WRITER)
        if self.ctx.claim(found, self.identifier) or table is None:
            if self.ctx.writer and not self.ctx.shared:
                props[WRITER] = self.ctx.writer
        return props

    def write_spark(self, df: Any, batch_id: int) -> WriteResult | None:
        """An append or overwrite written by Spark's tasks, on any store: every batch on a
        Spark that does not share rivc's disk, else a batch Spark estimates at
        `spark_write_threshold` or more. The tasks write Parquet files under the table's
        `data/rivc-batch-<id>-<uuid>/`, one partition value per file; this commits them with
        `add_files` (which reads each file's footer for its partition and statistics) together
        with the batch id, and for overwrite deletes the table's rows in the same transaction.
        An upsert rewrites, in Spark, only the files that can hold a batch key (`_upsert_files`)
        and replaces them in the same transaction. Partition transforms Spark cannot compute
        as Iceberg does (`_spark_partition`), a table partitioned otherwise than configured,
        tables with delete files and small local batches take the streamed path."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.expressions import AlwaysTrue
        from pyspark.sql.pandas.types import to_arrow_schema

        from ...plane.taskwrite import write_parquet

        c = self.config
        deletes = DELETE_COLUMN in df.columns  # unwrap_cdc's deletes: their keys leave the table
        types = {
            f.name: f.dataType.simpleString() for f in df.schema.fields if f.name != DELETE_COLUMN
        }
        history = c.history()  # mode scd2: only this path keeps versions
        dynamic = c.partitions_overwrite()  # and so does an overwrite of partitions

        def streamed(why: str) -> WriteResult | None:
            """The streamed path takes this batch; a scd2 batch or a partitions overwrite is
            refused, saying why."""
            if history is not None or dynamic:
                what = "scd2" if history is not None else "overwrite of partitions"
                raise ConnectorError(f"{what} into {self.identifier}: {why}")
            return None

        helpers = {f"_rivc_p{i}": _spark_partition(p, types) for i, p in enumerate(c.partitioning)}
        if None in helpers.values():
            return streamed("a partition transform Spark cannot compute as Iceberg does")
        buckets = {
            n: p for n, p in zip(helpers, c.partitioning, strict=True) if p.transform == "bucket"
        }
        threshold = parse_size(c.spark_write_threshold)
        if not history and not dynamic and shares_disk(df) and not large(df, threshold):
            return None
        catalog = self.catalog()
        catalog.create_namespace_if_not_exists(c.namespace)
        schema = to_arrow_schema(df.drop(DELETE_COLUMN).schema, timezone="UTC")
        existing = self._table(catalog)
        props = self._props(existing, batch_id)
        table = self._partitioned(catalog, existing) if existing else self._create(catalog, schema)
        location = table.location()
        uri = store_path(location)
        local = "://" not in uri  # store_path drops file://
        micros = "MICROS" in str(df.sparkSession.conf.get("spark.sql.parquet.outputTimestampType"))
        if local and not micros:
            # Spark's own writer (taskwrite.write_parquet's on a disk) would write INT96
            # timestamps, which Iceberg cannot take
            return streamed("Spark writes INT96 timestamps (set outputTimestampType)")
        if _spec(table) != [_transform_name(p) for p in c.partitioning]:
            # partitioned otherwise than configured: pyiceberg follows the table
            return streamed("the table is partitioned otherwise than configured")
        if self._evolve(table, schema):
            table = table.refresh()
        store = Store.of(uri, self.ctx.storage, c.storage_options)
        replaced: list[Any] = []  # upsert: the data files rewritten with the batch
        if c.mode == "upsert":  # scd2: versions() refuses two changes of a key at once
            repeated = spark_repeated_key(df, c.key_fields)
            if repeated:
                raise ConnectorError(
                    f"upsert into {self.identifier}: the batch holds key ({repeated}) more than once"
                )
        if c.mode in ("upsert", "scd2") and table.current_snapshot() is not None:
            found = upsert_files(table, df, c.key_fields[0])
            if found is None:  # delete files: pyiceberg's own delete applies them
                return streamed("the table has delete files (compact it first)")
            df, replaced = upserted(table, df, found, c.key_fields, store, history)
        elif history is not None:
            df = versions(None, df, c.key_fields, history, f"scd2 into {self.identifier}")
        elif deletes:  # a new table: the deletes have nothing to take out
            df = df.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN)
        rel = f"data/rivc-batch-{batch_id:06d}-{uuid.uuid4().hex[:8]}"
        frame = df.selectExpr("*", *(f"{e} AS {n}" for n, e in helpers.items() if n not in buckets))
        if buckets:
            frame = _with_buckets(frame, table, buckets)
        codec = CODECS[c.compression]
        apart = None if history is None else closed_apart(history)  # current versions apart
        written = write_parquet(
            frame, uri, store, rel, codec, tuple(helpers), c.target_file_size, apart
        )
        paths = [join(location, w.rel) for w in written]
        fault("before-commit", c.table)  # the files are in, no snapshot references them
        try:

            def attempt() -> None:
                fresh = catalog.load_table(self.identifier)
                if int(fresh.properties.get(self.marker, "-1")) >= batch_id:
                    return  # a retry's own commit landed after all
                with fresh.transaction() as tx:
                    if c.mode == "overwrite" and not dynamic:
                        with warnings.catch_warnings():  # an empty table has nothing to delete
                            warnings.filterwarnings("ignore", "Delete operation did not match")
                            tx.delete(AlwaysTrue(), snapshot_properties=props)
                    if replaced or buckets or dynamic:
                        bucketed = {int(n.removeprefix("_rivc_p")) for n in buckets}
                        added = data_files(fresh, tx.table_metadata, paths, written, bucketed)
                        old = in_partitions(fresh, added) if dynamic else replaced
                        replace_files(tx, old, added, props)
                    elif paths:
                        tx.add_files(
                            paths,
                            snapshot_properties=props,
                            check_duplicate_files=False,  # names are new: skip the table scan
                        )
                    tx.set_properties(props)

            _, retries, took = commit_with_retries(attempt, CommitFailedException, self.identifier)
        except BaseException:
            store.remove_tree(join(uri, rel))  # files no commit references
            raise
        return WriteResult(
            rows=sum(w.rows for w in written),
            bytes=sum(w.size for w in written),
            files=[(p, w.rows, w.size) for p, w in zip(paths, written, strict=True)],
            retries=retries,
            commits=1,
            commit_s=took,
        )

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        from pyiceberg.exceptions import CommitFailedException

        c = self.config
        if c.history() is not None or c.partitions_overwrite():  # write_spark takes those
            raise ConnectorError(
                f"sink {self.ctx.sink}: a {c.mode} batch reached the streamed path"
            )
        catalog = self.catalog()
        catalog.create_namespace_if_not_exists(c.namespace)

        schema = data.schema
        if DELETE_COLUMN in schema.names:
            schema = schema.remove(schema.get_field_index(DELETE_COLUMN))

        def attempt() -> int:
            existing = self._table(catalog)
            props = self._props(existing, batch_id)
            table = (
                self._partitioned(catalog, existing) if existing else self._create(catalog, schema)
            )
            if int(table.properties.get(self.marker, "-1")) < batch_id:  # else: a retry's own
                return self._commit(table, data, props)  # commit landed after all
            return 0

        commits, retries, took = commit_with_retries(
            attempt, CommitFailedException, self.identifier
        )
        summary = catalog.load_table(self.identifier).current_snapshot().summary
        added = int(summary.get("added-files-size", "0") or 0)
        return WriteResult(
            rows=data.count_rows(),
            bytes=added,
            retries=retries,
            commits=commits,
            commit_s=took,  # pyiceberg writes the files and commits in one transaction
        )

    def preview(self, limit: int) -> Any | None:
        table = self._table(self.catalog())
        if table is None or table.current_snapshot() is None:
            return None
        return table.scan(limit=limit).to_arrow()

    def maintain(self, retain_hours: int, dry_run: bool) -> str | None:
        done = self.housekeep(retain_hours, dry_run)
        if done is None:
            return "not built yet"
        if dry_run:
            return f"would expire {done[1]} snapshots and delete {len(done[2])} unreferenced files"
        return (
            f"{done[0]} files compacted, {done[1]} snapshots expired, "
            f"{len(done[2])} unreferenced files deleted"
        )

    def unreachable_from_server(self, root: Path) -> str | None:
        """A SQL catalog in a SQLite file under the project (the default) is not on the server,
        whose worker would register the table in a catalog of its own."""
        catalog = self.config.catalog
        if catalog.type != "sql":
            return None
        uri = catalog.uri or ""
        local = uri.removeprefix("sqlite:///")
        if uri and not (
            uri.startswith("sqlite:") and Path("/" + local.lstrip("/")).is_relative_to(root)
        ):
            return None
        return (
            "a stream on this Spark commits from the server, which cannot open the Iceberg "
            f"catalog in {STATE_DIR}/iceberg/catalog.db; give the sink a catalog both reach "
            "(catalog: {uri: postgresql+psycopg://...} or a REST catalog)"
        )

    def housekeep(self, retain_hours: int, dry_run: bool) -> tuple[int, int, list[str]] | None:
        """iceberg_maintenance.housekeep of this sink's table; None when there is none."""
        table = self._table(self.catalog())
        if table is None:
            return None
        uri = store_path(table.location())
        store = Store.of(uri, self.ctx.storage, self.config.storage_options)
        return housekeep(table, store, self.config.compression, retain_hours, dry_run)

    def _create(self, catalog: Any, schema: Any) -> Any:
        c = self.config
        table = catalog.create_table_if_not_exists(
            self.identifier,
            schema=schema,
            properties={
                "commit.retry.num-retries": "0",
                # each commit deletes the metadata files beyond the last 100 versions
                "write.metadata.delete-after-commit.enabled": "true",
                "write.parquet.compression-codec": CODECS[c.compression],
            },
        )
        return self._partitioned(catalog, table)

    def _partitioned(self, catalog: Any, table: Any) -> Any:
        """The table partitioned as configured: a new one after it is created (a spec needs
        field ids), an existing one by partition evolution (older files keep their spec)."""
        want = [_transform_name(p) for p in self.config.partitioning]
        have = _spec(table)
        if have == want:
            return table
        with table.update_spec() as spec:
            for field, pair in zip(table.spec().fields, have, strict=True):
                if pair not in want:
                    spec.remove_field(field.name)
            for p, pair in zip(self.config.partitioning, want, strict=True):
                if pair not in have:
                    spec.add_field(p.field, transform_of(p), f"{p.field}_{p.transform}")
        return catalog.load_table(self.identifier)

    def _commit(self, table: Any, data: pads.Dataset, props: dict[str, str]) -> int:
        """Write and commit the batch with `props` (its batch id and places); returns the
        commits made (2 when the schema evolved)."""
        c = self.config
        # New columns first, in their own commit: an upsert compares the batch with the table's
        # schema as it is before the transaction, and added columns are harmless on their own.
        # unwrap_cdc's deletes only take keys out; pyiceberg packs files of whole batches
        rows = stream(data, without_deletes=True, rows=10_000 if c.target_file_size else 65_536)
        evolved = self._evolve(table, rows.schema)
        if evolved:
            table = table.refresh()
        if table.spec().fields:  # pyiceberg streams a RecordBatchReader only into unpartitioned
            rows = rows.read_all()  # tables

        with table.transaction() as tx:
            if c.target_file_size:  # pyiceberg's writer packs files up to it
                tx.set_properties({"write.target-file-size-bytes": str(c.target_file_size)})
            if c.mode == "append":
                tx.append(rows, snapshot_properties=props)
            elif c.mode == "overwrite":
                with warnings.catch_warnings():  # an empty table has nothing to delete
                    warnings.filterwarnings("ignore", "Delete operation did not match")
                    tx.overwrite(rows, snapshot_properties=props)
            else:  # upsert: drop the rows with the batch's keys, then append the batch
                keys = data.to_table(columns=list(c.key_fields))
                repeated = repeated_key(keys)
                if repeated:
                    raise ConnectorError(
                        f"upsert into {self.identifier}: the batch holds key ({repeated}) "
                        "more than once"
                    )
                with warnings.catch_warnings():  # new keys only: nothing to delete is normal
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    tx.delete(_key_filter(keys), snapshot_properties=props)
                tx.append(rows, snapshot_properties=props)
            tx.set_properties(props)  # in the same commit as the data
        return 2 if evolved else 1

    def _evolve(self, table: Any, incoming: Any) -> bool:
        """Bring the table's schema up to the batch's; True if it changed. A column the batch
        holds in a type the table's cannot take (a wider decimal, another type) is refused
        naming the column and both types."""
        current = {f.name: f for f in table.schema().fields}
        new = [f.name for f in incoming if f.name not in current]
        mode = self.config.schema_evolution
        if new and mode == "strict":
            raise ConnectorError(
                f"sink {self.ctx.sink}: new columns {new} and schema_evolution is strict"
            )
        before = table.schema()
        if new or mode == "full":
            with table.update_schema(allow_incompatible_changes=False) as update:
                update.union_by_name(incoming)  # add columns; `full` also promotes types safely
            table = table.refresh()
        held = table.schema().as_arrow()
        for f in incoming:
            if f.name in held.names and not _takes(held.field(f.name).type, f.type):
                raise ConnectorError(
                    f"sink {self.ctx.sink}: column {f.name} is {_type_name(f.type)} in the "
                    f"batch, and {self.identifier} holds {_type_name(held.field(f.name).type)}"
                    " there, which cannot take it"
                    + (
                        ""
                        if mode == "full"
                        else " (schema_evolution: full widens a column where Iceberg can)"
                    )
                )
        return bool(table.schema() != before)


def _takes(held: Any, incoming: Any) -> bool:
    """Whether a table column of Arrow type `held` takes values of type `incoming` as
    pyiceberg writes them: the same type, or one Iceberg promotes (int to long, float to
    double, a decimal to a wider precision at its scale). Nested types are left to pyiceberg."""
    import pyarrow as pa
    import pyarrow.types as t

    def plain(kind: Any) -> Any:
        return {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(kind, kind)

    held, incoming = plain(held), plain(incoming)
    if held == incoming or t.is_nested(held) or t.is_nested(incoming):
        return True
    if t.is_integer(held) and t.is_integer(incoming):
        return bool(held.bit_width >= incoming.bit_width)
    if t.is_floating(held) and t.is_floating(incoming):
        return bool(held.bit_width >= incoming.bit_width)
    if t.is_decimal(held) and t.is_decimal(incoming):
        return bool(held.scale == incoming.scale and held.precision >= incoming.precision)
    if t.is_timestamp(held) and t.is_timestamp(incoming):
        return (held.tz is None) == (incoming.tz is None)
    return False


def _type_name(kind: Any) -> str:
    """An Arrow type as Spark SQL names it, for messages."""
    import pyarrow.types as t

    if t.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if t.is_timestamp(kind):
        return "timestamp" if kind.tz else "timestamp_ntz"
    names = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
             "float": "float", "double": "double", "bool": "boolean", "string": "string",
             "large_string": "string", "binary": "binary", "large_binary": "binary",
             "date32[day]": "date"}  # fmt: skip
    return names.get(str(kind), str(kind))


def _spec(table: Any) -> list[tuple[str, str]]:
    """The table's partition fields as (source column, transform) pairs."""
    schema = table.schema()
    return [(schema.find_field(f.source_id).name, str(f.transform)) for f in table.spec().fields]


def _transform_name(p: Any) -> tuple[str, str]:
    """A configured partition field as _spec names it."""
    arg = {"bucket": p.buckets, "truncate": p.width}.get(p.transform)
    return p.field, p.transform if arg is None else f"{p.transform}[{arg}]"


def _spark_partition(p: Any, types: dict[str, str]) -> str | None:
    """The Spark SQL expression computing partition field `p` of a row, or None when Spark
    cannot compute it as Iceberg does. Truncate: integers to a multiple of the width (Iceberg's
    `v - ((v % W) + W) % W` is Spark's `v - pmod(v, W)`); strings to their first W code points,
    up to 16 (pyiceberg infers the partition from the file's bounds, which it keeps to 16
    characters). Bucket: "bucket", a column pyiceberg's transform adds in the tasks."""
    col = quote(p.field)
    if p.transform in SPARK_PARTITIONS:
        return SPARK_PARTITIONS[p.transform].format(col)
    kind = types.get(p.field, "")
    if p.transform == "truncate" and kind in ("int", "bigint"):
        return f"{col} - pmod({col}, {p.width})"
    if p.transform == "truncate" and kind == "string" and p.width <= 16:
        return f"substring({col}, 1, {p.width})"
    if p.transform == "bucket" and kind in _BUCKETED:
        return "bucket"  # computed by pyiceberg's own transform in Spark's tasks (_Buckets)
    return None


# Spark types whose Arrow arrays pyiceberg's bucket transform takes as Spark sends them
_BUCKETED = ("int", "bigint", "string", "date", "decimal")


def _with_buckets(frame: Any, table: Any, buckets: dict[str, Any]) -> Any:
    """`frame` with each bucket helper column, computed in Spark's tasks by pyiceberg's own
    transform (Iceberg's murmur3 hash of the value's canonical bytes)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    columns = tuple(
        (name, p.field, p.buckets, table.schema().find_field(p.field).field_type)
        for name, p in buckets.items()
    )
    schema = StructType(
        [*frame.schema.fields, *(StructField(n, IntegerType(), True) for n, *_ in columns)]
    )
    return frame.mapInArrow(_Buckets(columns), schema)


@dataclass(frozen=True)
class _Buckets:
    columns: tuple[tuple[str, str, int, Any], ...]  # helper, source field, buckets, Iceberg type

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa
        from pyiceberg.transforms import BucketTransform

        hashes = [(n, f, BucketTransform(k).pyarrow_transform(t)) for n, f, k, t in self.columns]
        for batch in batches:
            for name, field, bucket in hashes:
                values = bucket(batch.column(field)).cast(pa.int32())
                batch = pa.RecordBatch.from_arrays(
                    [*batch.columns, values], names=[*batch.schema.names, name]
                )
            yield batch


def _key_filter(keys: Any) -> Any:
    """An Iceberg row filter matching every key of the batch (pyiceberg's own upsert cannot
    compare with a table whose schema evolved since its last snapshot)."""
    from pyiceberg.expressions import And, EqualTo, In, IsNull, Or

    names = keys.column_names
    if len(names) == 1:
        values = [v for v in set(keys.column(0).to_pylist()) if v is not None]
        return In(names[0], values) if values else IsNull(names[0])  # type: ignore[call-arg]
    rows = {tuple(r.values()) for r in keys.to_pylist()}
    terms = [
        And(
            *[
                EqualTo(n, v) if v is not None else IsNull(n)  # type: ignore[call-arg]
                for n, v in zip(names, row, strict=True)
            ]
        )
        for row in rows
    ]
    return terms[0] if len(terms) == 1 else Or(*terms)
