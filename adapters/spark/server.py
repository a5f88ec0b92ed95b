"""A warm local Spark for reruns: one long-lived Spark Connect server per project.

`rivc server start` launches it (Spark's own start-connect-server.sh, in the foreground of a
process group of its own); while it runs, `rivc run`, `test`, `build` and `show` connect to it
instead of starting a JVM. It is a door into the machine, so:
- every port it opens listens on 127.0.0.1 only (Connect, the driver's RPC, the block
  manager, the UI), and every Connect request must carry its token
  (spark.connect.authenticate.token, handed to the server in its environment, never on a
  command line); the token sits in `.rivc/server/server.json`, mode 0600, in a 0700 directory;
- it serves one project and one Spark configuration: rivc's and PySpark's versions, the
  Python, the profile's `spark:` settings and the stores' credentials in the environment make
  its fingerprint, and a run whose fingerprint differs restarts it;
- a profile that names a cluster or a remote endpoint never uses it.

With `spark: {server: auto}` in the profile, a run starts the server when none runs, and a
watchdog process stops it after `server_idle` without a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rivc.compiler.errors import RivcError
from rivc.compiler.loading.locate import STATE_DIR
from rivc.compiler.loading.specs import SparkSpec, interval_seconds
from rivc.compiler.version import VERSION

from ..state import running
from ..util.storage import ENV
from .session import session_conf

SERVER_DIR = "server"
INFO = "server.json"
LOG = "server.log"
USED = "last_used"  # touched by every run that uses the server: the watchdog's idle clock
READY_S = 120
PORT_TRIES = 3
CREDENTIALS = tuple(name for names in ENV.values() for name in names)


@dataclass(frozen=True)
class Server:
    pid: int
    port: int
    token: str
    fingerprint: str
    started_at: float
    session: str  # the Spark Connect session runs share (its Python workers stay warm)

    @property
    def url(self) -> str:
        # "localhost" (not 127.0.0.1): Spark Connect's client sends a token without TLS only to
        # a host of that name, over gRPC's local credentials
        return f"sc://localhost:{self.port}/;token={self.token}"

    def alive(self) -> bool:
        """Whether the server runs and its own process answers on its port (another program
        may have taken a port the server never bound, or took after it stopped)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return _listens(self.pid, self.port) == SERVER


def home(root: Path) -> Path:
    return root / STATE_DIR / SERVER_DIR


def local(spec: SparkSpec) -> bool:
    """Whether a profile's Spark is this machine's, the only one a warm server stands in for."""
    return not (spec.remote or os.environ.get("SPARK_REMOTE")) and (
        spec.master is None or spec.master.startswith("local")
    )


