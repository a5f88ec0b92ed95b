"""What the tests of a Spark that cannot see rivc's disk share (test_remote: a Spark Connect
server; test_cluster: a standalone cluster): processes started in a mount namespace of their own
with an empty tmpfs over the folder the projects live in, the moto S3 server's readers, and the
comparison of sample_project built there and built locally; a standalone cluster (also
bench/scale_bench.py's)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from rivc_testing import S3_KEYS, free_port, rivc

REPO = Path(__file__).resolve().parents[1]


def spark_env(logs: Path) -> dict[str, str]:
    """The environment of a Spark service the tests start from the installed PySpark: in the
    foreground, its logs in `logs`, Python workers on this interpreter (rivc importable), and
    none of the store's keys (they reach Spark's tasks from rivc only)."""
    import pyspark

    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOG_DIR": str(logs),
        "SPARK_PID_DIR": str(logs),
    }


def hidden_popen(hidden: Path, command: str, env: dict[str, str], out: IO[str]) -> subprocess.Popen:
    """`command` (a shell line, run with `exec`) in a mount namespace of its own where an empty
    tmpfs lies over `hidden`: it sees none of the files rivc writes there. A session of its
    own, so its process group can be signalled whole."""
    return subprocess.Popen(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount -t tmpfs rivc-hidden "{hidden}" && exec {command}',
        ],  # fmt: skip
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@dataclass
class Cluster:
    """A standalone master and its workers (one core and `memory` each), every one in its own
    process session and, given `hidden`, its own mount namespace."""

    hidden: Path | None  # None: in rivc's own mount namespace (the bench)
    logs: Path
    memory: str = "1g"  # each worker's
    url: str = ""
    ui: int = 0
    master: subprocess.Popen | None = None
    workers: dict[int, subprocess.Popen] = field(default_factory=dict)
    work: dict[int, Path] = field(default_factory=dict)
    started: int = 0

    def _start(self, name: str, main: str, *args: str) -> subprocess.Popen:
        env = spark_env(self.logs)
        command = f'"{env["SPARK_HOME"]}/bin/spark-class" {main} {" ".join(args)}'
        with (self.logs / f"{name}.log").open("w") as out:
            if self.hidden is not None:
                return hidden_popen(self.hidden, command, env, out)
            return subprocess.Popen(
                f"exec {command}",
                shell=True,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self, workers: int) -> None:
        port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            f"--host 127.0.0.1 --port {port} --webui-port {self.ui}",
        )
        for i in range(workers):
            self.start_worker(i)
        self.wait_alive(workers)

    def start_worker(self, i: int) -> None:
        """Worker `i` (again, after a kill: a new port and work folder, the old logs kept)."""
        self.started += 1
        self.work[i] = self.logs / f"work-{self.started}"
        self.work[i].mkdir()
        self.workers[i] = self._start(
            f"worker-{self.started}",
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            f"--host 127.0.0.1 --port {free_port()} --webui-port {free_port()}",
            f"--cores 1 --memory {self.memory} --work-dir {self.work[i]}",
        )

    def wait_alive(self, n: int, within_s: float = 120) -> None:
        """Until the master counts `n` live workers (a killed one counts until its timeout)."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                if self.state().get("aliveworkers", 0) >= n:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                tails = {p.name: p.read_text()[-1500:] for p in self.logs.glob("*.log")}
                raise RuntimeError(f"the cluster did not start: {tails}")
            time.sleep(0.5)

    def state(self) -> dict[str, Any]:
        """The master's own account of its workers and applications (its /json/ page)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
            return json.load(r)  # type: ignore[no-any-return]

    def applications(self) -> list[str]:
        """The names of the applications the master ran or runs."""
        state = self.state()
        return [app["name"] for app in state["activeapps"] + state["completedapps"]]

    def running_tasks(self, i: int, work: Path | None = None) -> set[str]:
        """The tasks worker `i`'s executors (or those of its earlier `work` folder) have started
        and not finished, from their logs."""
        running: set[str] = set()
        for log in (work or self.work[i]).glob("app-*/*/stderr"):
            text = log.read_text(errors="replace")
            started = set(re.findall(r"Executor: Running task .* \(TID (\d+)\)", text))
            ended = set(re.findall(r"Executor: Finished task .* \(TID (\d+)\)", text))
            running |= started - ended
        return running

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker `i`'s JVM, its executors' JVMs and their Python workers (PySpark's
        daemon leaves the worker's process group, so the tree is walked)."""
        kill_tree(self.workers[i])

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.master]:
            if proc is not None and proc.poll() is None:
                kill_tree(proc)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL `proc` and every process below it, then reap it."""
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`rivc ARGS --project-dir root` in a process of its own, which must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "rivc.adapters.cli", *args, "--project-dir", str(root)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def s3_fs(s3: str) -> pafs.S3FileSystem:
    """pyarrow's filesystem of the moto server, to look at what landed on it."""
    return pafs.S3FileSystem(
        access_key="test", secret_key="test", endpoint_override=s3.split("://")[1], scheme="http"
    )


def s3_fileio(s3: str) -> dict[str, str]:
    """pyiceberg's FileIO properties for the moto server."""
    return {
        "s3.endpoint": s3,
        "s3.access-key-id": "test",
        "s3.secret-access-key": "test",
        "s3.region": "us-east-1",
    }


