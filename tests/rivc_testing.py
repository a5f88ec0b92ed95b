from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rivc.adapters.cli import main
from rivc.compiler import CompileOptions
from rivc.compiler.analysis.rules import Finding
from rivc.compiler.driver import CompiledProject, analyze
from rivc.compiler.loading.project import load_project

PLUGIN = Path(__file__).parent / "plugins/rivc-ledger"  # a connector plugin's source folder


def install_plugin(into: Path, package: Path = PLUGIN) -> Path:
    """pip installs a plugin's source folder into a folder of its own, as a user installs one
    (offline: setuptools is a test dependency, so no build isolation; built from a copy, since
    setuptools leaves its build folders beside the sources); returns the folder."""
    source = into.with_name(into.name + "-src")
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(package, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--upgrade", "--target", str(into), str(source)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return into


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Write {path under root: text}; returns root."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def analyze_dir(root: Path, **options: object) -> CompiledProject:
    return analyze(load_project(root, env={}), CompileOptions(**options), env={})  # type: ignore[arg-type]


def findings(root: Path, **options: object) -> list[Finding]:
    return analyze_dir(root, **options).findings


def only(items: list[Finding], rule: str) -> Finding:
    picked = [f for f in items if f.rule == rule]
    assert len(picked) == 1, [str(f) for f in items]
    return picked[0]


def at_entry(error: str, path: str) -> str:
    """The message of a node error reported at its YAML entry (`path:line: error: message`)."""
    where, sep, message = error.partition(": error: ")
    assert sep and where.startswith(f"{path}:") and where[len(path) + 1 :].isdigit(), error
    return message


def last_run(root: Path) -> dict[str, Any]:
    """target/run_results.json (dbt's format) as rivc reads it back: the run's command,
    status, warehouse and options, and rivc's result of each node."""
    from rivc.compiler.emit import run_results

    return run_results.read(root / "target" / "run_results.json")


def rivc(root: Path, *args: str) -> Result:
    """`rivc ARGS --project-dir root` in this process (on the test session's SparkSession)."""
    return CliRunner().invoke(main, [*args, "--project-dir", str(root)], catch_exceptions=False)


RIVC = str(Path(sys.executable).parent / "rivc")


def run_rivc(root: Path, fault: str | None = None, *args: str) -> subprocess.CompletedProcess[str]:
    """`rivc ARGS` (default: run) in a process of its own, killed at `fault` (RIVC_FAULT) if
    given: the fault suite's way of crashing it."""
    env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}
    if fault:
        env["RIVC_FAULT"] = fault
    return subprocess.run(
        [RIVC, *(args or ("run",))], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )


def start_rivc(root: Path, fault: str | None = None) -> subprocess.Popen[str]:
    """`rivc run` left running (a followed log, a stream), killed at `fault` if given; its
    output is read by `communicate`."""
    env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}
    if fault:
        env["RIVC_FAULT"] = fault
    return subprocess.Popen(
        [RIVC, "run"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(proc: subprocess.Popen[str], done: Any, seconds: float = 180) -> None:
    """Until `done()` holds, while `proc` keeps running."""
    deadline = time.monotonic() + seconds
    while not done():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.3)


def iceberg_catalog(root: Path) -> Any:
    """The project's default Iceberg catalog (SQLite under .rivc/iceberg), read by pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    home = root / ".rivc/iceberg"
    return SqlCatalog(
        "rivc", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )


S3_KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int, proc: subprocess.Popen[bytes], log: Path, within_s: float = 120) -> None:
    """Wait until a server started as `proc` listens on `port`; raise with the end of its `log`
    when it ended or `within_s` passed."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{log.name}: {log.read_text()[-3000:]}") from None
            time.sleep(0.5)


