"""`rivc source freshness` against real databases and a landed table: each table's age against
its thresholds, exit codes, target/sources.json; no JVM for the database measurements."""

from __future__ import annotations

import json
import sys

import pytest
from dbt_artifacts_parser.parser import parse_sources
from rivc_dbs import database, project

from rivc_testing import rivc

pytestmark = pytest.mark.integration

TABLES = """
- name: hours_old
  table: events
  loaded_at_field: loaded_at
  freshness: {warn_after: {count: 1, period: hour}, error_after: {count: 3, period: hour}}
- name: days_old
  table: events
  loaded_at_field: loaded_at
  freshness:
    error_after: {count: 1, period: day}
    filter: "kind = 'old'"
- name: unset
  table: events
- name: landed
  table: events
  freshness: {warn_after: {count: 1, period: hour}}
"""


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_each_tables_age_against_its_thresholds(spark, tmp_path, kind):
    with database(kind) as db:
        now = "now()" if kind == "postgres" else "utc_timestamp()"
        interval = (
            (lambda n, unit: f"{now} - interval '{n} {unit}'")
            if kind == "postgres"
            else (lambda n, unit: f"{now} - interval {n} {unit}")
        )
        db.execute(
            "CREATE TABLE events (id int PRIMARY KEY, kind varchar(10), loaded_at timestamp)",
            f"INSERT INTO events VALUES (1, 'new', {interval(2, 'hour')}), "
            f"(2, 'old', {interval(3, 'day')})",
        )
        root = project(tmp_path, db, TABLES, {})
        checked = rivc(root, "source", "freshness", "--json")
        assert checked.exit_code == 1, checked.output  # days_old is past error_after
        got = {r["unique_id"]: r for r in json.loads(checked.output)["results"]}
        assert set(got) == {
            "source.rel.src.hours_old",
            "source.rel.src.days_old",
            "source.rel.src.landed",
        }
        hours = got["source.rel.src.hours_old"]
        assert hours["status"] == "warn"  # 2 hours: past warn_after, within error_after
        assert 7000 < hours["max_loaded_at_time_ago_in_s"] < 7400
        days = got["source.rel.src.days_old"]  # only the old row passes its filter
        assert days["status"] == "error" and 3 * 86400 - 200 < days["max_loaded_at_time_ago_in_s"]
        landed = got["source.rel.src.landed"]  # never landed: past any threshold, as dbt says
        assert landed["status"] == "warn" and landed["max_loaded_at"].startswith("0001-01-01")
        on_disk = json.loads((root / "target/sources.json").read_text())
        assert on_disk["results"] == json.loads(checked.output)["results"]
        parse_sources(on_disk)  # dbt's format, as dbt's tools read it

        assert rivc(root, "run", "--select", "source:src.landed").exit_code == 0
        fresh = rivc(root, "source", "freshness", "source:src.landed", "source:src.hours_old")
        assert fresh.exit_code == 0, fresh.output  # a warning fails nothing
        assert "landed" in fresh.output and "pass" in fresh.output and "warn" in fresh.output

        (root / "sources/src.yml").write_text(
            (root / "sources/src.yml")
            .read_text()
            .replace("loaded_at_field: loaded_at", "loaded_at_field: nope", 1)
        )
        broken = rivc(root, "source", "freshness", "source:src.hours_old")
        assert broken.exit_code == 1 and "runtime error" in broken.output
        assert "nope" in broken.output


def test_measuring_a_database_starts_no_jvm(tmp_path):
    """The measurement itself is a query: pyspark is never imported."""
    import subprocess

    with database("postgres") as db:
        db.execute(
            "CREATE TABLE events (id int PRIMARY KEY, kind text, loaded_at timestamp)",
            "INSERT INTO events VALUES (1, 'new', now())",
        )
        root = project(tmp_path, db, TABLES.split("- name: landed")[0], {})
        code = (
            "import sys; from rivc.adapters.cli import main\n"
            "try: main(['source', 'freshness', '--project-dir', sys.argv[1]])\n"
            "except SystemExit as e: print('exit', e.code)\n"
            "print('pyspark' in sys.modules)"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120
        )
        assert done.stdout.splitlines()[-2:] == ["exit 1", "False"], done.stdout + done.stderr


def test_a_delta_sources_age_is_read_from_the_table_without_a_jvm(tmp_path):
    """A delta source (a table another writer keeps, written here with deltalake) is measured
    by its connector reading the column's newest value: no Spark; an empty table fails the
    threshold, a missing one is a runtime error naming it."""
    import subprocess
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa
    from deltalake import write_deltalake

    now = datetime.now(UTC)
    loaded = [now - timedelta(hours=5), now - timedelta(minutes=30), None]
    write_deltalake(
        str(tmp_path / "events"),
        pa.table({"id": [1, 2, 3], "loaded_at": pa.array(loaded, pa.timestamp("us", "UTC"))}),
    )
    write_deltalake(
        str(tmp_path / "empty"),
        pa.table({"loaded_at": pa.array([], pa.timestamp("us", "UTC"))}),
    )
    root = tmp_path / "p"
    (root / "sources").mkdir(parents=True)
    (root / "rivc_project.yml").write_text("name: fresh\n")
    tables = [("events", "events"), ("empty", "empty"), ("gone", "nowhere")]
    (root / "sources/lake.yml").write_text(
        "sources:\n  - name: lake\n    connector: delta\n    tables:\n"
        + "".join(
            f"      - name: {name}\n        config: {{table_uri: '{tmp_path / path}'}}\n"
            "        loaded_at_field: loaded_at\n"
            "        freshness: {error_after: {count: 1, period: hour}}\n"
            for name, path in tables
        )
    )
    code = (
        "import sys; from rivc.adapters.cli import main\n"
        "try: main(['source', 'freshness', '--json', '--project-dir', sys.argv[1]])\n"
        "except SystemExit as e: print('exit', e.code)\n"
        "print('pyspark' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120
    )
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["exit 1", "False"], done.stdout + done.stderr
    got = {r["unique_id"]: r for r in json.loads("\n".join(lines[:-2]))["results"]}
    events = got["source.fresh.lake.events"]
    assert events["status"] == "pass"  # the newest row is half an hour old
    assert 1700 < events["max_loaded_at_time_ago_in_s"] < 1900
    assert got["source.fresh.lake.empty"]["status"] == "error"
    gone = got["source.fresh.lake.gone"]
    assert gone["status"] == "runtime error" and "nowhere" in gone["error"], gone
