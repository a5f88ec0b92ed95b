"""postgres-cdc speed: changes per second from PostgreSQL's log into a Delta merge and a Delta
scd2 history (batch mode).

    python bench/cdc_bench.py                # 200,000 changes each way
    python bench/cdc_bench.py --changes 50000

Starts a PostgreSQL cluster of its own with wal_level = logical (initdb as postgres, a free port,
a temporary folder; root needed), loads a table, and times `rivc run` in a new process for:
the snapshot of the table; a burst of single-row updates, each its own transaction; and one
transaction updating as many rows. Reported: wall time and changes/s of each run (both sinks),
each node's time, and the log the server keeps for the slot once caught up.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

RIVC = str(Path(sys.executable).with_name("rivc"))


def cluster() -> tuple[Path, int, list[str], Path]:
    bin_ = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    base = Path(tempfile.mkdtemp(prefix="rivc-cdc-bench-", dir="/tmp"))
    base.chmod(0o755)
    shutil.chown(base, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    as_pg = ["runuser", "-u", "postgres", "--"]
    data = base / "data"
    subprocess.run(
        [*as_pg, str(bin_ / "initdb"), "-D", str(data), "-A", "trust"],
        check=True,
        capture_output=True,
    )
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(
            f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n"
            "wal_level = logical\nmax_replication_slots = 4\n"
        )
    pg_ctl = [*as_pg, str(bin_ / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        [*pg_ctl, "-l", str(base / "log"), "-w", "start"], check=True, capture_output=True
    )
    return base, port, pg_ctl, data


def timed_run(root: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([RIVC, "run"], cwd=root, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    nodes = [line for line in done.stdout.splitlines() if " OK " in line]  # each node's time
    print("\n".join(nodes), file=sys.stderr)
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=200_000)
    n = ap.parse_args().changes
    base, port, pg_ctl, _ = cluster()
    try:
        con = psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        )
        con.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, status text, amount numeric(12, 2), "
            "updated timestamptz, note text)"
        )
        con.execute(
            f"INSERT INTO orders SELECT g, 'placed', g / 100.0, now(), md5(g::text) "
            f"FROM generate_series(1, {n}) g"
        )
        root = base / "proj"
        root.mkdir()
        (root / "rivc_project.yml").write_text("name: bench\n")
        (root / "profiles.yml").write_text(
            "default:\n  connections:\n    db: {type: postgres, host: 127.0.0.1, "
            f"port: {port}, user: postgres, database: postgres}}\n"
        )
        (root / "sources").mkdir()
        (root / "sources/pg.yml").write_text(
            "sources:\n  - name: pg\n    connector: postgres-cdc\n    connection: db\n"
            "    tables: [{name: orders, table: public.orders}]\n"
        )
        (root / "sinks").mkdir()
        (root / "sinks/lake.yml").write_text(
            "sinks:\n  - name: lake\n    from: source:pg.orders\n"
            "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
            "    connector: delta\n    config: {table_uri: out/orders, mode: merge, merge_keys: [id]}\n"
            "  - name: history\n    from: source:pg.orders\n"
            "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
            "    connector: delta\n    config: {table_uri: out/history, mode: scd2, merge_keys: [id]}\n"
        )
        results = []
        took = timed_run(root)
        results.append(("snapshot", n, took))
        con.execute("SET synchronous_commit = off")  # the writer's speed is not measured
        for i in range(1, n + 1):
            con.execute(
                "UPDATE orders SET status = 'burst', amount = amount + 1 WHERE id = %s", (i,)
            )
        con.execute("SET synchronous_commit = on")
        con.execute("SELECT 1")
        took = timed_run(root)
        results.append((f"{n:,} single-row transactions", n, took))
        con.execute("UPDATE orders SET status = 'bulk', updated = now()")
        took = timed_run(root)
        results.append((f"one {n:,}-row transaction", n, took))
        kept = con.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) FROM pg_replication_slots"
        ).fetchone()[0]
        print(f"{'run':40} {'changes':>9} {'seconds':>8} {'changes/s':>10}")
        for label, changes, secs in results:
            print(f"{label:40} {changes:>9,} {secs:>8.1f} {changes / secs:>10,.0f}")
        print(f"log kept for the slot once caught up: {int(kept):,} bytes")
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
