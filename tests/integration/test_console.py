"""What a user sees: rivc's own lines, with Spark's output in .rivc/spark.log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rivc_testing import rivc, write_files

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
    import json

    runs = json.loads((root / "target/run_results.json").read_text())["results"]
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
