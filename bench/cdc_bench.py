"""CDC speed: changes per second from PostgreSQL's log or MariaDB's binlog into a Delta merge
and a Delta scd2 history (batch mode).

    python bench/cdc_bench.py                   # postgres-cdc, 200,000 changes each way
    python bench/cdc_bench.py --source mysql    # mysql-cdc on a MariaDB of its own
    python bench/cdc_bench.py --changes 50000
    python bench/cdc_bench.py --snapshot 1000000  # a table of 1M rows (200,000 of them changed)
    python bench/cdc_bench.py --follow 60       # lag of a followed log at 2,000 changes/s
    python bench/cdc_bench.py --warm            # each run on the project's warm server
    python bench/cdc_bench.py --merge-only      # the Delta merge sink alone (no scd2 history)
    python bench/cdc_bench.py --rounds 4        # the one-transaction run four times
    python bench/cdc_bench.py --threads 2       # rivc run --threads 2: both sinks at once
    python bench/cdc_bench.py --big 2000000     # one 2M-row transaction landed: time and RSS
    python bench/cdc_bench.py --tables 4 --changes 50000  # one source of four tables

Starts a PostgreSQL cluster of its own with wal_level = logical (initdb as postgres, a free port,
a temporary folder; root needed), or a MariaDB with the row-based binlog, loads a table, and times `rivc run` in a new process for:
the snapshot of the table; a burst of single-row updates, each its own transaction; and one
transaction updating as many rows. Reported: wall time and changes/s of each run (both sinks),
each node's time, and the log the server keeps for the slot once caught up.

--big ROWS (either source): one transaction updating a ROWS-row table, landed alone (`rivc run
--select source:db.orders`, no sink): the node's time and the peak resident memory of the rivc
process, beside the same table's snapshot.

--tables N (either source): a source of N tables of --changes rows, landed by one `rivc run`
without sinks after each of: the snapshot, one transaction per table updating it whole, and
--changes / 10 one-row transactions per table; the log is read once for all of them.

--follow SECONDS (either source): `rivc run` follows the log (the merge sink's trigger 1 second)
while a writer inserts --rate rows a second (five transactions a second) for that long; the bench
reads the Delta table as it changes and reports the lag from each row's commit to the table
(p50, p95, max), the log kept for the slot afterwards (postgres), and the resident memory of rivc's
process tree (its JVM included) in the first and the last minute.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


THREADS: list[str] = []  # --threads N: rivc run's own option


def timed_run(root: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([RIVC, "run", *THREADS], cwd=root, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    nodes = [line for line in done.stdout.splitlines() if " OK " in line]  # each node's time
    print("\n".join(nodes), file=sys.stderr)
    return took


def mariadb() -> tuple[Path, int, subprocess.Popen[bytes], Any]:
    """A MariaDB server of the bench's own with the row-based binlog on (root needed), and a
    connection to its new database `bench`."""
    base = Path(tempfile.mkdtemp(prefix="rivc-cdc-bench-", dir="/tmp"))
    base.chmod(0o755)
    shutil.chown(base, "mysql")
    data = base / "data"
    subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=mysql",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        capture_output=True,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = subprocess.Popen(
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            "--user=mysql",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={base / 'sock'}",
            f"--log-bin={data / 'binlog'}",
            "--binlog-format=ROW",
            "--binlog-row-metadata=FULL",
            "--server-id=1",
            "--innodb-flush-log-at-trx-commit=0",
            "--sync-binlog=0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    import pymysql

    my = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
    my.cursor().execute("CREATE DATABASE bench")
    my.select_db("bench")
    return base, port, server, my


SINKS = "".join(
    f"  - name: {name}\n    from: source:db.orders\n"
    "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
    f"    connector: delta\n    config: {{table_uri: out/{name}, mode: {mode}, merge_keys: [id]}}\n"
    for name, mode in (("lake", "merge"), ("history", "scd2"))
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=200_000)
    ap.add_argument(
        "--snapshot", type=int, default=0, help="rows of the table (default: --changes)"
    )
    ap.add_argument("--source", choices=["postgres", "mysql"], default="postgres")
    ap.add_argument("--follow", type=float, default=0, help="seconds of a followed log")
    ap.add_argument("--rate", type=int, default=2_000, help="changes a second, with --follow")
    ap.add_argument("--warm", action="store_true", help="runs on `rivc server start`'s server")
    ap.add_argument("--merge-only", action="store_true", help="no scd2 history sink")
    ap.add_argument("--rounds", type=int, default=1, help="times the one-transaction run repeats")
    ap.add_argument("--big", type=int, default=0, help="rows of one transaction landed alone")
    ap.add_argument("--tables", type=int, default=0, help="tables of one source (landing only)")
    ap.add_argument("--threads", type=int, default=0, help="rivc run --threads (the sinks at once)")
    args = ap.parse_args()
    if args.threads:
        THREADS[:] = ["--threads", str(args.threads)]
    if args.follow:
        follow(args.follow, args.rate, args.source)
        return
    if args.big:
        big(args.big, args.source)
        return
    if args.tables:
        tables(args.tables, args.changes, args.source)
        return
    n = args.changes
    rows = max(args.snapshot, n)
    base, port, run, stop, con = db_server(args.source)
    schema = "public" if args.source == "postgres" else "bench"
    series = (
        f"generate_series(1, {rows}) g"
        if args.source == "postgres"
        else f"(SELECT seq AS g FROM seq_1_to_{rows}) s"
    )
    try:
        run(
            "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20), amount numeric(12, 2), "
            "updated timestamp(6) NULL, note text)"
        )
        run(
            f"INSERT INTO orders SELECT g, 'placed', g / 100.0, now(), md5(concat('', g)) FROM {series}"
        )
        root = base / "proj"
        sinks = SINKS.split("  - name: history")[0] if args.merge_only else SINKS
        cdc_project(
            root,
            args.source,
            port,
            f" [{{name: orders, table: {schema}.orders}}]\n",
            "sinks:\n" + sinks,
        )
        if args.warm:
            subprocess.run([RIVC, "server", "start"], cwd=root, check=True, capture_output=True)
        results = []
        spans: list[tuple[int, int]] = []  # mysql: each run's stretch of the binlog
        took = timed_run(root)
        results.append(("snapshot" if rows == n else f"snapshot of {rows:,} rows", rows, took))
        if args.source == "postgres":  # the anchor's slot: the same changes, decoded again
            con.execute("SELECT pg_create_logical_replication_slot('bench_anchor', 'pgoutput')")
        start = log_position(con) if args.source == "mysql" else 0
        for i in range(1, n + 1):  # each its own transaction (autocommit)
            run("UPDATE orders SET status = 'burst', amount = amount + 1 WHERE id = %s", (i,))
        spans.append((start, log_position(con) if args.source == "mysql" else wal_end(con)))
        took = timed_run(root)
        results.append((f"{n:,} single-row transactions", n, took))
        for r in range(1, args.rounds + 1):  # the history grows by n versions each round
            start = log_position(con) if args.source == "mysql" else 0
            run(f"UPDATE orders SET status = 'bulk{r}', updated = now() WHERE id <= {n}")
            spans.append((start, log_position(con) if args.source == "mysql" else wal_end(con)))
            took = timed_run(root)
            results.append((f"one {n:,}-row transaction" + (f" #{r}" if r > 1 else ""), n, took))
        print(f"{'run':40} {'changes':>9} {'seconds':>8} {'changes/s':>10}")
        for label, changes, secs in results:
            print(f"{label:40} {changes:>9,} {secs:>8.1f} {changes / secs:>10,.0f}")
        # the anchor: the server's own decoder over the same log
        for (label, changes, _), (first, last) in zip(results[1:], spans, strict=True):
            if args.source == "mysql":
                tool = "mariadb-binlog -v"
                secs = server_decoding(base / "data/binlog.000001", first, last)
            else:
                tool, secs = "pg_recvlogical (pgoutput)", slot_decoding(con, port, last)
            print(f"{tool} over the log of {label}: {secs:.1f} s ({changes / secs:,.0f} changes/s)")
        if args.source == "postgres":
            kept = con.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) "
                "FROM pg_replication_slots WHERE slot_name <> 'bench_anchor'"
            ).fetchone()[0]
            print(f"log kept for the slot once caught up: {int(kept):,} bytes")
    finally:
        if args.warm:
            subprocess.run([RIVC, "server", "stop"], cwd=base / "proj", capture_output=True)
        stop()
        shutil.rmtree(base, ignore_errors=True)


def log_position(my: object) -> int:
    """The MariaDB binlog's end now (the bench's server keeps one file)."""
    with my.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SHOW MASTER STATUS")
        return int(cur.fetchone()[1])


def wal_end(con: psycopg.Connection) -> int:
    """Where PostgreSQL's log ends now."""
    lsn = str(con.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]
    high, low = lsn.split("/")
    return int(high, 16) << 32 | int(low, 16)


