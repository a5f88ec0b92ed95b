"""The files sink on Arrow data (no Spark needed): formats, compression, partitions, sizes."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from rivc.adapters.connectors.files.sink import FilesSink
from rivc.adapters.connectors.files.spec import FilesSinkConfig
from rivc.adapters.plane.base import SinkContext

ROWS = [
    {
        "id": i,
        "day": date(2026, 1, 1 + i % 2),
        "amount": Decimal(f"{i}.50"),
        "note": None if i == 3 else f'say "hi", {i}',
        "tags": {"k": i},
    }
    for i in range(6)
]


def data() -> pads.Dataset:
    return pads.dataset(pa.Table.from_pylist(ROWS))


def sink(tmp_path: Path, **config: object) -> FilesSink:
    cfg = FilesSinkConfig.model_validate({"path": "out", **config})
    return FilesSink(cfg, SinkContext(tmp_path, "p", "s"))


def files(tmp_path: Path) -> list[str]:
    return sorted(
        p.relative_to(tmp_path / "out").as_posix()
        for p in (tmp_path / "out").rglob("*")
        if p.is_file() and not p.relative_to(tmp_path / "out").as_posix().startswith("_rivc/")
    )


@pytest.mark.parametrize(
    ("fmt", "compression", "name", "reader"),
    [
        ("parquet", "zstd", "batch-000007-part-0000.parquet", "read_parquet"),
        ("csv", None, "batch-000007-part-0000.csv", "read_csv"),
        ("csv", "gzip", "batch-000007-part-0000.csv.gz", "read_csv"),
        ("jsonl", "zstd", "batch-000007-part-0000.jsonl.zst", "read_json"),
        ("json", None, "batch-000007-part-0000.json", "read_json"),
    ],
)
def test_formats_read_back_with_duckdb(tmp_path, fmt, compression, name, reader):
    result = sink(tmp_path, format=fmt, compression=compression).write(data(), 7)
    assert files(tmp_path) == [name]
    assert result.rows == 6 and result.files[0][2] == (tmp_path / "out" / name).stat().st_size
    got = duckdb.sql(
        f"SELECT id, CAST(amount AS DOUBLE), note FROM {reader}('{tmp_path / 'out' / name}') ORDER BY id"
    ).fetchall()
    assert [g[0] for g in got] == list(range(6))
    assert got[1][1] == 1.5 and got[1][2] == 'say "hi", 1'
    if fmt != "csv":  # CSV writes NULL as the null_value, '' by default
        assert got[3][2] is None


def test_csv_options_and_nested_values(tmp_path):
    sink(tmp_path, format="csv", csv={"delimiter": ";", "null_value": "NULL"}).write(data(), 0)
    text = (tmp_path / "out/batch-000000-part-0000.csv").read_text().splitlines()
    assert text[0] == "id;day;amount;note;tags"
    assert text[4].startswith("3;2026-01-02;3.50;NULL;")
    assert json.loads(text[1].split(";", 4)[4].strip('"').replace('""', '"')) == {"k": 0}
    # another quote character: Python's csv module writes the same cells
    sink(tmp_path, path="q", format="csv", csv={"quote": "'", "null_value": "NULL"}).write(
        data(), 0
    )
    other = (tmp_path / "q/batch-000000-part-0000.csv").read_text().splitlines()
    assert other[0] == "id,day,amount,note,tags" and other[4].startswith("3,2026-01-02,3.50,NULL,")


def test_hive_partitions_and_size_limit(tmp_path):
    big = pads.dataset(pa.Table.from_pylist(ROWS * 2000))
    result = sink(
        tmp_path,
        format="jsonl",
        partitioning="columns",
        partition_by=["day"],
        max_file_size="100KB",
    ).write(big, 3)
    names = files(tmp_path)
    assert {n.split("/")[0] for n in names} == {"day=2026-01-01", "day=2026-01-02"}
    assert len(names) > 2 and all(s <= 100_000 + 70_000 for _, _, s in result.files)
    assert sum(r for _, r, _ in result.files) == 12_000
    got = duckdb.sql(
        f"SELECT day, count(*) FROM read_json('{tmp_path}/out/*/*.jsonl', hive_partitioning=true) "
        "GROUP BY day ORDER BY day"
    ).fetchall()
    assert [c for _, c in got] == [6000, 6000]


def test_replay_rewrites_and_overwrite_replaces(tmp_path):
    s = sink(tmp_path, format="parquet", mode="overwrite")
    s.write(data(), 1)
    s.write(data(), 1)  # a replayed batch: same name, no duplicate
    assert files(tmp_path) == ["batch-000001-part-0000.parquet"]
    s.write(data(), 2)
    assert files(tmp_path) == ["batch-000002-part-0000.parquet"]
    empty = pads.dataset(pa.Table.from_pylist(ROWS).slice(0, 0))
    s.write(empty, 3)  # an empty result replaces the old one too
    assert files(tmp_path) == ["batch-000003-part-0000.parquet"]
    assert duckdb.sql(f"SELECT count(*) FROM '{tmp_path}/out/*.parquet'").fetchall() == [(0,)]


def test_new_batch_ids_start_above_the_files_already_written(tmp_path):
    """Without the state store's record (reset, or a detached job's own), a new batch must not
    take the id of files already there: append mode would replace them."""
    s = sink(tmp_path, format="parquet", partitioning="columns", partition_by=["day"])
    assert s.last_batch_id() is None
    s.write(data(), 0)
    s.write(data(), 7)
    assert s.last_batch_id() == 7
    assert s.committed(7)  # its commit marker, written after its files
    (tmp_path / "out/_rivc/commit-000007").unlink()  # killed between files and marker
    assert not s.committed(7)  # a replay is rewritten, never skipped: it may be partial
    assert s.last_batch_id() == 7


def test_a_commit_marker_holds_the_places_of_what_the_batch_consumed(tmp_path):
    from dataclasses import replace

    s = sink(tmp_path, format="parquet")
    assert s.places(["source:a.b"]) == {"source:a.b": None}
    s.ctx = replace(s.ctx, places={"source:a.b": 1700000000123})
    s.write(data(), 0)
    s.ctx = replace(s.ctx, places={"source:a.b": 1700000000456})
    s.write(data(), 1)
    assert s.places(["source:a.b", "model:x"]) == {"source:a.b": 1700000000456, "model:x": None}


def test_day_and_hour_partitions_by_event_time(tmp_path):
    from datetime import datetime

    rows = [{"id": i, "at": datetime(2026, 1, 1 + i // 4, i % 2)} for i in range(8)]
    rows.append({"id": 8, "at": None})
    table = pads.dataset(pa.Table.from_pylist(rows))
    result = sink(tmp_path, format="parquet", partitioning="hour", time_column="at").write(table, 0)
    assert {n.rsplit("/", 1)[0] for n in files(tmp_path)} == {
        "dt=2026-01-01/hour=00",
        "dt=2026-01-01/hour=01",
        "dt=2026-01-02/hour=00",
        "dt=2026-01-02/hour=01",
        "dt=__HIVE_DEFAULT_PARTITION__",
    }
    assert sum(r for _, r, _ in result.files) == 9
    got = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{tmp_path}/out/dt=2026-01-02/*/*.parquet')"
    ).fetchall()
    assert got == [(4,)]


@pytest.mark.parametrize("compression", [None, "snappy", "zstd"])
def test_avro_with_inferred_schema(tmp_path, compression):
    import fastavro

    sink(tmp_path, format="avro", compression=compression, avro_record_name="order").write(
        data(), 0
    )
    with open(tmp_path / "out/batch-000000-part-0000.avro", "rb") as fh:
        reader = fastavro.reader(fh)
        schema = reader.writer_schema
        rows = list(reader)
    assert schema["name"] == "rivc.order"
    assert [r["id"] for r in rows] == list(range(6))
    assert rows[1]["amount"] == Decimal("1.50") and rows[1]["day"] == date(2026, 1, 2)
    assert rows[3]["note"] is None and rows[2]["tags"] == {"k": 2}


def test_adopt_links_parquet_files_of_the_same_codec(tmp_path):
    import pyarrow.parquet as pq

    staged = []
    for n in range(2):
        path = tmp_path / f"staged-{n}.parquet"
        pq.write_table(
            pa.table({"id": [n * 10 + i for i in range(10)]}), path, compression="snappy"
        )
        staged.append(f"file://{path}")
    out = sink(tmp_path, path="out", format="parquet", mode="overwrite")
    first = out.adopt(staged, 0)
    assert first is not None and first.rows == 20 and len(first.files) == 2
    names = sorted(p.name for p in (tmp_path / "out").iterdir() if p.name != "_rivc")
    assert names == ["batch-000000-part-0000.parquet", "batch-000000-part-0001.parquet"]
    assert all((tmp_path / "out" / n).stat().st_nlink == 2 for n in names)  # links, not copies
    assert out.adopt(staged[:1], 1) is not None  # overwrite: batch 0's files go
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name != "_rivc") == [
        "batch-000001-part-0000.parquet"
    ]
    # another codec, partitions or a size limit: the sink rewrites instead
    assert sink(tmp_path, path="o2", format="parquet", compression="zstd").adopt(staged, 0) is None
    assert sink(tmp_path, path="o3", format="parquet", max_file_size="1MB").adopt(staged, 0) is None
    assert sink(tmp_path, path="o4", format="csv").adopt(staged, 0) is None


def only_file(tmp_path: Path) -> Path:
    (name,) = files(tmp_path)
    return tmp_path / "out" / name


@pytest.mark.parametrize("quote", ['"', "'"])  # Arrow's writer, and the csv module's
def test_csv_options_as_rivven_names_them(tmp_path, quote):
    """include_header, quote_char, always_quote, line_ending and columns, read back with
    Python's csv module."""
    import csv
    import io

    from rivc.compiler.importers.aliases import files_sink

    given = {
        "format": "csv",
        "csv": {
            "include_header": False,
            "quote_char": quote,
            "always_quote": True,
            "line_ending": "crlf",
            "columns": ["note", "id"],
            "null_value": "NULL",
        },
    }
    refusals: list[object] = []
    files_sink(given, refusals)
    assert refusals == []
    sink(tmp_path, **given).write(data(), 1)
    raw = only_file(tmp_path).read_bytes()
    assert raw.count(b"\r\n") == len(ROWS) and b"\n" not in raw.replace(b"\r\n", b"")
    got = list(csv.reader(io.StringIO(raw.decode(), newline=""), quotechar=quote))
    assert got == [
        ["NULL" if r["note"] is None else r["note"], str(r["id"])] for r in ROWS
    ]  # no header, the named columns in their order
    quoted = raw.decode().split("\r\n")[0]
    inner = 'say "hi", 0'.replace(quote, quote * 2)
    assert quoted == f"{quote}{inner}{quote},{quote}0{quote}"  # every value quoted


