"""Apache Iceberg tables through pyiceberg: SQL (SQLite or PostgreSQL) and REST catalogs.

Exactly once per (sink, batch id): the batch id is written in the same commit as the data, as a
snapshot summary property and as the table property `rivc.batch.<sink>`; a batch whose id the
table already holds is skipped. pyiceberg's own commit retry is off (it would re-apply an append
on a stale table and duplicate rows); rivc retries itself after re-reading the committed id.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from rivc.compiler.connector_specs import IcebergCatalog, IcebergSinkConfig, parse_size
from rivc.compiler.errors import ConnectorError
from rivc.compiler.locate import STATE_DIR
from rivc.compiler.sql import quote
from rivc.compiler.transforms import DELETE_COLUMN

from ..plane.base import (
    Sink,
    SourceContext,
    WriteResult,
    commit_with_retries,
    large,
    repeated_key,
    spark_repeated_key,
    stream,
)
from ..util.faults import fault
from ..util.storage import Store, join, shares_disk

if TYPE_CHECKING:
    import pyarrow.dataset as pads

WRITER = "rivc.writer"  # the table property naming the project that writes the table
CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "none": "uncompressed"}
# Partition transforms Spark can reproduce, so that each file it writes holds one partition value
# (truncate and bucket: see _spark_partition)
SPARK_PARTITIONS = {
    "identity": "{}",
    "year": "date_trunc('year', {})",
    "month": "date_trunc('month', {})",
    "day": "to_date({})",
    "hour": "date_trunc('hour', {})",
}


class IcebergSink(Sink):
    config: IcebergSinkConfig

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

        from ..plane.taskwrite import write_parquet

        c = self.config
        deletes = DELETE_COLUMN in df.columns  # unwrap_cdc's deletes: their keys leave the table
        types = {
            f.name: f.dataType.simpleString() for f in df.schema.fields if f.name != DELETE_COLUMN
        }
        helpers = {f"_rivc_p{i}": _spark_partition(p, types) for i, p in enumerate(c.partitioning)}
        if None in helpers.values():
            return None
        buckets = {
            n: p for n, p in zip(helpers, c.partitioning, strict=True) if p.transform == "bucket"
        }
        if shares_disk(df) and not large(df, parse_size(c.spark_write_threshold)):
            return None
        catalog = self.catalog()
        catalog.create_namespace_if_not_exists(c.namespace)
        schema = to_arrow_schema(df.drop(DELETE_COLUMN).schema, timezone="UTC")
        existing = self._table(catalog)
        props = self._props(existing, batch_id)
        table = existing or self._create(catalog, schema)
        location = table.location()
        uri = _store_path(location)
        local = "://" not in uri  # _store_path drops file://
        micros = "MICROS" in str(df.sparkSession.conf.get("spark.sql.parquet.outputTimestampType"))
        if local and shares_disk(df) and not micros:
            return None  # Spark's own writer would write INT96 timestamps Iceberg cannot take
        if _spec(table) != [_transform_name(p) for p in c.partitioning]:
            return None  # partitioned otherwise than configured: pyiceberg follows the table
        if self._evolve(table, schema):
            table = table.refresh()
        store = Store.of(uri, self.ctx.storage, c.storage_options)
        replaced: list[Any] = []  # upsert: the data files rewritten with the batch
        if c.mode == "upsert":
            repeated = spark_repeated_key(df, c.key_fields)
            if repeated:
                raise ConnectorError(
                    f"upsert into {self.identifier}: the batch holds key ({repeated}) more than once"
                )
        if c.mode == "upsert" and table.current_snapshot() is not None:
            found = _upsert_files(table, df, c.key_fields[0])
            if found is None:
                return None  # delete files: pyiceberg's own delete applies them
            replaced = found
            df = _upserted(table, df, replaced, c.key_fields, store)
        elif deletes:  # a new table: the deletes have nothing to take out
            df = df.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN)
        rel = f"data/rivc-batch-{batch_id:06d}-{uuid.uuid4().hex[:8]}"
        frame = df.selectExpr("*", *(f"{e} AS {n}" for n, e in helpers.items() if n not in buckets))
        if buckets:
            frame = _with_buckets(frame, table, buckets)
        written = write_parquet(frame, uri, store, rel, CODECS[c.compression], tuple(helpers))
        paths = [join(location, w.rel) for w in written]
        fault("before-commit", c.table)  # the files are in, no snapshot references them
        try:

            def attempt() -> None:
                fresh = catalog.load_table(self.identifier)
                if int(fresh.properties.get(self.marker, "-1")) >= batch_id:
                    return  # a retry's own commit landed after all
                with fresh.transaction() as tx:
                    if c.mode == "overwrite":
                        with warnings.catch_warnings():  # an empty table has nothing to delete
                            warnings.filterwarnings("ignore", "Delete operation did not match")
                            tx.delete(AlwaysTrue(), snapshot_properties=props)
                    if replaced or buckets:
                        bucketed = {int(n.removeprefix("_rivc_p")) for n in buckets}
                        added = _data_files(fresh, tx.table_metadata, paths, written, bucketed)
                        _replace_files(tx, replaced, added, props)
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
        catalog = self.catalog()
        catalog.create_namespace_if_not_exists(c.namespace)

        schema = data.schema
        if DELETE_COLUMN in schema.names:
            schema = schema.remove(schema.get_field_index(DELETE_COLUMN))

        def attempt() -> int:
            existing = self._table(catalog)
            props = self._props(existing, batch_id)
            table = existing or self._create(catalog, schema)
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
        """Iceberg's own housekeeping through pyiceberg: compact each partition's small data
        files into one (`_compact`; not on a dry run), expire the snapshots older than
        `retain_hours` (never the current one), then delete the files no remaining snapshot
        references that are older than the retention: data files under the table's `data/`
        (what the expired snapshots held, and the files of killed jobs), and under
        `metadata/` the manifest lists and manifests of expired snapshots and metadata files
        that are neither current nor in the table's metadata log. Returns (files compacted,
        snapshots expired, files deleted), or what would be on a dry run; None when there is
        no table."""
        from datetime import UTC, datetime, timedelta

        import pyarrow.fs as pafs

        table = self._table(self.catalog())
        if table is None:
            return None
        compacted = 0
        if not dry_run:
            compacted = _compact(table, self.config.compression)
            table = table.refresh()
        cutoff = datetime.now(UTC) - timedelta(hours=retain_hours)
        current = table.current_snapshot()
        keep_id = current.snapshot_id if current is not None else None
        cutoff_ms = int(cutoff.timestamp() * 1000)
        expired = [
            s.snapshot_id
            for s in table.snapshots()
            if s.timestamp_ms < cutoff_ms and s.snapshot_id != keep_id
        ]
        if expired and not dry_run:
            table.maintenance.expire_snapshots().by_ids(expired).commit()
            table = table.refresh()
        kept = {s.snapshot_id for s in table.snapshots()} - set(expired)
        referenced = {_bare(table.metadata_location)}
        referenced |= {_bare(e.metadata_file) for e in table.metadata.metadata_log}
        for s in table.snapshots():
            if s.snapshot_id in kept:
                referenced.add(_bare(s.manifest_list))
                for manifest in s.manifests(table.io):
                    referenced.add(_bare(manifest.manifest_path))
                    for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                        referenced.add(_bare(entry.data_file.file_path))
        uri = _store_path(table.location())
        store = Store.of(uri, self.ctx.storage, self.config.storage_options)
        fs, base = store.filesystem(uri)
        orphans = []
        for folder, suffixes in (
            ("data", (".parquet",)),
            ("metadata", (".avro", ".metadata.json")),
        ):
            where = pafs.FileSelector(
                f"{base.rstrip('/')}/{folder}", allow_not_found=True, recursive=True
            )
            infos = fs.get_file_info(where)
            orphans += [
                i.path
                for i in infos
                if i.type == pafs.FileType.File
                and i.path.endswith(suffixes)
                and _bare(i.path) not in referenced
                and i.mtime is not None
                and i.mtime.timestamp() < cutoff.timestamp()
            ]
        if not dry_run:
            for path in orphans:
                fs.delete_file(path)
        return compacted, len(expired), orphans

    def _create(self, catalog: Any, schema: Any) -> Any:
        from pyiceberg import transforms as T

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
        if c.partitioning and not table.spec().fields:
            # Create first, then add the spec: a PartitionSpec needs Iceberg field ids, which an
            # Arrow schema only gets when the table is created.
            make: dict[str, Callable[[Any], Any]] = {
                "identity": lambda p: T.IdentityTransform(),
                "bucket": lambda p: T.BucketTransform(p.buckets),
                "truncate": lambda p: T.TruncateTransform(p.width),
                "year": lambda p: T.YearTransform(),
                "month": lambda p: T.MonthTransform(),
                "day": lambda p: T.DayTransform(),
                "hour": lambda p: T.HourTransform(),
            }
            with table.update_spec() as spec:
                for p in c.partitioning:
                    spec.add_field(p.field, make[p.transform](p), f"{p.field}_{p.transform}")
            table = catalog.load_table(self.identifier)
        return table

    def _commit(self, table: Any, data: pads.Dataset, props: dict[str, str]) -> int:
        """Write and commit the batch with `props` (its batch id and places); returns the
        commits made (2 when the schema evolved)."""
        c = self.config
        # New columns first, in their own commit: an upsert compares the batch with the table's
        # schema as it is before the transaction, and added columns are harmless on their own.
        rows = stream(data, without_deletes=True)  # unwrap_cdc's deletes only take keys out
        evolved = self._evolve(table, rows.schema)
        if evolved:
            table = table.refresh()
        if table.spec().fields:  # pyiceberg streams a RecordBatchReader only into unpartitioned
            rows = rows.read_all()  # tables
        with table.transaction() as tx:
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
        """Bring the table's schema up to the batch's; True if it changed."""
        current = {f.name: f for f in table.schema().fields}
        new = [f.name for f in incoming if f.name not in current]
        mode = self.config.schema_evolution
        if not new and mode != "full":
            return False
        if new and mode == "strict":
            raise ConnectorError(
                f"sink {self.ctx.sink}: new columns {new} and schema_evolution is strict"
            )
        before = table.schema()
        with table.update_schema(allow_incompatible_changes=False) as update:
            update.union_by_name(incoming)  # add columns; `full` also promotes types safely
        return bool(table.refresh().schema() != before)


# rivc's storage options (the stores' environment-variable names) as pyiceberg's FileIO properties
FILE_IO = {
    "AWS_ENDPOINT_URL": "s3.endpoint",
    "AWS_ACCESS_KEY_ID": "s3.access-key-id",
    "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
    "AWS_SESSION_TOKEN": "s3.session-token",
    "AWS_REGION": "s3.region",
    "GOOGLE_CLOUD_PROJECT": "gcs.project-id",
    "AZURE_STORAGE_ACCOUNT_NAME": "adls.account-name",
    "AZURE_STORAGE_ACCOUNT_KEY": "adls.account-key",
    "AZURE_STORAGE_SAS_TOKEN": "adls.sas-token",
}


def _bare(path: str) -> str:
    """A file's path without its scheme and bucket prefix style, to compare listings with the
    paths a manifest holds (file:///x, file:/x, /x; s3://b/k and b/k)."""
    rest = path.split("://", 1)[-1] if "://" in path else path.removeprefix("file:")
    return "/" + rest.lstrip("/")


def probe(config: IcebergSinkConfig, root: Path, storage: Mapping[str, str]) -> tuple[bool, str]:
    """Doctor: the sink's catalog opens and lists its namespaces."""
    c = config.catalog
    where = f"{c.type} catalog {c.name}" + (f" at {c.uri}" if c.uri else "")
    try:
        store = Store.of(c.warehouse or "", storage, config.storage_options)
        namespaces = open_catalog(c, root, store).list_namespaces()
    except Exception as exc:  # noqa: BLE001  (any client's error is the answer)
        return False, f"{where}: {str(exc).strip().splitlines()[0][:300] or type(exc).__name__}"
    return True, f"{where} lists {len(namespaces)} namespace(s)"


def open_catalog(c: IcebergCatalog, root: Path, store: Store) -> Any:
    """The catalog a config names: REST, or SQL (by default rivc's SQLite catalog in
    .rivc/iceberg/, with its warehouse beside it); relative warehouses are under the project."""
    io = file_io(store)
    if c.type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        props = {
            "uri": c.uri,
            "warehouse": c.warehouse,
            "credential": c.credential,
            "token": c.token,
        }
        return RestCatalog(c.name, **{k: v for k, v in props.items() if v}, **io)
    from pyiceberg.catalog.sql import SqlCatalog

    home = root / STATE_DIR / "iceberg"
    home.mkdir(parents=True, exist_ok=True)
    warehouse = c.warehouse or str(home / "warehouse")
    if "://" not in warehouse:
        warehouse = (root / warehouse).resolve().as_uri()
    return SqlCatalog(
        c.name, uri=c.uri or f"sqlite:///{home / 'catalog.db'}", warehouse=warehouse, **io
    )


def read_source(spark: Any, ctx: SourceContext) -> Any:
    """The registry's entry point of the iceberg source: the table's current snapshot, read by
    Spark's tasks from its data files. A table rivc cannot read faithfully by column name is
    refused by name: one with delete files (equality or position deletes) or with a column
    renamed since any of its files was written."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyspark.sql.pandas.types import from_arrow_schema

    from ..plane.tableread import DataFile, read_files

    c = ctx.config
    name = f"{c.namespace}.{c.table}"
    store = Store.of(c.catalog.warehouse or "", dict(ctx.storage), dict(c.storage_options))
    try:
        table = open_catalog(c.catalog, ctx.root, store).load_table(name)
    except NoSuchTableError:
        raise ConnectorError(f"source {ctx.name}: no iceberg table {name}") from None
    tasks = list(table.scan().plan_files())
    if any(t.delete_files for t in tasks):
        raise ConnectorError(
            f"source {ctx.name}: iceberg table {name} has delete files (row-level deletes), "
            "which rivc does not apply; compact it first (e.g. Spark's rewrite_data_files)"
        )
    names: dict[int, set[str]] = {}
    for schema in table.schemas().values():
        for field in schema.fields:
            names.setdefault(field.field_id, set()).add(field.name)
    renamed = sorted("/".join(sorted(n)) for n in names.values() if len(n) > 1)
    if renamed:
        raise ConnectorError(
            f"source {ctx.name}: iceberg table {name} renamed column {renamed[0]}; rivc reads "
            "columns by name and would read its older files wrongly"
        )
    schema = _spark_arrow_schema(table)
    missing = [col for col in ctx.columns if col not in schema.names]
    if missing:
        raise ConnectorError(f"source {ctx.name}: {name} has no column {', '.join(missing)}")
    if not tasks:
        return spark.createDataFrame([], from_arrow_schema(schema))
    files = [DataFile(_store_path(t.file.file_path), t.file.file_size_in_bytes, {}) for t in tasks]
    location = table.location()
    located = Store.of(location, dict(ctx.storage), dict(c.storage_options))
    return read_files(spark, files, schema, located)


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


def _spark_arrow_schema(table: Any) -> Any:
    """The table's schema in Arrow as Spark gives and takes it: pyiceberg's has large strings
    and binaries, which a Python data source may not return to Spark."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    return to_arrow_schema(from_arrow_schema(table.schema().as_arrow()), timezone="UTC")


def _store_path(path: str) -> str:
    """A data file's path as the filesystem layer takes it: a local path, or the URI."""
    parsed = urlparse(path)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else path


# Key types whose Iceberg bounds compare with the values Arrow gives (others: every file counts)
_BOUNDED = ("int", "long", "string", "decimal", "date")


def _upsert_files(table: Any, df: Any, key: str) -> list[Any] | None:
    """The live data files that can hold one of the batch's `key` values, by each file's lower
    and upper bounds of the key column, matched in Spark's tasks (the keys stay on the
    executors); a file without bounds always can. None when the table has delete files, which
    only pyiceberg's own delete applies."""
    from datetime import date, timedelta

    from pyiceberg.conversions import from_bytes

    from .delta import _KeyProbe

    tasks = list(table.scan().plan_files())
    if any(t.delete_files for t in tasks):
        return None
    if not tasks:
        return []
    field = table.schema().find_field(key)
    kind = str(field.field_type).split("(")[0]
    ranges: list[tuple[int, Any, Any]] = []
    for n, task in enumerate(tasks):
        lo = (task.file.lower_bounds or {}).get(field.field_id)
        hi = (task.file.upper_bounds or {}).get(field.field_id)
        if kind not in _BOUNDED or lo is None or hi is None:
            ranges.append((n, None, None))
            continue
        low: Any = from_bytes(field.field_type, lo)
        high: Any = from_bytes(field.field_type, hi)
        if kind == "date":  # days since the epoch
            low, high = date(1970, 1, 1) + timedelta(low), date(1970, 1, 1) + timedelta(high)
        ranges.append((n, low, high))
    hits = df.select(key).mapInArrow(_KeyProbe(key, False, ranges), "n int").distinct().collect()
    chosen = {r.n for r in hits}
    return [t.file for n, t in enumerate(tasks) if n in chosen]


def _upserted(table: Any, df: Any, replaced: list[Any], keys: tuple[str, ...], store: Store) -> Any:
    """What replaces `replaced`: their rows without the batch's keys, plus the batch's rows that
    are not deletes, in the table's column order (columns the batch lacks read as null through
    the name mapping)."""

    from ..plane.tableread import DataFile, read_files

    rows = df
    if DELETE_COLUMN in df.columns:
        rows = df.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN)
    if replaced:
        stored = _spark_arrow_schema(table)
        files = [DataFile(_store_path(f.file_path), f.file_size_in_bytes, {}) for f in replaced]
        target = read_files(df.sparkSession, files, stored, store)
        rows = target.join(df.select(*keys), list(keys), "left_anti").unionByName(
            rows, allowMissingColumns=True
        )
    return rows.select(*[quote(n) for n in table.schema().column_names if n in rows.columns])