def fingerprint(spec: SparkSpec) -> str:
    import pyspark

    facts = {
        "rivc": VERSION,
        "pyspark": pyspark.__version__,
        "python": sys.executable,
        "master": spec.master or "local[*]",
        "conf": session_conf(spec),
        "env": {k: os.environ.get(k) for k in (*CREDENTIALS, "PYSPARK_PYTHON", "JAVA_HOME")},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def read(root: Path) -> Server | None:
    try:
        data = json.loads((home(root) / INFO).read_text())
        data.setdefault("session", str(uuid.uuid4()))  # written by an earlier rivc
        data.setdefault("fingerprint", "")  # (a stale one: the next run restarts it)
        return Server(**{k: data[k] for k in Server.__dataclass_fields__})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def start(root: Path, spec: SparkSpec) -> Server:
    """Start the project's server (stopping a stale one first) and wait until it answers."""
    if not local(spec):
        raise RivcError(
            "rivc server: the profile's Spark is not local (remote or a cluster master); "
            "a warm server stands in for a local Spark only"
        )
    old = read(root)
    if old is not None:
        stop(root)
    where = home(root)
    where.mkdir(parents=True, exist_ok=True)
    where.chmod(0o700)
    token = secrets.token_urlsafe(32)
    for _ in range(PORT_TRIES):
        # a free port is free when picked, not when the JVM binds it seconds later: another
        # program may take it meanwhile, and then the server starts again on another one
        server, proc = _launch(root, spec, _free_port(), token)
        deadline = time.monotonic() + READY_S
        while (who := _listens(server.pid, server.port)) != SERVER:
            if who == OTHER:
                stop(root)
                proc.wait()  # reaped by stop(); this tells the Popen
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(root)
                raise RivcError(
                    f"rivc server: Spark Connect did not start; see "
                    f"{(where / LOG).relative_to(root)}"
                )
            time.sleep(0.25)
        else:
            break
    else:
        raise RivcError(
            f"rivc server: other programs took each of {PORT_TRIES} free ports it picked "
            f"before Spark Connect could listen on it"
        )
    used(root)
    if spec.server == "auto":  # stopped after server_idle without a run
        subprocess.Popen(
            [sys.executable, "-m", __name__, str(root), str(interval_seconds(spec.server_idle))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=root,
        )
    return server


def _launch(
    root: Path, spec: SparkSpec, port: int, token: str
) -> tuple[Server, subprocess.Popen[bytes]]:
    """Start Spark Connect on `port` in a process group of its own and record it."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    where = home(root)
    conf = session_conf(spec, root / STATE_DIR)
    args = [
        str(spark_home / "sbin" / "start-connect-server.sh"),
        "--master",
        spec.master or "local[*]",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        # the JVM's other ports (driver RPC, block manager) are on loopback by session_conf
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
    ]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_NO_DAEMONIZE": "1",  # the process stays ours: its group is what stop() ends
        "SPARK_LOG_DIR": str(where),
        "SPARK_PID_DIR": str(where),
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": token,
        "SPARK_LOCAL_IP": "127.0.0.1",  # what the UI and every other listener bind to
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    env.pop("SPARK_REMOTE", None)
    with (where / LOG).open("ab") as log:
        proc = subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=root,
        )
    server = Server(proc.pid, port, token, fingerprint(spec), time.time(), str(uuid.uuid4()))
    info = where / INFO
    fd = os.open(info, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(server.__dict__))
    return server, proc


def warm_up(root: Path, server: Server) -> float:
    """Load, in the server's JVM and in the runs' shared session, what a first run would
    otherwise pay for: rivc's Delta merge (lake/deltamerge.py: the statistics probe, the join,
    the task writer's Python workers) run twice on a table of eight rows, the second time
    rewriting a file and deleting a key. Returns its seconds (docs/performance.md, "The first
    merge on a warm server")."""
    import shutil

    from pyspark.sql import SparkSession

    from ..lake.deltamerge import merge
    from ..util.storage import Store

    started = time.perf_counter()
    table = str(home(root) / "warm-up")
    spark = SparkSession.builder.remote(f"{server.url};session_id={server.session}").getOrCreate()
    try:
        store = Store.of(table, {})
        first = spark.range(8).selectExpr("id", "cast(id AS string) AS v", "false AS _rivc_delete")
        merge(first, table, store, ("id",))
        again = spark.range(4, 12).selectExpr("id", "'x' AS v", "id = 4 AS _rivc_delete")
        merge(again, table, store, ("id",))
    finally:
        shutil.rmtree(table, ignore_errors=True)
    return time.perf_counter() - started


def used(root: Path) -> None:
    (home(root) / USED).touch()


def watch(root: Path, idle_s: float) -> None:
    """Stop the server `root` has now once no run has used it for `idle_s` seconds; return
    when it stopped or was replaced."""
    first = read(root)
    while first is not None:
        time.sleep(max(0.5, min(idle_s / 4, 30.0)))
        now = read(root)
        if now is None or now.pid != first.pid:
            # its record is gone (a lost .rivc/) or names another server: no run can reach
            # this one any more, so it goes now rather than never
            _terminate(first)
            return
        if not now.alive():
            return
        if running(root):
            used(root)
            continue
        try:
            idle = time.time() - (home(root) / USED).stat().st_mtime
        except FileNotFoundError:
            idle = idle_s
        if idle >= idle_s:
            stop(root)
            return


def stop(root: Path) -> bool:
    """Stop the project's server; False if none was running."""
    server = read(root)
    (home(root) / INFO).unlink(missing_ok=True)
    return server is not None and _terminate(server)


def _terminate(server: Server) -> bool:
    """SIGTERM the server's process group, SIGKILL after 30 s; False if it was gone."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:  # a leader this process started stays in its group until reaped
            os.waitpid(server.pid, os.WNOHANG)
        except ChildProcessError:
            pass
        try:
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    os.killpg(server.pid, signal.SIGKILL)
    return True


def for_run(root: Path, spec: SparkSpec, say: object = None, shared: bool = False) -> str | None:
    """The URL of the project's warm server for a run with `spec`, restarting it when its
    fingerprint differs; None when there is none or the profile's Spark is not local.

    `shared`: the URL of the session that runs share, one at a time under the run lock. A new
    Connect session starts its own Python workers (1.5 s here); the shared one keeps them."""
    server = read(root)
    if not local(spec) or (server is None and spec.server != "auto"):
        return None
    if server is None:
        if callable(say):
            say(
                f"starting the project's warm Spark server (spark: server: auto; it stops "
                f"after {spec.server_idle} without a run)"
            )
        server = start(root, spec)
    elif server.fingerprint != fingerprint(spec) or not server.alive():
        why = "the configuration changed" if server.alive() else "it had stopped"
        if callable(say):
            say(f"restarting the warm Spark server: {why}")
        server = start(root, spec)
    used(root)
    return f"{server.url};session_id={server.session}" if shared else server.url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PROC_TCP = Path("/proc/net/tcp")
SERVER, OTHER, NOBODY = "server", "other", ""
# 127.0.0.1 and the wildcard, as /proc/net/tcp and tcp6 write them (IPv4, v6, v4-mapped)
LOOPBACK = {
    "0100007F",
    "00000000",
    "00000000000000000000000001000000",
    "00000000000000000000000000000000",
    "0000000000000000FFFF00000100007F",
}


def _listens(group: int, port: int) -> str:
    """Who listens on 127.0.0.1:`port`: SERVER (a process of the process group `group`),
    OTHER (another program took the port) or NOBODY. Where the system does not tell a
    socket's owner (no Linux /proc), any listener is taken to be the server."""
    if not PROC_TCP.exists():
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return SERVER if sock.connect_ex(("127.0.0.1", port)) == 0 else NOBODY
    inodes = set()
    for table in (PROC_TCP, PROC_TCP.with_name("tcp6")):  # a JVM listens on IPv6 sockets
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl local_address rem_address st ... inode
            host, _, hexport = fields[1].partition(":")
            if fields[3] == "0A" and int(hexport, 16) == port and host in LOOPBACK:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return NOBODY
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()  # pid (comm) state ppid pgrp ...
            if int(stat[stat.rindex(")") + 2 :].split()[2]) != group:
                continue
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return SERVER
        except (OSError, ValueError):
            continue  # gone meanwhile
    return OTHER


if __name__ == "__main__":  # the watchdog start() launches: python -m ... ROOT IDLE_S
    watch(Path(sys.argv[1]), float(sys.argv[2]))
