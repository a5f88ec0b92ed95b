"""Extraction speed from PostgreSQL: `rivc run` (to Parquet, to Delta) beside `psql \\copy`.

    python bench/extract_bench.py                    # 500,000 and 2,000,000 rows
    python bench/extract_bench.py --rows 2000000 --parallel 2
    python bench/extract_bench.py --dlt-python /tmp/dlt/bin/python   # dlt beside it

The table has Rivet's benchmark shape: a few ids and timestamps plus text-heavy columns. It is
created in a throwaway database `rivc_bench_<random>` and dropped at the end. Reported: wall
time, rows/s and peak RSS of the whole process tree (rivc, its JVM and Python workers), sampled
from /proc every 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

CREATE = """
CREATE TABLE events AS
SELECT g AS id,
       (g % 50000) AS user_id,
       (g % 1000) AS account_id,
       timestamp '2026-01-01' + g * interval '1 second' AS created_at,
       timestamp '2026-01-01' + g * interval '2 second' AS updated_at,
       'status_' || (g % 7) AS status,
       md5(g::text) || ' ' || md5((g + 1)::text) AS title,
       repeat(md5((g * 7)::text), 6) AS body,
       (g % 100000) / 100.0 AS amount
FROM generate_series(1, {rows}) g;
ALTER TABLE events ADD PRIMARY KEY (id);
"""


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        ppid = int(fields.get("PPid", "0").strip())
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack += children.get(p, [])
    return total / 1024


def own_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measure(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None, own: list[float] | None = None
) -> tuple[float, float]:
    """(wall seconds, peak RSS of the process tree); `own` gets the process's own peak RSS."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0.0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss_mb(proc.pid))
            if own is not None:
                own.append(own_rss_mb(proc.pid))
            time.sleep(0.1)

    thread = threading.Thread(target=sample)
    thread.start()
    out, err = proc.communicate()
    stop.set()
    thread.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.decode()[-2000:]}\n{err.decode()[-2000:]}")
    return time.perf_counter() - started, peak


def project(root: Path, db: str, sink: str, parallel: int, rows: int) -> None:
    root.mkdir(parents=True)
    (root / "rivc_project.yml").write_text("name: bench\n")
    (root / "profiles.yml").write_text(
        "default:\n  connections:\n"
        f"    db: {{type: postgres, host: 127.0.0.1, user: postgres, database: {db}}}\n"
    )
    (root / "sources").mkdir()
    mode = (
        f"mode: chunked, chunk_column: id, chunk_size: {max(1, rows // parallel)}, parallel: {parallel}"
        if parallel > 1
        else "mode: full"
    )
    (root / "sources/pg.yml").write_text(
        "sources:\n  - name: pg\n    connector: postgres\n    connection: db\n"
        f"    tuning: {{profile: fast}}\n    tables:\n      - {{name: events, table: events, {mode}}}\n"
    )
    (root / "sinks").mkdir()
    config = (
        "{path: out/events, format: parquet}"
        if sink == "files"
        else "{table_uri: out/events, mode: append}"
    )
    (root / "sinks/out.yml").write_text(
        f"sinks:\n  - {{name: out, from: source:pg.events, connector: {sink}, config: {config}}}\n"
    )


DLT_SCRIPT = """
import sys
import dlt
from dlt.sources.sql_database import sql_table
db, out = sys.argv[1], sys.argv[2]
table = sql_table(credentials=f"postgresql://postgres@127.0.0.1:5432/{db}", table="events",
                  backend="pyarrow", chunk_size=50000)
pipe = dlt.pipeline(pipeline_name="bench", pipelines_dir=f"{out}/.dlt", dataset_name="bench",
                    destination=dlt.destinations.filesystem(bucket_url=f"file://{out}"))
pipe.run(table, loader_file_format="parquet")
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="*", default=[500_000, 2_000_000])
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument(
        "--dlt-python",
        help="a Python with dlt[parquet,filesystem,sql_database] and psycopg installed",
    )
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    name = f"rivc_bench_{secrets.token_hex(3)}"
    admin = psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True)
    admin.execute(f"CREATE DATABASE {name}")
    try:
        for rows in args.rows:
            with psycopg.connect(
                host="127.0.0.1", user="postgres", dbname=name, autocommit=True
            ) as conn:
                conn.execute("DROP TABLE IF EXISTS events")
                conn.execute(CREATE.format(rows=rows))
                conn.execute("VACUUM ANALYZE events")
            print(f"\n{rows:,} rows")
            with tempfile.TemporaryDirectory() as tmp:
                base = Path(tmp)
                copy = base / "copy.csv"
                secs, rss = measure(
                    [
                        "psql",
                        "-h",
                        "127.0.0.1",
                        "-U",
                        "postgres",
                        "-d",
                        name,
                        "-c",
                        f"\\copy (SELECT * FROM events) TO '{copy}' WITH (FORMAT csv)",
                    ],
                    base,
                )
                print(
                    f"  psql \\copy to CSV        {secs:7.1f} s {rows / secs:>10,.0f} rows/s {rss:7.0f} MB"
                )
                if args.dlt_python:
                    script = base / "dlt_bench.py"
                    script.write_text(DLT_SCRIPT)
                    secs, rss = measure(
                        [args.dlt_python, str(script), name, str(base / "dlt")], base
                    )
                    label = "dlt (pyarrow) -> parquet"
                    print(f"  {label:<24} {secs:7.1f} s {rows / secs:>10,.0f} rows/s {rss:7.0f} MB")
                for sink in ("files", "delta"):
                    for parallel in sorted({1, args.parallel}):
                        root = base / f"{sink}-{parallel}"
                        project(root, name, sink, parallel, rows)
                        secs, rss = measure([rivc, "run"], root)
                        label = f"rivc run -> {sink:<5} p={parallel}"
                        nodes = {
                            r["node"]: r["duration_s"]
                            for r in json.loads((root / "target/run_results.json").read_text())[
                                "results"
                            ]
                        }
                        src, out = nodes["source:pg.events"], nodes["sink:out"]
                        print(
                            f"  {label:<24} {secs:7.1f} s {rows / secs:>10,.0f} rows/s {rss:7.0f} MB"
                            f"   (extraction {src:.1f} s = {rows / src:,.0f} rows/s; sink {out:.1f} s)"
                        )
                        shutil.rmtree(root)
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


if __name__ == "__main__":
    main()
