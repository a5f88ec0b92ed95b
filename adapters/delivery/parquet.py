"""Staged Parquet: how batches and extracted tables sit on disk between Spark, Arrow and the
connectors, read back in bounded memory."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..util.storage import Store, is_local, join

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame


@contextmanager
def staged(df: DataFrame, path: Path) -> Iterator[pads.Dataset]:
    """The batch as an Arrow dataset that Spark wrote as Parquet, in parallel and in bounded
    memory; connectors stream it in record batches instead of collecting it on the driver."""
    shutil.rmtree(path, ignore_errors=True)
    df.write.mode("overwrite").option("compression", "snappy").parquet(str(path))
    try:
        yield dataset([str(path)])
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def staged_at(df: DataFrame, uri: str, store: Store) -> Iterator[pads.Dataset]:
    """`staged` for a Spark that does not share rivc's disk: its tasks write the batch under
    `uri` (the warehouse's staging area) and rivc reads it back through the filesystem layer."""
    import pyarrow.dataset as pads
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..plane.taskwrite import prefix, write_parquet

    where = prefix("staged")
    written = write_parquet(df, uri, store, where, "snappy")
    try:
        if not written:
            yield pads.dataset(to_arrow_schema(df.schema, timezone="UTC").empty_table())
        else:
            fs, base = store.filesystem(uri)
            paths = [f"{base.rstrip('/')}/{w.rel}" for w in written]
            yield pads.dataset(paths, filesystem=fs, format="parquet")
    finally:
        store.remove_tree(join(uri, where))


def _opened(files: list[str], store: Store | None) -> tuple[pafs.FileSystem | None, list[str]]:
    """The filesystem `files` live on (None: this machine's disk) and their paths in it."""
    if store is None or all(is_local(f) for f in files):
        return None, [f.removeprefix("file://") for f in files]
    fs, _ = store.filesystem(files[0])
    return fs, [store.filesystem(f)[1] for f in files]


def parquet_schema(files: list[str], store: Store | None = None) -> Any:
    """The schema of staged Parquet files, from the first footer (pyarrow.dataset, a slow
    import, is not needed for that)."""
    import pyarrow.parquet as pq

    fs, paths = _opened(files[:1], store)
    return pq.read_schema(paths[0], filesystem=fs).remove_metadata()


def parquet_rows(files: list[str], store: Store | None = None) -> int:
    import pyarrow.parquet as pq

    fs, paths = _opened(files, store)
    if fs is None:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    total = 0
    for p in paths:
        with fs.open_input_file(p) as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


def dataset(paths: list[str], store: Store | None = None) -> pads.Dataset:
    import pyarrow.dataset as pads

    # pre_buffer would read whole files ahead: memory would then grow with the batch
    options = pads.ParquetFragmentScanOptions(pre_buffer=False, buffer_size=1 << 20)
    fmt = pads.ParquetFileFormat(default_fragment_scan_options=options)
    fs, files = _opened(paths, store)
    if fs is not None:
        return pads.dataset(files, format=fmt, filesystem=fs)
    return pads.dataset(
        files[0] if len(files) == 1 and Path(files[0]).is_dir() else files, format=fmt
    )


def dataset_head(data: pads.Dataset, rows: int) -> pads.Dataset:
    import pyarrow.dataset as pads

    return pads.dataset(data.head(rows))