def slot_decoding(con: psycopg.Connection, port: int, end: int) -> float:
    """Seconds PostgreSQL takes to decode its log up to `end` into pgoutput messages for the
    bench's own slot (`pg_recvlogical` to /dev/null), with rivc's publication."""
    publication = con.execute("SELECT pubname FROM pg_publication").fetchone()[0]  # type: ignore[index]
    recv = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_recvlogical"))[-1]
    began = time.perf_counter()
    subprocess.run(
        [
            str(recv),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "--slot",
            "bench_anchor",
            "--start",
            "--no-loop",
            f"--endpos={end >> 32:X}/{end & 0xFFFFFFFF:X}",
            "-o",
            "proto_version=1",
            "-o",
            f"publication_names={publication}",
            "-f",
            "/dev/null",
        ],
        check=True,
    )
    return time.perf_counter() - began


def server_decoding(file: Path, first: int, last: int) -> float:
    """Seconds MariaDB's own binlog reader takes to decode the rows from `first` to `last`
    (`mariadb-binlog --verbose`, printed to /dev/null)."""
    began = time.perf_counter()
    subprocess.run(
        [
            "mariadb-binlog",
            "--base64-output=decode-rows",
            "--verbose",
            f"--start-position={first}",
            f"--stop-position={last}",
            str(file),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - began


def db_server(source: str) -> tuple[Path, int, Callable[..., Any], Callable[[], Any], Any]:
    """The bench's own server of `source`: its folder, its port, a function running one
    statement (autocommit), one stopping the server, and the connection."""
    if source == "postgres":
        base, port, pg_ctl, _ = cluster()
        con = psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        )

        def stop() -> None:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)

        return base, port, con.execute, stop, con
    base, port, server, my = mariadb()

    def run(sql: str, params: tuple[object, ...] = ()) -> None:
        with my.cursor() as cur:
            cur.execute(sql, params or None)

    return base, port, run, server.kill, my