def answers(server: subprocess.Popen[bytes], url: str, within_s: float) -> None:
    """Wait until `url` answers a GET; raise when `server` ended or `within_s` passed."""
    import urllib.request

    deadline = time.monotonic() + within_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def moto_server(days_behind: int = 0) -> Iterator[str]:
    """A local moto server (S3, SQS, ...) in its own process; yields its URL once it answers.
    Its own process: delta-rs blocks while holding the GIL, so an in-process (threaded) moto
    server could never answer it. With `days_behind`, the objects it stores are dated that many
    days ago (what a retention sees of files a week old)."""

    port = free_port()
    behind = (
        "import datetime, moto.s3.models as m; now = m.utcnow; "
        f"m.utcnow = lambda: now() - datetime.timedelta(days={days_behind}); "
    )
    start = f"{behind if days_behind else ''}from moto.server import main; main()"
    server = subprocess.Popen(
        [sys.executable, "-c", start, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        answers(server, f"{url}/moto-api/", 30)
        yield url
    finally:
        server.terminate()
        server.wait(10)


CLICKHOUSE_USERS = """<yandex>
  <profiles><default></default></profiles>
  <quotas><default></default></quotas>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></default>
    <rivc><password>ch-s3cret</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></rivc>
  </users>
</yandex>
"""


@contextmanager
def clickhouse_server(home: Path) -> Iterator[tuple[str, int]]:
    """A ClickHouse server of the tests' own (Debian's package, scripts/test-setup.sh) with its
    data in `home`, its HTTP interface on a free port: users `default` (no password) and `rivc`
    (password ch-s3cret). Yields (the HTTP URL, the native TCP port) once it answers."""

    http, tcp = free_port(), free_port()
    (home / "users.xml").write_text(CLICKHOUSE_USERS)
    (home / "config.xml").write_text(
        f"""<yandex>
  <logger><level>warning</level><log>{home}/server.log</log><errorlog>{home}/error.log</errorlog>
    <console>0</console></logger>
  <http_port>{http}</http_port><tcp_port>{tcp}</tcp_port><listen_host>127.0.0.1</listen_host>
  <path>{home}/data/</path><tmp_path>{home}/tmp/</tmp_path>
  <users_config>{home}/users.xml</users_config>
  <mark_cache_size>5368709120</mark_cache_size>
  <default_profile>default</default_profile><default_database>default</default_database>
</yandex>
"""
    )
    server = subprocess.Popen(
        ["/usr/sbin/clickhouse-server", f"--config-file={home}/config.xml"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{http}"
    try:
        answers(server, f"{url}/?query=SELECT%201", 60)
        yield url, tcp
    finally:
        server.terminate()
        server.wait(30)


@contextmanager
def moto_s3(bucket: str = "lake", days_behind: int = 0) -> Iterator[str]:
    """A local S3 endpoint (moto) with `bucket` created; yields its URL."""
    import boto3

    with moto_server(days_behind) as url:
        client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_boto_keys())
        client.create_bucket(Bucket=bucket)
        yield url


def _boto_keys() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
    }


AZURITE_TOOLS = Path(os.environ.get("RIVC_TOOLS", Path.home() / ".cache/rivc-tools"))


@contextmanager
def azurite(container: str = "lake") -> Iterator[str]:
    """Azurite, Azure's blob storage emulator (scripts/test-setup.sh installs it with npm), in
    its own process with `container` created; yields its blob URL."""
    import shutil
    import tempfile

    import pyarrow.fs as pafs

    from rivc.adapters.util.storage import AZURITE_ACCOUNT, AZURITE_KEY

    binary = shutil.which("azurite-blob") or str(AZURITE_TOOLS / "node_modules/.bin/azurite-blob")
    if not Path(binary).exists():
        pytest.fail("azurite is not installed: run scripts/test-setup.sh")
    port = free_port()
    data = tempfile.mkdtemp(prefix="azurite-")
    server = subprocess.Popen(
        [
            binary,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            data,
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    fs = pafs.AzureFileSystem(
        account_name=AZURITE_ACCOUNT,
        account_key=AZURITE_KEY,
        blob_storage_authority=f"127.0.0.1:{port}",
        blob_storage_scheme="http",
        dfs_storage_authority=f"127.0.0.1:{port}",
        dfs_storage_scheme="http",
    )
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                fs.create_dir(container)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield url
    finally:
        server.kill()  # it waits on clients' idle keep-alive connections after a SIGTERM
        server.wait(10)
        shutil.rmtree(data, ignore_errors=True)


def runs_while_busy(root: Path, connect: Any, step: Any) -> None:
    """`rivc run` twice while a writer commits changes (busy_writer), then once after it
    stopped: each run succeeds, and the writer was busy while the first one (the snapshot)
    read."""
    with busy_writer(connect, step) as written:
        first = rivc(root, "run")
        during = len(written)
        second = rivc(root, "run")
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert during > 20  # the writer was busy while the snapshot read
    assert rivc(root, "run").exit_code == 0  # what it wrote after the second run began


@contextmanager
def busy_writer(connect: Any, step: Any) -> Iterator[list[int]]:
    """A thread that, until the block ends, calls `step(con, key, new, gone)` every 5 ms on a
    connection of its own (`connect()`): a key of 1..50,000 to update, a new id to insert
    (100,000 up) and a key to delete. Yields the list of new ids written so far."""
    import random
    import threading

    stop, written = threading.Event(), []

    def loop() -> None:
        con, rng, new = connect(), random.Random(7), 100_000
        try:
            while not stop.is_set():
                step(con, rng.randrange(1, 50_001), new, rng.randrange(1, 50_001))
                written.append(new)
                new += 1
                time.sleep(0.005)
        finally:
            con.close()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield written
    finally:
        stop.set()
        thread.join()


def assert_merged_once(root: Path, table: str, landing: str, want: dict[Any, Any]) -> None:
    """The merge sink's Delta `table` (id -> v) equals `want`, and the landed changes hold
    each inserted or snapshot-read row once."""
    from deltalake import DeltaTable

    merged = DeltaTable(str(root / table)).to_pyarrow_table().to_pylist()
    assert {r["id"]: r["v"] for r in merged} == want
    landed = DeltaTable(str(root / "warehouse/_rivc/landing" / landing)).to_pyarrow_table()
    inserts = [c["after"]["id"] for c in landed.to_pylist() if c["op"] in ("c", "r")]
    assert len(inserts) == len(set(inserts))  # no row read both by the snapshot and the log


def landed_versions(root: Path, landing: str, values: Any) -> set[tuple[Any, ...]]:
    """The versions the landed changes of `landing` (a local warehouse's) describe."""
    from deltalake import DeltaTable

    changes = DeltaTable(str(root / "warehouse/_rivc/landing" / landing)).to_pyarrow_table()
    return versions_of(changes, values)


def versions_of(changes: Any, values: Any) -> set[tuple[Any, ...]]:
    """The versions a landing table's changes (Arrow) describe, worked out without Spark: per
    key (`id`) in sequence order, each insert, update or snapshot read is a version until the
    key's next change: (id, values(image), valid_from, valid_to, is_current)."""
    by_key: dict[Any, list[tuple[Any, bool, Any]]] = {}
    for c in changes.to_pylist():
        image = c["before"] if c["op"] == "d" else c["after"]
        by_key.setdefault(image["id"], []).append((c["seq"], c["op"] == "d", image))
    out = set()
    for key, mine in by_key.items():
        mine.sort(key=lambda c: c[0])
        for n, (seq, deleted, image) in enumerate(mine):
            if not deleted:
                until = mine[n + 1][0] if n + 1 < len(mine) else None
                out.add((key, values(image), seq, until, until is None))
    return out


def scrape(port: int) -> dict[str, dict[tuple[str, ...], float]]:
    """GET /metrics, parsed as Prometheus does: metric -> (node,) -> value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            node = (sample.labels["node"],) if "node" in sample.labels else ()
            out.setdefault(sample.name, {})[node] = sample.value
    return out


HMS = Path(__file__).resolve().parent / "fixtures" / "hms" / "Hms.java"


@contextmanager
def hive_metastore(folder: Path) -> Iterator[str]:
    """A Hive metastore (Thrift) started as operators start one, from the Hive 2.3 jars
    PySpark ships, on Derby in `folder`; yields its thrift:// URI and stops it."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    conf = folder / "conf"
    conf.mkdir(parents=True)
    settings = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={folder / 'db'};create=true",
        "datanucleus.schema.autoCreateAll": "true",
        "datanucleus.connectionPoolingType": "DBCP",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": (folder / "warehouse").as_uri(),
    }
    (conf / "hive-site.xml").write_text(
        "<configuration>"
        + "".join(
            f"<property><name>{k}</name><value>{v}</value></property>" for k, v in settings.items()
        )
        + "</configuration>\n"
    )
    port = free_port()
    log = open(folder / "metastore.log", "wb")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [
            "java",
            "-Dhive.async.log.enabled=false",
            f"-Dderby.system.home={folder}",
            f"-Dhive.log.dir={folder}",
            "-cp",
            f"{conf}:{jars}/*",
            str(HMS),
            "-p",
            str(port),
        ],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        listening(port, proc, folder / "metastore.log")
        yield f"thrift://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()
        log.close()


DBT_NAMES = Path(__file__).resolve().parent / "fixtures" / "dbt_names"
TOOLS = Path(os.environ.get("RIVC_TOOLS", Path.home() / ".cache" / "rivc-tools"))
DBT = TOOLS / "dbt" / "bin" / "dbt"  # scripts/test-setup.sh installs it


def dbt_parse(
    tmp: Path, schema: str, target: str = "dev", source: Path = DBT_NAMES
) -> dict[str, Any]:
    """`dbt parse` of a copy of `source` (dbt-core with dbt-duckdb, from scripts/test-setup.sh)
    on target `target` of schema `schema`: its manifest."""
    project = tmp / f"dbt_{target}"
    shutil.copytree(source, project, ignore=shutil.ignore_patterns("profiles.yml"))
    (project / "profiles.yml").write_text(
        f"names:\n  target: {target}\n  outputs:\n    {target}: "
        f"{{type: duckdb, path: '{tmp / 'names.duckdb'}', schema: {schema}, threads: 1}}\n"
    )
    dbt("parse", project, project)
    return json.loads((project / "target/manifest.json").read_text())


def dbt(command: str, project: Path, profiles: Path) -> None:
    """`dbt COMMAND` in `project` (dbt-core with dbt-duckdb); it must succeed."""
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    done = subprocess.run(
        [str(DBT), *command.split(), "--profiles-dir", str(profiles)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