def s3_options(s3: str) -> dict[str, str]:
    """delta-rs's storage options for the moto server."""
    return {**S3_KEYS, "AWS_ENDPOINT_URL": s3, "AWS_ALLOW_HTTP": "true"}


def sorted_table(table: pa.Table, keys: list[str]) -> pa.Table:
    """Rows in key order, columns by name; nullability (which Spark's two planners infer
    differently) left out: the values are what must match."""
    table = table.select(sorted(table.column_names)).sort_by([(k, "ascending") for k in keys])
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))


def sample_gives_local_tables(
    hidden: Path,
    local_root: Path,
    s3: str,
    target: str,
    spark_env: dict[str, str],
    commands: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    show: bool = True,
) -> None:
    """sample_project as it ships, run with `--target target` (`spark_env` names the Spark it
    reaches; the warehouse and sinks under LAKE on S3, the page views landed on S3) and locally
    on the test session's Spark, each of `commands` in turn: every table, the files sink, the
    data tests, the console sink and (with `show`) a view's rows are the same."""
    import pyarrow.dataset as pads

    skip = shutil.ignore_patterns("target", ".rivc", "output", "warehouse")
    remote = hidden / f"sample-{target}"
    local = local_root / "sample"
    shutil.copytree(REPO / "sample_project", remote, ignore=skip)
    shutil.copytree(REPO / "sample_project", local, ignore=skip)
    fs = s3_fs(s3)
    landing = f"lake/landing-{target}/pageviews"
    for f in sorted((REPO / "sample_project/data/pageviews").iterdir()):
        with fs.open_output_stream(f"{landing}/{f.name}") as out:
            out.write(f.read_bytes())
    shutil.rmtree(remote / "data")  # Spark could not read it anyway: only S3 holds it

    lake = f"s3://lake/sample-{target}"
    env = {
        **S3_KEYS,
        **spark_env,
        "LAKE": lake,
        "LANDING": f"s3://lake/landing-{target}",
        "AWS_ENDPOINT_URL": s3,
        "AWS_ALLOW_HTTP": "true",
    }
    monkeypatch.delenv("LAKE", raising=False)
    monkeypatch.delenv("LANDING", raising=False)
    for command in commands:  # a build after a run merges into what the run built, then tests
        far_run = run(remote, env, command, "--target", target)
        near_run = rivc(local, command)
        assert near_run.exit_code == 0, near_run.output
    printed = [json.loads(ln) for ln in far_run.stdout.splitlines() if ln.startswith("{")]
    daily = DeltaTable(str(local / "warehouse/daily_revenue")).to_pyarrow_table().to_pylist()
    days = {(str(r["order_date"]), r["orders"], str(r["revenue"])) for r in daily}
    assert len(printed) == 5  # the console sink's limit, of the rows the model holds
    assert {(r["order_date"], r["orders"], r["revenue"]) for r in printed} <= days
    tests = re.findall(r"\] PASS (test:\S+)", far_run.stdout)  # build exits 1 if one fails
    assert len(tests) >= 5 and sorted(tests) == sorted(
        re.findall(r"\] PASS (test:\S+)", near_run.output)
    )

    options = s3_options(s3)
    pairs = [
        ("warehouse/orders_enriched", ["order_id"]),
        ("warehouse/customer_orders", ["customer_id"]),
        ("warehouse/daily_revenue", ["order_date"]),
    ]
    for rel, keys in pairs:
        far = DeltaTable(f"{lake}/{rel}", storage_options=options).to_pyarrow_table()
        near = DeltaTable(str(local / rel)).to_pyarrow_table()
        got, want = sorted_table(far, keys), sorted_table(near, keys)
        assert got.num_rows > 0 and got.equals(want), rel
    far = DeltaTable(f"{lake}/delta/orders", storage_options=options)
    near = DeltaTable(str(local / "output/delta/orders"))
    assert far.metadata().partition_columns == near.metadata().partition_columns == ["order_date"]
    got = sorted_table(far.to_pyarrow_table(), ["order_id"])
    assert got.num_rows > 0 and got.equals(sorted_table(near.to_pyarrow_table(), ["order_id"]))
    far_files = pads.dataset(f"lake/sample-{target}/files/customer_orders", filesystem=fs)
    near_files = pads.dataset(str(local / "output/files/customer_orders")).to_table()
    assert sorted_table(far_files.to_table(), ["customer_id"]).equals(
        sorted_table(near_files, ["customer_id"])
    )
    if not show:
        return
    # the page views, read from S3 by Spark's tasks, through the view over them

    def cells(text: str) -> list[tuple[str, ...]]:
        return sorted(
            tuple(c.strip() for c in ln.split("│")) for ln in text.splitlines() if "│" in ln
        )

    monkeypatch.setenv("COLUMNS", "200")  # no row wraps
    show = ("show", "page_activity", "--limit", "100")
    far_rows = cells(run(remote, {**env, "COLUMNS": "200"}, *show, "--target", target).stdout)
    near_show = rivc(local, *show)
    assert near_show.exit_code == 0, near_show.output
    assert len(far_rows) >= 3 and far_rows == cells(near_show.output)
