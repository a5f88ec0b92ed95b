"""The database sinks' speed: a table model of N rows (default 1,000,000) into PostgreSQL (or
MariaDB), appended and upserted, from one `rivc run`, twice; for PostgreSQL then the same rows,
as CSV, loaded by `psql \\copy` into a table of the same columns (the anchor: one COPY, no
staging).

    python bench/dbsink_bench.py
    python bench/dbsink_bench.py --database mysql
    python bench/dbsink_bench.py --rows 200000

A throwaway database on the machine's server (PostgreSQL 127.0.0.1:5432 as postgres, MariaDB
127.0.0.1:3306 as root) is created and dropped. Each sink node's duration comes from
target/run_results.json; the second run rebuilds the model, so the upsert replaces every key.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pymysql

sys.path.insert(0, str(Path(__file__).parent))
from sink_bench import MODEL, runs_of_sinks  # noqa: E402

SINKS = """
sinks:
  - {name: appended, from: orders, connector: KIND,
     config: {connection: db, table: appended}}
  - {name: upserted, from: orders, connector: KIND,
     config: {connection: db, table: upserted, mode: upsert, key_columns: [order_id]}}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--database", choices=["postgres", "mysql"], default="postgres")
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    name = f"rivc_bench_{secrets.token_hex(4)}"
    kind = args.database
    user = "postgres" if kind == "postgres" else "root"
    admin: Any = (
        psycopg.connect(host="127.0.0.1", user=user, dbname="postgres", autocommit=True)
        if kind == "postgres"
        else pymysql.connect(host="127.0.0.1", user=user, autocommit=True)
    )
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "models").mkdir()
            (root / "sinks").mkdir()
            (root / "rivc_project.yml").write_text("name: pgbench\n")
            (root / "profiles.yml").write_text(
                f"default:\n  connections:\n    db: {{type: {kind}, host: 127.0.0.1, "
                f"user: {user}, database: {name}}}\n"
            )
            (root / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
            (root / "sinks/out.yml").write_text(SINKS.replace("KIND", kind))
            runs = ("first run", "second run (the model rebuilt: upsert replaces every key)")
            runs_of_sinks(rivc, root, args.rows, runs)
            if kind == "postgres":
                anchor(root, name, args.rows)
    finally:
        force = " WITH (FORCE)" if kind == "postgres" else ""
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}{force}")
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
        c.execute("CREATE TABLE anchor (LIKE appended)")
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
            f"\\copy anchor FROM '{path}' (FORMAT csv)",
        ],
        check=True,
        capture_output=True,
    )
    secs = time.perf_counter() - started
    print(f"  psql \\copy       {secs:6.1f} s {rows / secs:>10,.0f} rows/s (CSV already written)")


if __name__ == "__main__":
    main()