@pytest.mark.parametrize(
    ("compression", "level", "suffix", "decompress"),
    [
        ("snappy", None, ".snappy", "snappy"),
        ("lz4", None, ".lz4", "lz4"),
        ("gzip", 1, ".gz", "gzip"),
        ("zstd", 19, ".zst", "zstd"),
    ],
)
def test_text_compression_and_levels(tmp_path, compression, level, suffix, decompress):
    import cramjam

    sink(tmp_path, format="jsonl", compression=compression, compression_level=level).write(
        data(), 2
    )
    path = only_file(tmp_path)
    assert path.name.endswith(".jsonl" + suffix)
    text = bytes(getattr(cramjam, decompress).decompress(path.read_bytes())).decode()
    assert [json.loads(line)["id"] for line in text.splitlines()] == [r["id"] for r in ROWS]


def test_parquet_and_avro_blocks_as_rivven_names_them(tmp_path):
    import fastavro
    import pyarrow.parquet as pq

    from rivc.compiler.importers.aliases import files_sink

    given = {
        "format": "parquet",
        "parquet": {"compression": "zstd", "row_group_size": 2, "enable_statistics": False,
                    "data_page_size": 4096},
        "compression_level": 9,
    }  # fmt: skip
    files_sink(given, [])
    sink(tmp_path / "pq", **given).write(data(), 1)
    meta = pq.ParquetFile(only_file(tmp_path / "pq")).metadata
    assert meta.num_row_groups == 3
    column = meta.row_group(0).column(0)
    assert column.compression == "ZSTD" and not column.is_stats_set

    given = {"format": "avro", "avro": {"compression": "deflate", "namespace": "shop",
             "record_name": "Order"}, "compression_level": 9}  # fmt: skip
    files_sink(given, [])
    sink(tmp_path / "av", **given).write(data(), 1)
    with only_file(tmp_path / "av").open("rb") as fh:
        reader = fastavro.reader(fh)
        assert reader.codec == "deflate" and reader.writer_schema["name"] == "shop.Order"
        assert [r["id"] for r in reader] == [r["id"] for r in ROWS]

    refusals: list[tuple[object, str]] = []
    files_sink({"format": "avro", "avro": {"wire_format": True, "schema_id": 3}}, refusals)
    assert [k for k, _ in refusals] == [("avro", "wire_format"), ("avro", "schema_id")]
    with pytest.raises(ValueError, match="compression_level is for compression"):
        FilesSinkConfig.model_validate(
            {"path": "o", "compression": "snappy", "compression_level": 3}
        )
    with pytest.raises(ValueError, match="csv files take compression gzip, zstd, snappy, lz4"):
        FilesSinkConfig.model_validate({"path": "o", "format": "csv", "compression": "brotli"})


def test_csv_columns_are_checked_at_compile(make_project):
    from click.testing import CliRunner

    from rivc.adapters.cli import main

    root = make_project(
        {
            "models/m.sql": "select 1 as id, 'a' as name\n",
            "sinks/s.yml": "sinks:\n  - {name: out, from: m, connector: files, config: "
            "{path: o, format: csv, csv: {columns: [id, nope]}}}\n",
        }
    )
    result = CliRunner().invoke(main, ["compile", "--project-dir", str(root)])
    assert result.exit_code == 2
    assert "sinks/s.yml:2:" in result.output
    assert "csv.columns 'nope' is not a column of 'm' (columns: id, name)" in result.output