SMALL_FILE = 32 * 1024 * 1024  # a data file under this size is compacted with its partition's


def _compact(table: Any, compression: str) -> int:
    """Rewrite each partition's small data files (two or more under SMALL_FILE) as one file
    under `data/rivc-compact-<uuid>/`, read and written with Arrow in this process (as delta-rs
    compacts Delta tables), and replace them in one snapshot. Columns a file lacks are read as
    null. Returns the number of files replaced; none for a table with delete files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tasks = list(table.scan().plan_files())
    if any(t.delete_files for t in tasks):
        return 0
    groups: dict[tuple[int, tuple[Any, ...]], list[Any]] = {}
    for t in tasks:
        if t.file.file_size_in_bytes < SMALL_FILE:
            key = (t.file.spec_id, tuple(t.file.partition))
            groups.setdefault(key, []).append(t.file)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if not groups:
        return 0
    schema = _spark_arrow_schema(table)
    folder = join(table.location(), f"data/rivc-compact-{uuid.uuid4().hex[:8]}")
    old: list[Any] = []
    new: list[Any] = []
    metadata = table.metadata
    for n, ((spec_id, values), files) in enumerate(sorted(groups.items(), key=str)):
        parts = []
        for f in files:
            with table.io.new_input(f.file_path).open() as stream:
                data = pq.read_table(stream)
            parts.append(
                pa.table(
                    [
                        data.column(c).cast(schema.field(c).type)
                        if c in data.column_names
                        else pa.nulls(data.num_rows, schema.field(c).type)
                        for c in schema.names
                    ],
                    schema=schema,
                )
            )
        path = f"{folder}/part-{n:05d}.parquet"
        output = table.io.new_output(path)
        with output.create() as stream:
            pq.write_table(pa.concat_tables(parts), stream, compression=CODECS[compression])
        new.append(_footer_data_file(table, metadata, path, spec_id, _Fixed(values)))
        old += files
    fault("before-commit", table.name()[-1])  # the compacted files are in, unreferenced
    with table.transaction() as tx:
        _replace_files(tx, old, new, {})
    return len(old)


@dataclass(frozen=True)
class _Fixed:
    """A file's partition values, known already (a compacted group's)."""

    values: tuple[Any, ...]

    def __call__(self, stats: Any) -> list[Any]:
        return list(self.values)


def _footer_data_file(
    table: Any, metadata: Any, path: str, spec_id: int, partition: Callable[[Any], Any]
) -> Any:
    """The data file at `path`, with its statistics from its footer and the partition values
    `partition` gives from those statistics."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    source = table.io.new_input(path)
    with source.open() as stream:
        footer = pq.read_metadata(stream)
    schema = metadata.schema()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition(stats)),
        file_size_in_bytes=len(source),
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )


