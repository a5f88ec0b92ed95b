"""One local SparkSession for the whole integration suite; projects live in tmp directories."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from rivc.adapters.spark.session import get_session
    from rivc.compiler.loading.specs import SparkSpec

    catalog = tmp_path_factory.mktemp("spark-warehouse")  # not the checkout's spark-warehouse/
    conf = {
        "spark.sql.warehouse.dir": str(catalog),
        # some 600 tests share this JVM: room for their state, and Spark's record of past jobs
        # kept short (a whole suite at Spark's 1 GB default ran out of heap)
        "spark.driver.memory": "2g",
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.sql.ui.retainedExecutions": "100",
    }
    spec = SparkSpec(master="local[2]", conf=conf)
    session = get_session(spec, app_name="rivc-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """A fresh copy of sample_project."""
    root = tmp_path / "sample"
    shutil.copytree(
        REPO / "sample_project",
        root,
        ignore=shutil.ignore_patterns("target", ".rivc", "output", "warehouse"),
    )
    return root


@pytest.fixture(scope="session")
def logical_pg() -> Iterator[int]:
    """A PostgreSQL cluster of the tests' own with `wal_level = logical` (the machine's runs
    with `replica`), on a free port, trusted from 127.0.0.1; stopped at the end. Its port."""
    import os
    import socket
    import subprocess
    import tempfile

    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not versions or os.geteuid() != 0:
        pytest.skip("needs PostgreSQL's initdb and root (to run it as postgres)")
    bin_ = versions[-1]
    base = Path(tempfile.mkdtemp(prefix="rivc-logical-pg-", dir="/tmp"))  # postgres reaches it
    base.chmod(0o755)
    shutil.chown(base, "postgres")
    data = base / "data"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_pg, str(bin_ / "initdb"), "-D", str(data), "-A", "trust"],
        check=True,
        capture_output=True,
    )
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(
            f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n"
            "wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n"
            "fsync = off\n"
        )
    subprocess.run(
        [*as_pg, str(bin_ / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield port
    finally:
        subprocess.run(
            [*as_pg, str(bin_ / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def binlog_mariadb() -> Iterator[int]:
    """A MariaDB server of the tests' own with the row-based binary log on (the machine's runs
    with it off), on a free port, root without a password from 127.0.0.1; stopped at the end.
    Its port."""
    with _mariadb(1) as port:
        yield port


@pytest.fixture
def mariadb_replica(binlog_mariadb: int) -> Iterator[int]:
    """A second server of the tests' own, replicating binlog_mariadb by GTID from where the
    primary's log is now (what the test writes after), with its own row-based binlog (what a
    failover moves to); stopped and removed after the test. Its port."""
    import pymysql

    primary = pymysql.connect(host="127.0.0.1", port=binlog_mariadb, user="root")
    with primary.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (now,) = cur.fetchone()
    primary.close()
    with _mariadb(2) as port:
        con = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
        with con.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")  # its own files: other names and offsets
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (now,))
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, "
                "MASTER_USER = 'root', MASTER_USE_GTID = slave_pos",
                (binlog_mariadb,),
            )
            cur.execute("START SLAVE")
        con.close()
        yield port


@contextmanager
def _mariadb(server_id: int) -> Iterator[int]:
    import os
    import socket
    import subprocess
    import tempfile
    import time

    if not Path("/usr/sbin/mariadbd").exists() or os.geteuid() != 0:
        pytest.skip("needs mariadbd and root (to run it as mysql)")
    base = Path(tempfile.mkdtemp(prefix="rivc-binlog-", dir="/tmp"))
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
    log = (base / "server.log").open("w")  # the server keeps its own copy of the handle
    server = subprocess.Popen(
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            "--user=mysql",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={base / 'sock'}",
            f"--pid-file={base / 'pid'}",
            f"--log-bin={data / 'binlog'}",
            "--log-slave-updates",
            "--binlog-format=ROW",
            "--binlog-row-metadata=FULL",
            f"--server-id={server_id}",
            "--innodb-flush-log-at-trx-commit=0",
            "--sync-binlog=0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError((base / "server.log").read_text()[-3000:]) from None
            time.sleep(0.2)
    try:
        yield port
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder a module's remote Spark (a Connect server, a cluster's workers) cannot see:
    rivc_remote.hidden_popen mounts an empty tmpfs over it in the Spark processes' namespace."""
    return tmp_path_factory.mktemp("hidden")


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A moto S3 server with the bucket `lake`, for a module's tests."""
    from rivc_testing import moto_s3

    with moto_s3() as url:
        yield url


@pytest.fixture
def stream() -> Iterator[str]:
    """A JetStream stream name of this test's; the stream and its sinks' commit keys removed
    after (tests/rivc_nats.py)."""
    import secrets

    from rivc_nats import drop_stream

    name = f"RIVC_TEST_{secrets.token_hex(4).upper()}"
    yield name
    drop_stream(name)


@pytest.fixture
def queue() -> Iterator[str]:
    """A RabbitMQ queue name of this test's, deleted after."""
    import secrets

    import pika

    name = f"rivc_test_{secrets.token_hex(4)}"
    yield name
    conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F"))
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()
