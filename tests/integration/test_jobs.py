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


def test_a_job_runs_a_published_copy_of_its_project(spark, sample, tmp_path, monkeypatch):
    """Cluster deploy mode: the driver has the job's file only. With --project it copies the
    published project (specs and target/, here on S3) and runs the sink from there; its tables
    are on storage both reach. A job that would need state kept between runs is refused."""
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    from rivc_testing import S3_KEYS, moto_s3

    with moto_s3() as url:
        for key, value in {**S3_KEYS, "AWS_ENDPOINT_URL": url, "AWS_ALLOW_HTTP": "true"}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("LAKE", "s3://lake/out")
        shared = tmp_path / "shared"  # the warehouse, on a disk every machine mounts
        (sample / "profiles.yml").write_text(
            f"default:\n  spark: {{master: 'local[1]'}}\n  warehouse: {shared.as_uri()}\n"
        )
        assert rivc(sample, "run").exit_code == 0
        fs = pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=url[7:], scheme="http"
        )
        for path in sample.rglob("*"):  # publish: everything but the state and local data
            rel = path.relative_to(sample).as_posix()
            if path.is_file() and not rel.startswith((".rivc/", "output/", "data/")):
                with fs.open_output_stream(f"lake/projects/shop/{rel}", compression=None) as out:
                    out.write(path.read_bytes())
        fs.delete_dir("lake/out/files/customer_orders")
        elsewhere = tmp_path / "driver"
        elsewhere.mkdir()
        job = shutil.copy(sample / "target/jobs/customer_orders_files.py", elsewhere)
        proc = subprocess.run(
            [
                str(BIN / "spark-submit"),
                "--master",
                "local[1]",
                job,
                "--project",
                "s3://lake/projects/shop",
            ],
            cwd=elsewhere,
            env=env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert "customer_orders_files: success, 500 rows" in proc.stdout
        files = pads.dataset("lake/out/files/customer_orders", filesystem=fs).to_table()
        model = DeltaTable(str(shared / "customer_orders")).to_pyarrow_table()
        key = [("customer_id", "ascending")]
        got = files.select(model.column_names).sort_by(key).to_pylist()
        assert len(got) == 500 and got == model.sort_by(key).to_pylist()
        assert list(elsewhere.iterdir()) == [elsewhere / "customer_orders_files.py"]


def test_a_detached_job_refuses_a_stream(spark, tmp_path, capsys):
    """A copied project's state ends with its job: a stream would start over from a new
    checkpoint, so it is refused by name (a relational extraction's cursor likewise)."""
    from rivc.adapters.spark.job import run_sink_job
    from rivc_testing import write_files

    root = write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: det\n",
            "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
            "      - {name: o, config: {pattern: orders, stream: true, max_events: 10}}\n",
            "sinks/out.yml": "sinks:\n  - {name: s, from: source:gen.o, connector: delta,"
            " config: {table_uri: out/s}}\n",
        },
    )
    assert rivc(root, "compile").exit_code == 0
    assert run_sink_job(root, "s", detached=True) == 1
    said = capsys.readouterr().out
    assert "a job run from a copied project keeps no checkpoint between runs" in said
    assert not (root / "out/s").exists()