def _replace_files(tx: Any, old: list[Any], new: list[Any], props: dict[str, str]) -> None:
    """In `tx`: one snapshot that removes the data files `old` (an overwrite; none: an append)
    and adds `new`."""
    from pyiceberg.table import TableProperties

    if tx.table_metadata.name_mapping() is None:  # files Spark wrote have no field ids
        tx.set_properties(
            **{
                TableProperties.DEFAULT_NAME_MAPPING: (
                    tx.table_metadata.schema().name_mapping.model_dump_json()
                )
            }
        )
    snapshot = tx.update_snapshot(snapshot_properties=props)
    with snapshot.overwrite() if old else snapshot.fast_append() as producer:
        for data_file in old:
            producer.delete_data_file(data_file)
        for data_file in new:
            producer.append_data_file(data_file)


def _data_files(
    table: Any, metadata: Any, paths: list[str], written: list[Any], bucketed: set[int]
) -> list[Any]:
    """The data files for Parquet files Spark wrote, with their statistics from the footers
    (as `add_files` reads them). A partition field computed by an order-preserving transform
    is inferred from the file's bounds, as `add_files` does; a bucket (`bucketed`: their
    positions in the spec) cannot be, and is the value the task wrote the file under."""
    from pyiceberg.io.pyarrow import parquet_files_to_data_files

    if not bucketed:
        return list(parquet_files_to_data_files(table.io, metadata, iter(paths)))
    schema, spec = metadata.schema(), metadata.spec()

    def partition(w: Any) -> Callable[[Any], list[Any]]:
        def values(stats: Any) -> list[Any]:
            out = []
            for i, field in enumerate(spec.fields):
                if i in bucketed:
                    value = w.partition.get(f"_rivc_p{i}")
                    out.append(None if value is None else int(value))
                else:
                    out.append(stats._partition_value(field, schema))
            return out

        return values

    return [
        _footer_data_file(table, metadata, path, metadata.default_spec_id, partition(w))
        for path, w in zip(paths, written, strict=True)
    ]


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


def file_io(store: Store) -> dict[str, str]:
    """pyiceberg's FileIO properties for the store's options."""
    props = {FILE_IO[k]: v for k, v in store.options.items() if k in FILE_IO}
    if "s3.endpoint" in props and "s3.region" not in props:
        props["s3.region"] = "us-east-1"  # an endpoint of one's own has no region to discover
    return props


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
