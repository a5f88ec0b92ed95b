"""The postgres sink's speed beside `psql \\copy`: a table model of N rows (default 1,000,000)
into PostgreSQL, appended and upserted, from one `rivc run`; then the same rows, as CSV, loaded
by `psql \\copy` into a table of the same columns (the anchor: one COPY, no staging).

    python bench/pgsink_bench.py
    python bench/pgsink_bench.py --rows 200000

A throwaway database on the machine's PostgreSQL (127.0.0.1:5432, user postgres) is created and
dropped. Each sink node's duration comes from target/run_results.json; the upsert's second run
replaces every key.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from extract_bench import measure  # noqa: E402
from sink_bench import MODEL  # noqa: E402

SINKS = """
sinks:
  - {name: pg_append, from: orders, connector: postgres,
     config: {connection: db, table: bench.appended}}
  - {name: pg_upsert, from: orders, connector: postgres,
     config: {connection: db, table: bench.upserted, mode: upsert, key_columns: [order_id]}}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    name = f"rivc_bench_{secrets.token_hex(4)}"
    admin = psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True)
    admin.execute(f"CREATE DATABASE {name}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "models").mkdir()
            (root / "sinks").mkdir()
            (root / "rivc_project.yml").write_text("name: pgbench\n")
            (root / "profiles.yml").write_text(
                "default:\n  connections:\n    db: {type: postgres, host: 127.0.0.1, "
                f"user: postgres, database: {name}}}\n"
            )
            (root / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
            (root / "sinks/out.yml").write_text(SINKS)
            for run in ("first run", "second run (the model rebuilt: upsert replaces every key)"):
                wall, _ = measure([rivc, "run"], root)
                results = json.loads((root / "target/run_results.json").read_text())["results"]
                print(f"{args.rows:,} rows, {run}: whole run {wall:.1f} s")
                for r in results:
                    if r["node"].startswith("sink:"):
                        secs = r["duration_s"]
                        print(f"  {r['node']:<16} {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")
            anchor(root, name, args.rows)
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def anchor(root: Path, name: str, rows: int) -> None:
    """The model's rows as CSV (Arrow's writer), loaded by psql's \\copy into an empty table of
    the appended table's columns."""
    import pyarrow.csv as csv
    from deltalake import DeltaTable

    table = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
    path = root / "orders.csv"
    csv.write_csv(table, path, csv.WriteOptions(include_header=False, quoting_style="needed"))
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name, autocommit=True) as c:
        c.execute("CREATE TABLE bench.anchor (LIKE bench.appended)")
    started = time.perf_counter()
    subprocess.run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            name,
            "-c",
            f"\\copy bench.anchor FROM '{path}' (FORMAT csv)",
        ],
        check=True,
        capture_output=True,
    )
    secs = time.perf_counter() - started
    print(f"  psql \\copy       {secs:6.1f} s {rows / secs:>10,.0f} rows/s (CSV already written)")


if __name__ == "__main__":
    main()
