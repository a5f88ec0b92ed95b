"""Iceberg housekeeping (`rivc maintain`): compaction of small files, expiry of old snapshots,
removal of files no snapshot references."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...util.faults import fault
from ...util.storage import Store, join
from .catalog import CODECS, bare, footer_data_file, replace_files, spark_arrow_schema, store_path

if TYPE_CHECKING:
    pass


def housekeep(
    table: Any, store: Store, compression: str, retain_hours: int, dry_run: bool
) -> tuple[int, int, list[str]]:
    """Iceberg's own housekeeping through pyiceberg: compact each partition's small data
    files into one (`compact`; not on a dry run), expire the snapshots older than
    `retain_hours` (never the current one), then delete the files no remaining snapshot
    references that are older than the retention: data files under the table's `data/`
    (what the expired snapshots held, and the files of killed jobs), and under
    `metadata/` the manifest lists and manifests of expired snapshots and metadata files
    that are neither current nor in the table's metadata log. Returns (files compacted,
    snapshots expired, files deleted), or what would be on a dry run."""
    from datetime import UTC, datetime, timedelta

    import pyarrow.fs as pafs

    compacted = 0
    if not dry_run:
        compacted = compact(table, compression)
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
    referenced = {bare(table.metadata_location)}
    referenced |= {bare(e.metadata_file) for e in table.metadata.metadata_log}
    for s in table.snapshots():
        if s.snapshot_id in kept:
            referenced.add(bare(s.manifest_list))
            for manifest in s.manifests(table.io):
                referenced.add(bare(manifest.manifest_path))
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    referenced.add(bare(entry.data_file.file_path))
    uri = store_path(table.location())
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
            and bare(i.path) not in referenced
            and i.mtime is not None
            and i.mtime.timestamp() < cutoff.timestamp()
        ]
    if not dry_run:
        for path in orphans:
            fs.delete_file(path)
    return compacted, len(expired), orphans


SMALL_FILE = 32 * 1024 * 1024  # a data file under this size is compacted with its partition's


def compact(table: Any, compression: str) -> int:
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
    schema = spark_arrow_schema(table)
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
        new.append(footer_data_file(table, metadata, path, spec_id, _Fixed(values)))
        old += files
    fault("before-commit", table.name()[-1])  # the compacted files are in, unreferenced
    with table.transaction() as tx:
        replace_files(tx, old, new, {})
    return len(old)


@dataclass(frozen=True)
class _Fixed:
    """A file's partition values, known already (a compacted group's)."""

    values: tuple[Any, ...]

    def __call__(self, stats: Any) -> list[Any]:
        return list(self.values)
