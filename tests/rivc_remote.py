"""What the tests of a Spark that cannot see rivc's disk share (test_remote: a Spark Connect
server; test_cluster: a standalone cluster): processes started in a mount namespace of their own
with an empty tmpfs over the folder the projects live in, the moto S3 server's readers, and the
comparison of sample_project built there and built locally."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from rivc_testing import S3_KEYS, rivc

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