def cdc_project(root: Path, source: str, port: int, tables: str, sinks: str = "") -> None:
    """A project at `root` of one `source`-cdc source `db` on the bench's server (postgres:
    database postgres; mysql: database bench): `tables` is the YAML after `tables:`, `sinks` a
    sinks file's."""
    connection = {
        "postgres": f"{{type: postgres, host: 127.0.0.1, port: {port}, user: postgres, "
        "database: postgres}",
        "mysql": f"{{type: mysql, host: 127.0.0.1, port: {port}, user: root, database: bench}}",
    }[source]
    files = {
        "rivc_project.yml": f"name: {root.name}\n",
        "profiles.yml": f"default:\n  connections:\n    db: {connection}\n",
        "sources/db.yml": f"sources:\n  - name: db\n    connector: {source}-cdc\n"
        f"    connection: db\n    tables:{tables}",
        **({"sinks/lake.yml": sinks} if sinks else {}),
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def big(rows: int, source: str) -> None:
    """The snapshot of a `rows`-row table and one transaction updating every row, each landed
    by `rivc run --select source:db.orders` in a process of its own: seconds and peak RSS."""
    create = (
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20), "
        "amount numeric(12, 2), updated timestamp(6) NULL, note text)"
    )
    if source == "postgres":
        base, port, pg_ctl, _ = cluster()
        con = psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        )
        run, series = con.execute, f"generate_series(1, {rows}) g"
        stop = lambda: subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)  # noqa: E731
    else:
        base, port, server, my = mariadb()
        run, series = my.cursor().execute, f"(SELECT seq AS g FROM seq_1_to_{rows}) s"
        stop = server.kill
    try:
        run(create)
        run(
            "INSERT INTO orders SELECT g, 'placed', g / 100.0, now(), md5(concat('', g)) "
            f"FROM {series}"
        )
        root = base / "proj"
        if source == "postgres":
            cdc_project(root, "postgres", port, " [{name: orders, table: public.orders}]\n")
        else:
            cdc_project(root, "mysql", port, " [{name: orders, table: bench.orders}]\n")
        print(f"{'run':36} {'rows':>10} {'seconds':>8} {'rows/s':>9} {'peak RSS':>9}")
        for label in ("snapshot", "one transaction"):
            if label != "snapshot":
                run("UPDATE orders SET status = 'bulk', updated = now()")
            start = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import resource, subprocess, sys; "
                    "code = subprocess.run(sys.argv[1:], capture_output=True).returncode; "
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)",
                    RIVC,
                    "run",
                    "--select",
                    "source:db.orders",
                ],
                cwd=root,
                capture_output=True,
                text=True,
            )
            took = time.perf_counter() - start
            peak_kb, code = done.stdout.split()
            if code != "0":
                raise SystemExit(f"rivc run failed ({code})")
            print(
                f"{label:36} {rows:>10,} {took:>8.1f} {rows / took:>9,.0f} "
                f"{int(peak_kb) / 1024:>6,.0f} MB"
            )
    finally:
        stop()
        shutil.rmtree(base, ignore_errors=True)


