"""The warm Spark server: runs use it, it answers only to its token on 127.0.0.1, a changed
configuration restarts it, and it stops cleanly."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

pytestmark = pytest.mark.integration


def rivc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rivc.adapters.cli", *args, "--project-dir", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def on_terminal(root: Path, *args: str) -> str:
    """What rivc prints on a terminal (a pseudo-terminal from util-linux's `script`)."""
    command = shlex.join(
        [sys.executable, "-m", "rivc.adapters.cli", *args, "--project-dir", str(root)]
    )
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:]
    return done.stdout


def client(url: str) -> subprocess.CompletedProcess[str]:
    """A Spark Connect client in its own process, counting rows through `url`."""
    code = (
        "from pyspark.sql import SparkSession;"
        f"print(SparkSession.builder.remote({url!r}).create().range(7).count())"
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_AUTHENTICATE_TOKEN"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )


LOOPBACK = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


def listening(group: int) -> dict[int, str]:
    """The TCP ports the processes of a process group listen on, and the address of each
    (hex, as /proc/net/tcp writes it)."""
    pids = subprocess.run(
        ["ps", "-o", "pid=", "-g", str(group)], capture_output=True, text=True
    ).stdout.split()
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(p) for p in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            host, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                out[int(port, 16)] = host
    return out


def test_the_warm_server_runs_the_project_for_its_token_only(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    assert (
        subprocess.run([sys.executable, "-m", "rivc.adapters.cli", "init", str(root)]).returncode
        == 0
    )
    started = rivc(root, "server", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "its Delta merge path loaded in" in started.stdout  # the warm-up ran...
    assert not (root / ".rivc/server/warm-up").exists()  # ...and left nothing behind
    info_path = root / ".rivc/server/server.json"
    info = json.loads(info_path.read_text())
    try:
        assert oct(info_path.stat().st_mode & 0o777) == "0o600"
        assert oct(info_path.parent.stat().st_mode & 0o777) == "0o700"
        assert "idle: runs use it" in rivc(root, "server", "status").stdout

        for again in ([], ["--full-refresh"]):  # unchanged tables are reused: build them
            done = rivc(root, "run", *again)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            assert "restarting" not in done.stderr
        # both runs went through the server: no JVM of their own wrote its log
        assert not (root / ".rivc/spark.log").exists()
        revenue = DeltaTable(str(root / "warehouse/customer_revenue")).to_pyarrow_table()
        assert (
            revenue.num_rows > 0
            and len(DeltaTable(str(root / "warehouse/customer_revenue")).history()) == 2
        )

        # on a terminal, a long node shows how far its operation is, as the server reports it
        (root / "models/slow.sql").write_text(
            "{{ config(materialized='table') }}\n"
            "select id, reflect('java.lang.Thread', 'sleep', cast(2500 as bigint)) as slept\n"
            "from range(0, 8, 1, 8)\n"
        )
        shown = on_terminal(root, "run", "--select", "slow")
        assert re.search(r"model:slow  \d+s  \d/8 tasks", shown), shown[-2000:]
        assert "OK" in shown and "model:slow table, 8 rows" in shown

        # a failing query is one line naming the model's file and line; the client's JSON log
        # of it goes to the log file, not to the console
        (root / "models/slow.sql").write_text(
            "{{ config(materialized='table') }}\nselect cast('x' as int) as y\n"
        )
        failed = rivc(root, "run", "--select", "slow")
        assert failed.returncode == 1
        assert "models/slow.sql:2:8: error: [CAST_INVALID_INPUT]" in failed.stdout
        assert '{"ts"' not in failed.stderr + failed.stdout, failed.stderr
        assert "CAST_INVALID_INPUT" in (root / ".rivc/spark.log").read_text()
        (root / "models/slow.sql").unlink()

        # a door only for the token's holder; every port of the server on loopback only
        port = info["port"]
        ports = listening(info["pid"])
        assert port in ports and len(ports) >= 3, ports  # Connect, driver RPC, block manager
        assert all(host in LOOPBACK for host in ports.values()), ports
        refused = client(f"sc://localhost:{port}")
        assert refused.returncode != 0 and "7" not in refused.stdout
        assert "UNAUTHENTICATED" in refused.stderr or "authenticat" in refused.stderr.lower()
        wrong = client(f"sc://localhost:{port}/;token=not-the-token")
        assert wrong.returncode != 0 and wrong.stdout.strip() != "7"
        assert client(f"sc://localhost:{port}/;token={info['token']}").stdout.strip() == "7"

        # another Spark configuration: the next run restarts the server with it
        profiles = root / "profiles.yml"
        profiles.write_text(
            profiles.read_text().replace(
                'master: "local[*]"',
                'master: "local[*]"\n    conf: {spark.sql.shuffle.partitions: "3"}',
            )
        )
        done = rivc(root, "run", "--select", "stg_orders")
        assert done.returncode == 0, done.stderr
        assert "restarting the warm Spark server: the configuration changed" in done.stderr
        restarted = json.loads(info_path.read_text())
        assert restarted["pid"] != info["pid"]
        with pytest.raises(ProcessLookupError):
            os.killpg(info["pid"], 0)  # the old server is gone
        info = restarted
    finally:
        stopped = rivc(root, "server", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    with pytest.raises(ProcessLookupError):
        os.killpg(info["pid"], 0)
    assert not info_path.exists()
    assert rivc(root, "server", "status").returncode == 1


def test_the_warm_server_sees_every_new_row_and_every_new_or_rewritten_file(tmp_path: Path) -> None:
    """A long-lived session must not answer from what it read before: rows extracted by COPY
    (in rivc's process and in Spark) and by JDBC, and a files source's new and rewritten files,
    all reach their sinks on the next run."""
    from rivc_dbs import database, project
    from rivc_nats import URL, drop_stream, messages

    stream = "RIVC_TEST_WARM"
    drop_stream(stream)
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE ev (id int PRIMARY KEY, v text, at timestamp)",
            "CREATE TABLE bin (id int PRIMARY KEY, b bytea, at timestamp)",  # bytea: JDBC
        )

        def insert(first: int, n: int) -> None:
            rows = [
                (i, f"v{i}", f"2026-01-01 00:00:00+{i} seconds") for i in range(first, first + n)
            ]
            db.executemany(
                "INSERT INTO ev VALUES (%s, %s, timestamp '2026-01-01' + %s::interval)",
                [(i, v, f"{i} seconds") for i, v, _ in rows],
            )
            db.executemany(
                "INSERT INTO bin VALUES (%s, %s, timestamp '2026-01-01' + %s::interval)",
                [(i, v.encode(), f"{i} seconds") for i, v, _ in rows],
            )

        insert(1, 10)
        cursor = "mode: incremental, cursor_column: at, unique_key: id"
        tables = f"""
- {{name: p1, table: ev, {cursor}}}
- {{name: p2, table: ev, {cursor}, parallel: 2}}
- {{name: jdbc, table: bin, {cursor}}}
"""
        sinks = (
            "sinks:\n"
            + "".join(
                f"  - {{name: {n}, from: source:src.{n}, connector: delta, "
                f"config: {{table_uri: out/{n}, mode: append}}}}\n"
                for n in ("p1", "p2", "jdbc")
            )
            + (
                "  - {name: files, from: source:inbox.ev, connector: delta,\n"
                "     config: {table_uri: out/files, mode: overwrite}}\n"
                # a view's batches, written by the server's Spark tasks into a table and a stream
                "  - {name: pg, from: p1_rows, connector: postgres,\n"
                "     config: {connection: db, table: out.p1}}\n"
                f"  - {{name: bus, from: p1_rows, connector: nats,\n"
                f'     config: {{url: "{URL}", stream: {stream}, subject: warm.p1}}}}\n'
            )
        )
        view = {"p1_rows": "select id, v from {{ source('src', 'p1') }}"}
        root = project(tmp_path, db, tables, view, sinks)
        inbox = root / "inbox"
        inbox.mkdir()
        (root / "sources/inbox.yml").write_text(
            "sources:\n  - name: inbox\n    connector: files\n    tables:\n"
            "      - {name: ev, config: {path: inbox, format: json},"
            " columns: {id: bigint, v: string}}\n"
        )

        def drop(name: str, ids: range) -> None:
            (inbox / name).write_text("".join(json.dumps({"id": i, "v": name}) + "\n" for i in ids))

        drop("a.json", range(2))
        started = rivc(root, "server", "start")
        assert started.returncode == 0, started.stdout + started.stderr
        try:
            for round_ in range(2):
                done = rivc(root, "run")
                assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
                insert(11 + round_ * 5000, 5000)
                drop("a.json", range(5100))  # rewritten, longer
                drop(f"new-{round_}.json", range(3))  # a new file
            done = rivc(root, "run")
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
            assert not (root / ".rivc/spark.log").exists()  # every run went through the server
        finally:
            rivc(root, "server", "stop")
        for name in ("p1", "p2", "jdbc"):
            ids = DeltaTable(str(root / "out" / name)).to_pyarrow_table().column("id").to_pylist()
            assert sorted(ids) == list(range(1, 10011)), name
        files = DeltaTable(str(root / "out/files")).to_pyarrow_table()
        assert files.num_rows == 5100 + 3 + 3
        conn = db.connect()
        try:
            held = [r[0] for r in conn.execute("SELECT id FROM out.p1").fetchall()]
        finally:
            conn.close()
        assert sorted(held) == list(range(1, 10011))
        published = sorted(p["id"] for _, _, p in messages(stream))
        drop_stream(stream)
        assert published == list(range(1, 10011))


def test_server_auto_starts_with_the_first_run_serves_the_next_and_stops_when_idle(
    tmp_path: Path,
) -> None:
    """`spark: {server: auto}`: the first run starts the warm server and uses it, the next run
    reuses it as it is, and it stops by itself after `server_idle` without a run."""
    import time

    root = tmp_path / "shop"
    made = subprocess.run([sys.executable, "-m", "rivc.adapters.cli", "init", str(root)])
    assert made.returncode == 0
    profile = root / "profiles.yml"
    profile.write_text(
        profile.read_text().replace(
            'master: "local[*]"', 'master: "local[*]"\n    server: auto\n    server_idle: 8 seconds'
        )
    )
    info_path = root / ".rivc/server/server.json"
    try:
        first = rivc(root, "run")
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        assert "starting the project's warm Spark server" in first.stderr
        pid = json.loads(info_path.read_text())["pid"]
        second = rivc(root, "run")
        assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
        assert "starting" not in second.stderr and "restarting" not in second.stderr
        assert json.loads(info_path.read_text())["pid"] == pid  # the same server
        assert not (root / ".rivc/spark.log").exists()  # no run started a JVM of its own
        deadline = time.monotonic() + 90
        while info_path.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert not info_path.exists(), "the idle server did not stop"

        def group() -> list[str]:
            ps = ["ps", "-o", "pid=", "-g", str(pid)]
            return subprocess.run(ps, capture_output=True, text=True).stdout.split()

        deadline = time.monotonic() + 45  # the watchdog's stop() ends the process group
        while group() and time.monotonic() < deadline:
            time.sleep(1)
        assert group() == []  # every process of the server ended
    finally:
        rivc(root, "server", "stop")


def test_a_plain_run_and_its_metrics_endpoint_listen_on_loopback_only(tmp_path: Path) -> None:
    """A `rivc run` on local Spark (no server): the JVM's driver RPC and block manager, which
    take no authentication, and the scrape endpoint listen on 127.0.0.1, never on the
    machine's network address."""
    import time

    from rivc_testing import free_port

    root = tmp_path / "plain"
    (root / "models").mkdir(parents=True)
    (root / "rivc_project.yml").write_text("name: plain\n")
    (root / "profiles.yml").write_text(f"default:\n  metrics: {{port: {free_port()}}}\n")
    (root / "models/slow.sql").write_text(  # long enough to look at its sockets
        "{{ config(materialized='table') }}\n"
        "select id, sha2(cast(id as string), 512) as h from range(40000000)\n"
    )
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("rivc")), "run"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: rivc, its JVM and Python workers
    )
    try:
        seen: dict[int, str] = {}
        deadline = time.monotonic() + 120
        while len(seen) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            seen |= listening(proc.pid)
        assert len(seen) >= 3, seen  # the endpoint, the driver's RPC, the block manager
        assert set(seen.values()) <= LOOPBACK, seen
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_a_warm_server_whose_record_is_lost_stops(tmp_path: Path) -> None:
    """A lost .rivc/ takes the record of the warm server with it: no run can reach that server
    any more, so its watchdog stops it rather than leave it running."""
    import shutil
    import time

    root = tmp_path / "shop"
    made = subprocess.run([sys.executable, "-m", "rivc.adapters.cli", "init", str(root)])
    assert made.returncode == 0
    profile = root / "profiles.yml"
    profile.write_text(
        profile.read_text().replace(
            'master: "local[*]"', 'master: "local[*]"\n    server: auto\n    server_idle: 1 hour'
        )
    )
    try:
        first = rivc(root, "run")
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        pid = json.loads((root / ".rivc/server/server.json").read_text())["pid"]
        shutil.rmtree(root / ".rivc")

        def group() -> list[str]:
            ps = ["ps", "-o", "pid=", "-g", str(pid)]
            return subprocess.run(ps, capture_output=True, text=True).stdout.split()

        deadline = time.monotonic() + 90  # the watchdog looks every 30 s at most
        while group() and time.monotonic() < deadline:
            time.sleep(1)
        assert group() == []
    finally:
        rivc(root, "server", "stop")


# the server outlives the Popen that started it, as it outlives `rivc server start`
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_server_whose_port_another_program_took_starts_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port picked free may be taken before Spark Connect binds it. The server must not take
    the other program's listener for its own (a run would connect there and wait): it starts
    again on another port, where Spark Connect answers."""
    import socket

    from rivc.adapters.spark import server as warm
    from rivc.compiler.loading.profiles import load_profile
    from rivc.compiler.loading.project import load_project_spec

    root = tmp_path / "shop"
    made = subprocess.run([sys.executable, "-m", "rivc.adapters.cli", "init", str(root)])
    assert made.returncode == 0
    spec, _ = load_project_spec(root, os.environ)
    profile, _, _ = load_profile(root, spec.profile, os.environ)
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    picks = iter([taken])
    real = warm._free_port
    monkeypatch.setattr(warm, "_free_port", lambda: next(picks, None) or real())
    try:
        started = warm.start(root, profile.spark)
        assert started.port != taken
        assert warm.read(root) == started and started.alive()
        counted = client(started.url)  # Spark Connect answers there, to the token
        assert counted.returncode == 0 and counted.stdout.split()[-1] == "7", counted.stderr
        assert not warm.Server(started.pid, taken, "", "", 0, "").alive()  # not its port
    finally:
        squatter.close()
        warm.stop(root)  # here: the server's first process is this one's child
