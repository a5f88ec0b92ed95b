"""The clickhouse sink's speed: the sink bench's table model of N rows (default 1,000,000) into a
ClickHouse server of its own (Debian's package), appended and upserted, from one `rivc run`,
twice; then the same rows, as CSV, inserted by `clickhouse-client` over the native protocol into
a table of the same columns (the anchor: the bare client, no marker, no checks).

    python bench/clickhouse_bench.py
    python bench/clickhouse_bench.py --rows 200000

Each sink node's duration comes from target/run_results.json; the second run rebuilds the model,
so the append adds N rows and the upsert writes a new version of every key.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from sink_bench import MODEL, runs_of_sinks  # noqa: E402

from rivc_testing import clickhouse_server  # noqa: E402

SINKS = """
sinks:
  - {name: appended, from: orders, connector: clickhouse,
     config: {url: "URL", database: bench, table: appended}}
  - {name: upserted, from: orders, connector: clickhouse,
     config: {url: "URL", database: bench, table: upserted, mode: upsert,
              key_columns: [order_id]}}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "clickhouse"
        home.mkdir()
        with clickhouse_server(home) as (url, port):
            root = Path(tmp) / "project"
            (root / "models").mkdir(parents=True)
            (root / "sinks").mkdir()
            (root / "rivc_project.yml").write_text("name: chbench\n")
            (root / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
            (root / "sinks/out.yml").write_text(SINKS.replace("URL", url))
            runs = ("first run", "second run (the model rebuilt: a new version of each key)")
            runs_of_sinks(rivc, root, args.rows, runs)
            anchor(root, port, args.rows)


def anchor(root: Path, port: int, rows: int) -> None:
    """The model's rows as CSV (Arrow's writer; timestamps as ClickHouse reads them), inserted
    by clickhouse-client into an empty table of the appended table's columns."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as csv
    from deltalake import DeltaTable

    table = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
    at = table.schema.get_field_index("created_at")
    created = table.column(at)
    seconds = pc.cast(created, pa.timestamp("s", tz=created.type.tz), safe=False)
    text = pc.strftime(seconds, "%Y-%m-%d %H:%M:%S")
    table = table.set_column(at, "created_at", text)
    path = root / "orders.csv"
    csv.write_csv(table, path, csv.WriteOptions(include_header=False, quoting_style="needed"))

    def client(sql: str, stdin: Path | None = None) -> None:
        with open(stdin, "rb") if stdin else open("/dev/null", "rb") as given:
            done = subprocess.run(
                ["clickhouse-client", "--port", str(port), "-q", sql],
                stdin=given,
                capture_output=True,
                text=True,
            )
            if done.returncode:
                raise SystemExit(f"clickhouse-client: {done.stderr[:500]}")

    client("CREATE TABLE bench.anchor AS bench.appended")
    started = time.perf_counter()
    columns = ", ".join(table.column_names)
    client(f"INSERT INTO bench.anchor ({columns}) FORMAT CSV", path)
    secs = time.perf_counter() - started
    print(f"  clickhouse-client {secs:5.1f} s {rows / secs:>10,.0f} rows/s (CSV already written)")


if __name__ == "__main__":
    main()
