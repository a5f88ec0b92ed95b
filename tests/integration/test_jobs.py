"""Generated sink jobs under spark-submit, and a run over Spark Connect: separate processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from rivc_testing import rivc

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable}


def test_generated_job_runs_under_spark_submit(spark, sample):
    assert rivc(sample, "run").exit_code == 0
    out = sample / "output/files/customer_orders"
    shutil.rmtree(out)
    job = sample / "target/jobs/customer_orders_files.py"
    proc = subprocess.run(
        [str(BIN / "spark-submit"), "--master", "local[1]", str(job)],
        cwd=sample.parent,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "customer_orders_files: success, 500 rows" in proc.stdout
    # once the SparkContext is up, Spark's lines go to the project's log, not the console
    assert "DAGScheduler" not in proc.stderr, proc.stderr[-2000:]
    assert "DAGScheduler" in (sample / ".rivc/spark.log").read_text()
    # The job wrote the model's rows, as the runner does.
    expected = DeltaTable(str(sample / "warehouse/customer_orders")).to_pyarrow_table()
    con = duckdb.connect()
    got = con.execute(
        f"SELECT customer_id, revenue, segment FROM read_parquet('{out}/*.parquet') ORDER BY 1"
    ).fetchall()
    want = sorted(
        zip(
            expected.column("customer_id").to_pylist(),
            expected.column("revenue").to_pylist(),
            expected.column("segment").to_pylist(),
            strict=True,
        )
    )
    assert got == want
    history = json.loads(rivc(sample, "metrics", "--json").output)["node runs"]
    assert any(
        r["node"] == "sink:customer_orders_files" and r["status"] == "success" for r in history
    )


def test_run_over_spark_connect(tmp_path):
    root = tmp_path / "connect"
    root.mkdir()
    (root / "rivc_project.yml").write_text("name: connect\n")
    (root / "profiles.yml").write_text("default:\n  spark: {remote: 'local[1]'}\n")
    (root / "sources").mkdir()
    (root / "sources/gen.yml").write_text(
        "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
        "      - {name: users, config: {pattern: users, max_events: 40, seed: 5}}\n"
    )
    (root / "models").mkdir()
    (root / "models/users.sql").write_text(
        "{{ config(materialized='table') }}\nselect user_id, name from {{ source('gen', 'users') }}\n"
    )
    (root / "sinks").mkdir()
    (root / "sinks/out.yml").write_text(
        "sinks:\n  - {name: users_delta, from: users, connector: delta,"
        " config: {table_uri: out/users, mode: merge, merge_keys: [user_id]}}\n"
    )
    proc = subprocess.run(
        [str(BIN / "rivc"), "run"], cwd=root, env=env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    table = DeltaTable(str(root / "out/users")).to_pyarrow_table()
    assert sorted(table.column("user_id").to_pylist()) == list(range(1, 41))
