"""What a user sees: rivc's own lines, with Spark's output in .rivc/spark.log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rivc_testing import last_run, rivc, write_files

pytestmark = pytest.mark.integration

BAD = {
    "rivc_project.yml": "name: errs\n",
    "models/fine.sql": "{{ config(materialized='table') }}\nselect 1 as a\n",
    "models/bad.sql": "{{ config(materialized='table') }}\nselect 1 as a,\n  no_such_fn(2) as b\n",
}


def test_a_spark_error_in_a_model_names_the_model_file_line_and_column(spark, tmp_path):
    root = write_files(tmp_path, BAD)
    result = rivc(root, "run")
    assert result.exit_code == 1

    runs = last_run(root)["results"]
    error = next(r["error"] for r in runs if r["node"] == "model:bad")
    assert error.startswith("models/bad.sql:3:3: error: [UNRESOLVED_ROUTINE]"), error
    assert "SQLSTATE" not in error and "\n" not in error


def test_a_failed_run_prints_no_spark_lines(tmp_path):
    root = write_files(tmp_path, BAD)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rivc"), "run"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    console = done.stdout + done.stderr
    for spark_line in ("WARN", "log level", "SQLQueryContextLogger", "Traceback", "at org."):
        assert spark_line not in console, console
    assert "models/bad.sql:3:3: error:" in console
    assert "Spark's own output: .rivc/spark.log" in console
    assert "UNRESOLVED_ROUTINE" in (root / ".rivc/spark.log").read_text()


VIEWS = {
    "rivc_project.yml": "name: nojava\n",
    "models/v.sql": "select 1 as a\n",
    "tests/v_positive.sql": "select * from {{ ref('v') }} where a < 0\n",
}


@pytest.mark.parametrize("command", [["run"], ["build"], ["test"], ["show", "v"]])
def test_without_java_every_command_says_so_in_one_line_with_exit_2(tmp_path, command):
    import os

    root = write_files(tmp_path, VIEWS)
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rivc"), *command],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: Spark did not start"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_the_progress_of_a_running_node_is_read_from_its_spark_jobs(spark):
    import threading
    import time

    from rivc.adapters.spark.progress import SparkProgress

    tracker = SparkProgress()
    tracker.attach(spark)

    def node(nid: str, slept_ms: int) -> None:
        tracker.enter(nid)
        tracker.here(spark)
        spark.sql(
            f"select reflect('java.lang.Thread', 'sleep', cast({slept_ms} as bigint)) "
            "from range(0, 4, 1, 4)"
        ).collect()

    slow = threading.Thread(target=node, args=("model:slow", 1500))
    quick = threading.Thread(target=node, args=("model:other", 10))
    slow.start()
    seen = []
    deadline = time.monotonic() + 60
    while slow.is_alive() and time.monotonic() < deadline:
        tasks = tracker.of("model:slow")
        if tasks is not None:
            seen.append((tasks.done, tasks.total))
            if not quick.is_alive() and quick.ident is None:
                quick.start()  # another node's jobs run beside it: not counted as its own
        time.sleep(0.1)
    slow.join()
    quick.join()
    assert seen and {total for _, total in seen} == {4}, seen
    assert all(0 <= done <= 4 for done, _ in seen)
    assert tracker.of("model:slow") is None  # its jobs ended
    assert tracker.describe("model:slow") is None