def tables(count: int, rows: int, source: str) -> None:
    """A source of `count` tables of `rows` rows, landed by one `rivc run` each (no sink): the
    snapshot, each table updated whole in a transaction of its own, then `rows // 10`
    one-row transactions per table, the tables taken in turn: seconds and changes/s."""
    base, port, run, stop, _ = db_server(source)
    text, series, schema = (
        ("text", f"generate_series(1, {rows}) g", "public")
        if source == "postgres"
        else ("varchar(40)", f"(SELECT seq AS g FROM seq_1_to_{rows}) s", "bench")
    )
    try:
        names = [f"t{n}" for n in range(count)]
        for t in names:
            run(f"CREATE TABLE {t} (id int PRIMARY KEY, status {text}, note {text})")
            run(f"INSERT INTO {t} SELECT g, 'placed', md5(concat('', g)) FROM {series}")
        listed = "".join(f"      - {{name: {t}, table: {schema}.{t}}}\n" for t in names)
        root = base / "proj"
        cdc_project(root, source, port, "\n" + listed)
        single = rows // 10
        for label in ("snapshot", "one transaction per table", "one-row transactions"):
            if label.startswith("one transaction"):
                for t in names:
                    run(f"UPDATE {t} SET status = 'bulk'")
            elif label.startswith("one-row"):
                for i in range(1, single + 1):
                    for t in names:
                        run(f"UPDATE {t} SET status = 'one' WHERE id = {i}")
            start = time.perf_counter()
            done = subprocess.run([RIVC, "run"], cwd=root, capture_output=True, text=True)
            took = time.perf_counter() - start
            if done.returncode != 0:
                raise SystemExit(done.stdout[-3000:])
            total = count * (single if label.startswith("one-row") else rows)
            print(
                f"{label:28} {count} tables, {total:,} changes: {took:.1f} s, "
                f"{total / took:,.0f}/s",
                flush=True,
            )
    finally:
        stop()
        shutil.rmtree(base, ignore_errors=True)


