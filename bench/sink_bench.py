"""Rows/s into each sink for N generated rows (default 5,000,000), from one `rivc run`.

    python bench/sink_bench.py
    python bench/sink_bench.py --rows 1000000
    python bench/sink_bench.py --sinks delta,iceberg --driver   # lakehouse sinks via the driver

A table model built from Spark's range() feeds one sink per connector; each sink node's
duration comes from target/run_results.json. Peak RSS: the rivc driver process alone (where
connectors run) and the whole process tree (with the JVM), sampled every 100 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from extract_bench import measure  # noqa: E402

MODEL = """{{{{ config(materialized='table') }}}}
select id as order_id, id % 50000 as customer_id, concat('status_', id % 7) as status,
       cast(id % 100000 as decimal(12, 2)) / 100 as total,
       timestamp '2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) as created_at,
       repeat(md5(cast(id as string)), 3) as note
from range({rows})
"""
SINKS = """
sinks:
  - {name: parquet, from: orders, connector: files, config: {path: out/parquet, format: parquet}}
  - {name: csv, from: orders, connector: files, config: {path: out/csv, format: csv}}
  - {name: jsonl, from: orders, connector: files, config: {path: out/jsonl, format: jsonl}}
  - {name: avro, from: orders, connector: files, config: {path: out/avro, format: avro}}
  - {name: delta, from: orders, connector: delta, config: {table_uri: out/delta, mode: append}}
  - {name: iceberg, from: orders, connector: iceberg, config: {namespace: b, table: orders}}
"""


def runs_of_sinks(rivc: str, root: Path, rows: int, runs: tuple[str, ...]) -> None:
    """`rivc run` in `root` once per label of `runs`, each sink node's seconds and rows/s
    printed from target/run_results.json."""
    for run in runs:
        wall, _ = measure([rivc, "run"], root)
        results = json.loads((root / "target/run_results.json").read_text())["results"]
        print(f"{rows:,} rows, {run}: whole run {wall:.1f} s")
        for r in results:
            if r["node"].startswith("sink:"):
                secs = r["duration_s"]
                print(f"  {r['node']:<16} {secs:6.1f} s {rows / secs:>10,.0f} rows/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--sinks", default="", help="comma-separated sink names (default: all)")
    parser.add_argument(
        "--driver",
        action="store_true",
        help="stream delta and iceberg through the driver (else: executors write, if large)",
    )
    args = parser.parse_args()
    wanted = set(filter(None, args.sinks.split(",")))
    threshold = "1000GB" if args.driver else "64MB"
    sinks = "sinks:\n" + "".join(
        line.replace("}}", f", spark_write_threshold: {threshold}}}}}")
        if "connector: delta" in line or "connector: iceberg" in line
        else line
        for line in SINKS.splitlines(keepends=True)[2:]
        if not wanted or any(f"name: {w}," in line for w in wanted)
    )
    rivc = str(Path(sys.executable).parent / "rivc")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "models").mkdir()
        (root / "sinks").mkdir()
        (root / "rivc_project.yml").write_text("name: sinkbench\n")
        (root / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
        (root / "sinks/out.yml").write_text(sinks)
        own: list[float] = []
        wall, peak_tree = measure([rivc, "run"], root, own=own)
        peak_driver = max(own, default=0.0)
        results = json.loads((root / "target/run_results.json").read_text())["results"]
        print(
            f"{args.rows:,} rows; whole run {wall:.1f} s; peak RSS driver {peak_driver:,.0f} MB, "
            f"process tree {peak_tree:,.0f} MB"
        )
        for r in results:
            secs = r["duration_s"]
            print(
                f"  {r['node']:<16} {secs:7.1f} s {args.rows / secs:>12,.0f} rows/s "
                f"{(r['bytes'] or 0) / 1e6:>9,.1f} MB written"
            )


if __name__ == "__main__":
    main()