def tree_rss(pid: int) -> int:
    """Resident bytes of process `pid` and all its descendants (rivc, its JVM, Python workers)."""

    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [pid]
    while todo:
        at = todo.pop()
        total += process_rss(at)
        todo += children.get(at, [])
    return total


def process_rss(pid: int) -> int:
    """Resident bytes of process `pid` alone (0 once it is gone)."""
    import os

    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def follow(seconds: float, rate: int, source: str) -> None:
    """The lag from a row's commit to the merge sink's table while rivc follows the log."""
    import signal
    import threading

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    sink = (
        "sinks:\n  - name: lake\n    from: source:db.orders\n"
        "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
        "    connector: delta\n    config: {table_uri: out/lake, mode: merge, merge_keys: [id]}\n"
        '    trigger: {processing_time: "1 second"}\n'
    )
    if source == "postgres":
        base, port, pg_ctl, _ = cluster()
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        con = psycopg.connect(dsn, autocommit=True)
        con.execute("CREATE TABLE orders (id int PRIMARY KEY, v text, at timestamptz)")
        con.execute(
            "INSERT INTO orders SELECT g, 'v', clock_timestamp() FROM generate_series(1, 1000) g"
        )
        root = base / "proj"
        cdc_project(root, "postgres", port, " [{name: orders, table: public.orders}]\n", sink)

        def writer_of() -> Callable[[int, int], None]:
            w = psycopg.connect(dsn, autocommit=True)

            def insert(n: int, per: int) -> None:
                w.execute(
                    "INSERT INTO orders SELECT g, 'new', clock_timestamp() "
                    f"FROM generate_series({n + 1}, {n + per}) g"
                )

            return insert

        def committed() -> dict[int, float]:
            sql = "SELECT id, extract(epoch from at) FROM orders WHERE id > 1000"
            return {i: float(at) for i, at in con.execute(sql).fetchall()}

        def kept() -> str:
            sql = (
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) "
                "FROM pg_replication_slots"
            )
            found = con.execute(sql).fetchone()
            return f"log kept for the slot after Ctrl-C: {int(found[0]):,} bytes"

        def stop_db() -> None:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)

    else:
        import pymysql

        base, port, server, my = mariadb()
        with my.cursor() as cur:
            cur.execute("CREATE TABLE orders (id int PRIMARY KEY, v varchar(8), at timestamp(6))")
            cur.execute("INSERT INTO orders SELECT seq, 'v', now(6) FROM seq_1_to_1000")
        root = base / "proj"
        cdc_project(root, "mysql", port, " [{name: orders, table: bench.orders}]\n", sink)

        def writer_of() -> Callable[[int, int], None]:
            w = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
            w.select_db("bench")

            def insert(n: int, per: int) -> None:
                with w.cursor() as cur:  # now(6): the statement's start, just before its commit
                    cur.execute(
                        "INSERT INTO orders SELECT seq, 'new', now(6) "
                        f"FROM seq_{n + 1}_to_{n + per}"
                    )

            return insert

        def committed() -> dict[int, float]:
            with my.cursor() as cur:
                cur.execute("SELECT id, unix_timestamp(at) FROM orders WHERE id > 1000")
                return {i: float(at) for i, at in cur.fetchall()}

        def kept() -> str:  # the server keeps nothing for rivc
            return ""

        stop_db = server.kill
    # its output to a file: a pipe nobody reads while it runs fills up and stops rivc
    said = open(base / "rivc.out", "w")
    proc = subprocess.Popen([RIVC, "run"], cwd=root, stdout=said, text=True)
    seen: dict[int, float] = {}
    read: set[str] = set()

    def poll() -> None:
        uri = str(root / "out/lake")
        try:
            files = DeltaTable(uri).file_uris()
        except Exception:  # not made yet
            return
        now = time.time()
        for f in files:
            if f not in read:
                read.add(f)
                for i in (
                    pq.read_table(f.removeprefix("file://"), columns=["id"])
                    .column("id")
                    .to_pylist()
                ):
                    seen.setdefault(i, now)

    try:
        while len(seen) < 1000:  # the snapshot: the first pass
            poll()
            time.sleep(0.2)
        stop = time.monotonic() + seconds
        per = max(1, rate // 5)  # five transactions a second

        written = [1000]  # the highest id committed

        def write() -> None:
            insert = writer_of()
            n, tick = 1000, time.monotonic()
            while time.monotonic() < stop:
                insert(n, per)
                n += per
                written[0] = n
                tick += 0.2
                time.sleep(max(0.0, tick - time.monotonic()))

        # the table is watched on a thread of its own, so that what the main thread does
        # (sampling memory) delays no row's arrival
        watched = threading.Event()

        def watch() -> None:
            while not watched.is_set():
                poll()
                time.sleep(0.1)

        watcher = threading.Thread(target=watch)
        watcher.start()
        writer = threading.Thread(target=write)
        writer.start()
        rss: list[tuple[float, int, int]] = []  # (seconds in, tree, rivc alone) every 5 s
        began = time.monotonic()
        while writer.is_alive():
            rss.append((time.monotonic() - began, tree_rss(proc.pid), process_rss(proc.pid)))
            writer.join(timeout=5)
        # every row arrived before the commit times are read back: reading millions of them
        # holds the interpreter for seconds, and the watcher would see the last rows late
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(
            i not in seen for i in range(1001, written[0] + 1)
        ):
            time.sleep(0.1)
        rows = committed()
        watched.set()
        watcher.join()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        said.close()
        out = (base / "rivc.out").read_text()
        lags = sorted(seen[i] - float(at) for i, at in rows.items() if i in seen)
        missing = sum(1 for i in rows if i not in seen)
        if missing:  # what rivc said, for the rows that never came
            print("\n".join(out.splitlines()[-40:]))
        passes = sum(1 for line in out.splitlines() if "pass " in line and "source:" in line)
        print(
            f"{len(rows):,} rows in {seconds:.0f} s ({len(rows) / seconds:,.0f} changes/s), {passes} passes"
        )
        print(
            f"lag commit -> table: p50 {lags[len(lags) // 2]:.1f} s, p95 "
            f"{lags[int(len(lags) * 0.95)]:.1f} s, max {lags[-1]:.1f} s; {missing} never arrived"
        )
        first = min(rows.values(), default=0.0)
        late = sorted(at - first for i, at in rows.items() if i in seen and seen[i] - at > 5)
        if late:  # when the rows over 5 s were committed: one pass or many
            print(f"{len(late):,} rows over 5 s, committed {late[0]:.0f}-{late[-1]:.0f} s in")
        if kept():  # postgres: the slot's
            print(kept())
        for what, at in (("rivc and its JVM", 1), ("rivc's Python process alone", 2)):
            if not rss:
                break
            first = max(r[at] for r in rss if r[0] <= 60)
            last = max(r[at] for r in rss if r[0] >= rss[-1][0] - 60)
            print(
                f"RSS of {what}: first minute max {first / 2**20:,.0f} MB, "
                f"last minute max {last / 2**20:,.0f} MB"
            )
        minutes = int(rss[-1][0] // 60) + 1 if rss else 0
        tree = [
            max((r[1] for r in rss if m * 60 <= r[0] < m * 60 + 60), default=0)
            for m in range(minutes)
        ]
        print(
            "RSS of rivc and its JVM by minute (MB):", " ".join(f"{b / 2**20:,.0f}" for b in tree)
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_db()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
