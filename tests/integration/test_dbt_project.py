"""A dbt project run as it is: tests/fixtures/dbt_shop (jaffle_shop's shape: dbt_project.yml
with per-folder configs and vars, seeds, staging views, mart tables, generic and singular
tests) is built by dbt-core with dbt-duckdb and by `rivc build`, and every table is compared
value for value, each read by another reader (DuckDB; delta-rs)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from dbt_artifacts_parser.parser import parse_catalog, parse_run_results
from deltalake import DeltaTable

from rivc_testing import DBT, dbt, last_run, rivc, run_rivc, write_files

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dbt_shop"
TABLES = (
    "raw_customers",
    "raw_orders",
    "raw_payments",
    "customers",
    "orders",
    "payment_counts",
    "orders_without_notes",
)


def dbt_build(tmp: Path) -> Path:
    """dbt's own build of the fixture, in DuckDB: the reference."""
    project = tmp / "dbt"
    shutil.copytree(FIXTURE, project)
    duckdb_profile(tmp, "shop", tmp / "shop.duckdb")
    for command in ("deps", "build"):
        dbt(command, project, tmp / "profiles")
    return project


def duckdb_profile(tmp: Path, name: str, database: Path) -> None:
    """`tmp`/profiles/profiles.yml: profile `name` on the DuckDB file `database`, one thread."""
    (tmp / "profiles").mkdir()
    (tmp / "profiles" / "profiles.yml").write_text(
        f"{name}:\n  target: dev\n  outputs:\n"
        f"    dev: {{type: duckdb, path: '{database}', threads: 1}}\n"
    )


def without_hash(uid: str) -> str:
    """A generic test's id without the hash dbt appends to it (rivc's has none)."""
    return uid.rsplit(".", 1)[0] if uid.startswith("test.") and uid.count(".") == 3 else uid


def same(a: object, b: object) -> bool:
    """Equal values; a number compared by value (rivc keeps `0.25` a decimal where dbt-duckdb
    reads the seed column as a double)."""
    if a is None or b is None:
        return a is b
    numbers = (int, float, Decimal)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-12)
    return a == b


def test_a_dbt_project_runs_unmodified_and_equals_dbts_tables(tmp_path):
    dbt_project = dbt_build(tmp_path)
    reference = tmp_path / "shop.duckdb"
    root = tmp_path / "rivc"
    shutil.copytree(FIXTURE, root)
    refused = rivc(root, "build")  # packages.yml asks for a package dbt_packages/ lacks
    assert refused.exit_code == 2 and "run `rivc deps`" in refused.output
    installed = rivc(root, "deps")
    assert installed.exit_code == 0, installed.output
    assert "installed shop_utils (local: packages/shop_utils)" in installed.output
    built = rivc(root, "build")
    assert built.exit_code == 0, built.output
    results = last_run(root)["results"]
    statuses = {r["node"]: r["status"] for r in results}
    assert statuses["model:stg_orders"] == "success" and statuses["seed:raw_orders"] == "success"
    assert statuses["test:no_negative_amounts"] == "pass"
    # every test dbt ran, with dbt's outcome: where, limit, warn_if/error_if, severity, enabled
    theirs = json.loads((dbt_project / "target/run_results.json").read_text())["results"]
    dbt_tests = {  # test.<project>.<name>.<hash>, unit_test.<project>.<model>.<name>
        r["unique_id"].split(".")[2 if r["unique_id"].startswith("test.") else 3]: r["status"]
        for r in theirs
        if r["unique_id"].startswith(("test.", "unit_test."))
    }
    assert {
        n.removeprefix("test:"): s for n, s in statuses.items() if n.startswith("test:")
    } == dbt_tests
    assert list(dbt_tests.values()).count("warn") == 3 and "fail" not in dbt_tests.values()
    # target/run_results.json is dbt's format: every node under dbt's id, with dbt's status and
    # a test's failures, read by dbt-artifacts-parser as dbt's own is
    mine = json.loads((root / "target/run_results.json").read_text())
    parse_run_results(mine)

    def outcome(results: list[dict]) -> dict[str, tuple]:
        return {
            without_hash(r["unique_id"]): (r["status"], r["failures"] if r["failures"] else None)
            for r in results
        }

    assert outcome(mine["results"]) == outcome(theirs)

    # target/catalog.json (`rivc docs generate`): dbt's format, every relation dbt's catalog has
    # with the same columns in the same order, the types of its built Delta tables
    dbt("docs generate", dbt_project, tmp_path / "profiles")
    assert rivc(root, "docs", "generate").exit_code == 0
    catalog = json.loads((root / "target/catalog.json").read_text())
    parse_catalog(catalog)
    dbt_catalog = json.loads((dbt_project / "target/catalog.json").read_text())

    def columns(nodes: dict) -> dict[str, list[str]]:
        return {
            uid: [c for c, _ in sorted(n["columns"].items(), key=lambda kv: kv[1]["index"])]
            for uid, n in nodes.items()
        }

    assert columns(catalog["nodes"]) == columns(dbt_catalog["nodes"])
    fee = catalog["nodes"]["seed.shop.raw_payments"]["columns"]["fee"]["type"]
    assert fee == "decimal(3,2)"  # as the table holds it
    failures = {r["unique_id"].split(".")[2]: r["failures"] for r in theirs if r["failures"]}
    ours = {r["node"].removeprefix("test:"): r["rows"] for r in results if r["status"] == "warn"}
    assert (
        ours
        == failures
        == {  # a fail_calc in the test's macro: the excess, not rows
            "mostly_completed": 4,
            "small_orders_only": 1,
            "shop_utils_excess_over_orders_amount__20": 17,
        }
    )

    manifest = json.loads((root / "target/rivc_manifest.json").read_text())["nodes"]
    assert (
        manifest["model:stg_orders"]["config"]["materialized"] == "view"
    )  # staging: +materialized
    assert manifest["model:stg_orders"]["tags"] == ["staging"]
    assert manifest["model:orders"]["config"]["materialized"] == "table"  # the project's default
    # the package's macros (dispatch, return, do) and generic tests, and the project's own
    assert "cast(amount / 100 as decimal(16, 2))" in manifest_sql(root, "model", "stg_payments")
    assert {
        "shop_utils_row_count_between_orders_100__1",
        "shop_utils_at_most_orders_amount__100",
    } <= {n.removeprefix("test:") for n in statuses}
    assert statuses["test:is_positive_orders_amount"] == "pass"
    assert statuses["test:cents_become_dollars"] == "pass"  # dbt's unit tests
    assert statuses["test:big_orders_follow_the_var"] == "pass"
    assert not (root / "warehouse" / "stg_orders").exists()  # a view has no table

    with duckdb.connect(str(reference), read_only=True) as con:
        for name in TABLES:
            theirs = con.sql(f"select * from main.{name}").to_arrow_table()
            ours = DeltaTable(str(root / "warehouse" / name)).to_pyarrow_table()
            assert ours.schema.names == theirs.schema.names, name
            key = theirs.schema.names[0]
            expected = sorted(theirs.to_pylist(), key=lambda r: r[key])
            got = sorted(ours.to_pylist(), key=lambda r: r[key])
            assert len(got) == len(expected) > 0, name
            for want, have in zip(expected, got, strict=True):
                assert all(same(want[k], have[k]) for k in want), (name, want, have)
    # where they differ, rivc keeps the value as written: the seed's fees are decimals
    fees = DeltaTable(str(root / "warehouse/raw_payments")).to_pyarrow_table().column("fee")
    assert str(fees.type) == "decimal128(3, 2)" and Decimal("1.10") in fees.to_pylist()


def manifest_sql(root: Path, kind: str, name: str) -> str:
    return (root / "target" / "compiled" / kind / f"{name}.sql").read_text()


def test_a_unit_test_that_does_not_hold_fails_naming_the_rows(make_project):
    """A unit test reads no table (nothing was seeded or built here) and fails with the rows
    that differ, on either side."""
    props = """
unit_tests:
  - name: doubled
    model: twice
    given:
      - input: ref('stg')
        rows: [{order_id: 1, total: 2.5}, {order_id: 2}]
    expect:
      rows: [{order_id: 1, double: 5.0}, {order_id: 2, double: 1}]
"""
    root = make_project(
        {
            "models/twice.sql": "select order_id, total * 2 as double from {{ ref('stg') }}\n",
            "models/twice.yml": props,
        }
    )
    ran = rivc(root, "test", "--select", "twice")
    assert ran.exit_code == 1, ran.output
    results = last_run(root)["results"]
    (result,) = [r for r in results if r["node"] == "test:doubled"]
    assert result["status"] == "fail" and result["rows"] == 2
    assert 'expected, not in the result: {"order_id": 2, "double": "1.00"}' in result["error"]
    assert 'in the result, not expected: {"order_id": 2, "double": null}' in result["error"]
    assert not (root / "warehouse").exists() or not any((root / "warehouse").iterdir())


def test_build_runs_a_models_unit_tests_first_and_a_failing_one_skips_it(make_project):
    """As dbt build: the model whose unit test fails is not built (nor what reads it); what
    it reads is."""
    root = make_project(
        {
            "models/stg.sql": "{{ config(materialized='table') }} select 1 as order_id, 2.5 as total",
            "models/twice.sql": "{{ config(materialized='table') }} "
            "select order_id, total * 2 as double from {{ ref('stg') }}",
            "models/after.sql": "select * from {{ ref('twice') }}\n",
            "models/twice.yml": """
unit_tests:
  - name: doubled
    model: twice
    given:
      - input: ref('stg')
        rows: [{order_id: 1, total: 2.5}]
    expect:
      rows: [{order_id: 1, double: 6.0}]
""",
        }
    )
    built = rivc(root, "build")
    assert built.exit_code == 1, built.output
    results = last_run(root)["results"]
    status = {r["node"]: r["status"] for r in results}
    assert status["test:doubled"] == "fail" and status["model:stg"] == "success"
    assert status["model:twice"] == "skipped" and status["model:after"] == "skipped"
    assert (root / "warehouse/stg").exists() and not (root / "warehouse/twice").exists()


SNAPSHOTS = {
    "dbt_project.yml": "name: snap\nprofile: snap\nconfig-version: 2\n",
    "snapshots/orders_snapshot.sql": """{% snapshot orders_snapshot %}
{{ config(unique_key='id', strategy='timestamp', updated_at='updated_at',
          hard_deletes='invalidate') }}
select * from {{ ref('orders') }}
{% endsnapshot %}
""",
    "snapshots/orders_deleted.sql": """{% snapshot orders_deleted %}
{{ config(unique_key='id', strategy='timestamp', updated_at='updated_at',
          hard_deletes='new_record') }}
select * from {{ ref('orders') }}
{% endsnapshot %}
""",
}
HEADER = "id,status,updated_at\n"
FIRST = HEADER + "1,placed,2024-01-01 10:00:00\n2,placed,2024-01-01 11:00:00\n"
FIRST += "3,shipped,2024-01-02 09:00:00\n"
SECOND = HEADER + "1,shipped,2024-01-03 10:00:00\n2,placed,2024-01-01 11:00:00\n"
SECOND += "4,placed,2024-01-04 09:00:00\n"
THIRD = SECOND + "3,returned,2024-01-05 09:00:00\n"  # a deleted key comes back


def _snapshot_rows(rows: list[dict]) -> list[tuple]:
    """Versions in order; a time of the run itself (each tool's own `now`, when a key was
    deleted) and a hash of it are compared as such."""

    def at(value):
        if value is None:
            return None
        value = value.replace(tzinfo=None)
        return "now" if value.year > 2025 else value

    out = []
    for r in rows:
        deleted = r.get("dbt_is_deleted")
        scd = "hash of now" if deleted == "True" else r["dbt_scd_id"]
        times = tuple(
            at(r[k]) for k in ("updated_at", "dbt_updated_at", "dbt_valid_from", "dbt_valid_to")
        )
        out.append((r["id"], r["status"], deleted, scd, *times))
    return sorted(out, key=str)


def test_snapshots_keep_history_as_dbts_and_once_across_a_kill(tmp_path, make_project):
    from rivc_testing import run_rivc

    ref = tmp_path / "dbt"
    for rel, text in SNAPSHOTS.items():
        (ref / rel).parent.mkdir(parents=True, exist_ok=True)
        (ref / rel).write_text(text)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "profiles.yml").write_text(
        f"snap:\n  target: dev\n  outputs:\n    dev: {{type: duckdb, path: '{tmp_path / 's.duckdb'}'}}\n"
    )
    (ref / "seeds").mkdir()
    for data in (FIRST, SECOND, THIRD):
        (ref / "seeds/orders.csv").write_text(data)
        for command in ("seed", "snapshot"):
            dbt(command, ref, tmp_path / "profiles")
    theirs = {}
    with duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True) as con:
        for name in ("orders_snapshot", "orders_deleted"):
            theirs[name] = _snapshot_rows(
                con.sql(f"select * from main.{name}").to_arrow_table().to_pylist()
            )

    root = make_project({**SNAPSHOTS, "seeds/orders.csv": FIRST}, base=False)
    assert rivc(root, "seed").exit_code == 0
    first = rivc(root, "snapshot")
    assert first.exit_code == 0, first.output
    (root / "seeds/orders.csv").write_text(SECOND)
    assert rivc(root, "seed").exit_code == 0
    killed = run_rivc(root, "after-commit:orders_snapshot", "snapshot")
    assert killed.returncode != 0  # killed after its commit, before the state store knew
    again = run_rivc(root, None, "snapshot")  # resumes: the batch is in, nothing is added
    assert again.returncode == 0, again.stderr
    (root / "seeds/orders.csv").write_text(THIRD)
    assert rivc(root, "seed").exit_code == 0
    assert rivc(root, "snapshot").exit_code == 0
    for name, expected in theirs.items():
        table = DeltaTable(str(root / "warehouse" / name))
        assert _snapshot_rows(table.to_pyarrow_table().to_pylist()) == expected, name
    assert len(theirs["orders_snapshot"]) == 6 and len(theirs["orders_deleted"]) == 7
    version = DeltaTable(str(root / "warehouse/orders_snapshot")).version()
    assert rivc(root, "run").exit_code == 0  # `run` leaves snapshots alone
    assert DeltaTable(str(root / "warehouse/orders_snapshot")).version() == version


def test_a_sink_fed_by_a_snapshot_takes_each_new_version_and_snapshots_run_on_threads(
    tmp_path, make_project
):
    """`snapshot`, `run`, then `seed` + `snapshot`, `run` twice: the sink below a snapshot
    takes the snapshot's new versions each time (it tracks the snapshot's table, not the
    snapshot's parent), equal to the table read with deltalake. Two snapshots built at once
    (`--threads 2`) end as on one thread; the first build says it wrote first versions."""
    sink = (
        "sinks:\n  - name: versions\n    from: orders_snapshot\n    connector: delta\n"
        "    config: {table_uri: out/versions, mode: overwrite}\n"
    )
    files = {**SNAPSHOTS, "seeds/orders.csv": FIRST, "sinks/out.yml": sink}
    threaded = make_project(files, base=False)
    alone = write_files(tmp_path / "alone", files)

    def rows(root: Path, table: str) -> list[tuple]:
        return _snapshot_rows(DeltaTable(str(root / table)).to_pyarrow_table().to_pylist())

    def messages(root: Path) -> dict[str, str]:
        said = last_run(root)["results"]
        return {r["node"]: r["message"] for r in said}

    for n, data in enumerate((FIRST, SECOND, THIRD)):
        for root, threads in ((threaded, "2"), (alone, "1")):
            (root / "seeds/orders.csv").write_text(data)
            assert rivc(root, "seed").exit_code == 0
            snapped = rivc(root, "snapshot", "--threads", threads)
            assert snapped.exit_code == 0, snapped.output
            if n == 0:
                said = messages(root)["model:orders_snapshot"]
                assert said == "snapshot: every row's first version"
            ran = rivc(root, "run", "--threads", threads)
            assert ran.exit_code == 0, ran.output
            assert messages(root)["sink:versions"] != "nothing new to deliver"
            assert rows(root, "out/versions") == rows(root, "warehouse/orders_snapshot")
        for name in ("orders_snapshot", "orders_deleted"):
            assert rows(threaded, f"warehouse/{name}") == rows(alone, f"warehouse/{name}")
    assert len(rows(threaded, "out/versions")) == 6


PY_TABLE = """
def model(dbt, session):
    dbt.config(materialized="table", tags=["py"])
    orders = dbt.ref("orders")
    return orders.groupBy("status").count().withColumnRenamed("count", "n")
"""
PY_INCREMENTAL = """
from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(materialized="incremental", unique_key="id")
    rows = dbt.ref("orders").select("id", F.upper("status").alias("status"))
    if dbt.is_incremental:
        newest = session.sql(f"select max(id) from {dbt.this}").first()[0]
        rows = rows.where(F.col("id") > newest)
    return rows
"""


def test_python_models_run_on_the_projects_spark(make_project):
    files = {
        "dbt_project.yml": "name: py\nprofile: py\nconfig-version: 2\n",
        "seeds/orders.csv": "id,status\n1,placed\n2,shipped\n3,placed\n",
        "models/by_status.py": PY_TABLE,
        "models/upper.py": PY_INCREMENTAL,
        "models/busy.sql": "select status from {{ ref('by_status') }} where n > 1\n",
    }
    root = make_project(files, base=False)
    built = rivc(root, "build")
    assert built.exit_code == 0, built.output

    def rows(name):
        table = DeltaTable(str(root / "warehouse" / name)).to_pyarrow_table().to_pylist()
        return sorted(tuple(r.values()) for r in table)

    assert rows("by_status") == [("placed", 2), ("shipped", 1)]
    assert rows("upper") == [(1, "PLACED"), (2, "SHIPPED"), (3, "PLACED")]
    (root / "seeds/orders.csv").write_text("id,status\n1,placed\n2,shipped\n3,placed\n4,new\n")
    assert rivc(root, "build").exit_code == 0
    assert rows("upper")[-1] == (4, "NEW") and len(rows("upper")) == 4  # only the new row added
    manifest = json.loads((root / "target/rivc_manifest.json").read_text())["nodes"]
    assert manifest["model:busy"]["depends_on"] == ["model:by_status"]
    assert manifest["model:by_status"]["compiled_path"] == "compiled/model/by_status.py"

    (root / "models/by_status.py").write_text(
        "def model(dbt, session):\n    return dbt.ref('orders').select('no_such_column')\n"
    )
    failed = rivc(root, "run", "--select", "by_status")
    assert failed.exit_code == 1
    assert "models/by_status.py:2: AnalysisException" in failed.output


SOURCES_YML = """
version: 2
sources:
  - name: ecom
    schema: raw_ecom
    tables:
      - name: customers
        columns:
          - {name: id, data_type: bigint, data_tests: [unique, not_null]}
          - {name: name, data_type: varchar(40)}
      - name: orders
        external: {location: lake/orders}
        columns:
          - {name: id, data_tests: [unique]}
  - name: web
    tables:
      - name: clicks
        external: {location: landing/clicks, file_format: parquet}
        data_tests:
          - accepted_rows:
              expression: "n > 0"
              config: {severity: warn, store_failures: true}
"""


def test_dbt_sources_are_read_in_place_with_their_tests(tmp_path, make_project, spark):
    """A dbt source table is a table that exists: one in Spark's catalog, a Delta table at an
    `external` location and a folder of parquet files are read as they are, values exact, and
    tests on source columns run against them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    amounts = [Decimal("0.01"), Decimal("99999999.99"), None]
    orders = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "customer_id": pa.array([10, 10, 11], pa.int64()),
            "amount": pa.array(amounts, pa.decimal128(10, 2)),
        }
    )
    clicks = pa.table({"customer_id": pa.array([10, 11], pa.int64()), "n": [3, 0]})
    files = {
        "dbt_project.yml": "name: lake\nprofile: lake\nconfig-version: 2\n",
        "models/sources.yml": SOURCES_YML,
        "models/spend.sql": (
            "{{ config(materialized='table') }}\n"
            "select c.id, c.name, sum(o.amount) as spent, max(k.n) as clicks\n"
            "from {{ source('ecom', 'customers') }} c\n"
            "join {{ source('ecom', 'orders') }} o on o.customer_id = c.id\n"
            "left join {{ source('web', 'clicks') }} k on k.customer_id = c.id\n"
            "group by c.id, c.name\n"
        ),
        "macros/accepted_rows.sql": (
            "{% test accepted_rows(model, expression) %}\n"
            "select * from {{ model }} where not ({{ expression }})\n{% endtest %}\n"
        ),
    }
    root = make_project(files, base=False)
    write_deltalake(str(root / "lake/orders"), orders)
    (root / "landing/clicks").mkdir(parents=True)
    pq.write_table(clicks, root / "landing/clicks/part-0.parquet")
    where = tmp_path / "raw_customers"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS raw_ecom LOCATION '{tmp_path / 'raw_ecom.db'}'")
    spark.sql(
        f"CREATE TABLE raw_ecom.customers (id BIGINT, name STRING) USING parquet LOCATION '{where}'"
    )
    try:
        spark.sql("INSERT INTO raw_ecom.customers VALUES (10, 'Ann O''Hara'), (11, NULL)")
        built = rivc(root, "build")
        assert built.exit_code == 0, built.output  # one click count is 0: a warning
        results = last_run(root)["results"]
        statuses = {r["node"]: r["status"] for r in results}
        assert statuses == {
            "source:ecom.customers": "success",
            "source:ecom.orders": "success",
            "source:web.clicks": "success",
            "model:spend": "success",
            "test:source_unique_ecom_customers_id": "pass",
            "test:source_not_null_ecom_customers_id": "pass",
            "test:source_unique_ecom_orders_id": "pass",
            "test:source_accepted_rows_web_clicks_n_0": "warn",
        }
        stored = root / "warehouse/dbt_test__audit/source_accepted_rows_web_clicks_n_0"
        assert DeltaTable(str(stored)).to_pyarrow_table().to_pylist() == [
            {"customer_id": 11, "n": 0}
        ]
        spend = DeltaTable(str(root / "warehouse/spend")).to_pyarrow_table()
        assert sorted(spend.to_pylist(), key=lambda r: r["id"]) == [
            {"id": 10, "name": "Ann O'Hara", "spent": Decimal("100000000.00"), "clicks": 3},
            {"id": 11, "name": None, "spent": None, "clicks": 0},
        ]
        # a table the catalog does not have is named when the run reads it
        spark.sql("DROP TABLE raw_ecom.customers")
        gone = rivc(root, "run")
        assert gone.exit_code == 1
        assert "Spark's catalog has no table raw_ecom.customers" in gone.output
    finally:
        spark.sql("DROP TABLE IF EXISTS raw_ecom.customers")
        spark.sql("DROP DATABASE IF EXISTS raw_ecom")


def test_hooks_run_on_spark_around_the_run_and_each_model(tmp_path, make_project, spark):
    """on-run-start, a model's pre- and post-hooks and on-run-end run in that order on the
    project's Spark; a failing hook is an error naming it, and a failing on-run-start runs no
    node."""
    audit = tmp_path / "audit"
    project = (
        "name: hooks\nprofile: hooks\nconfig-version: 2\n"
        "on-run-start:\n"
        f"  - \"create table if not exists rivc_audit (what string, step int) using parquet location '{audit}'\"\n"
        "on-run-end: \"insert into rivc_audit values ('end', 9)\"\n"
        "models:\n  hooks:\n    +post-hook: \"insert into rivc_audit values ('{{ this }}', 2)\"\n"
    )
    model = (
        "{{ config(materialized='table', pre_hook=\"insert into rivc_audit values ('pre', 1)\") }}\n"
        "select 1 as n\n"
    )
    root = make_project({"dbt_project.yml": project, "models/m.sql": model}, base=False)
    try:
        built = rivc(root, "run")
        assert built.exit_code == 0, built.output
        rows = sorted(
            duckdb.sql(f"select step, what from read_parquet('{audit}/*.parquet')").fetchall()
        )
        assert rows == [(1, "pre"), (2, "`m`"), (9, "end")]
        results = last_run(root)["results"]
        assert [r["node"] for r in results] == [
            "operation:on-run-start.0",
            "model:m",
            "operation:on-run-end.0",
        ]

        (root / "models/m.sql").write_text(
            model.replace("rivc_audit values ('pre', 1)", "no_such_table values (1)")
        )
        failed = rivc(root, "run")
        assert failed.exit_code == 1
        assert "pre-hook 1: [TABLE_OR_VIEW_NOT_FOUND]" in failed.output, failed.output

        (root / "dbt_project.yml").write_text(
            project.replace("create table if not exists", "create tablee")
        )
        failed = rivc(root, "run")
        assert failed.exit_code == 1
        statuses = {r["node"]: r["status"] for r in last_run(root)["results"]}
        assert statuses == {
            "operation:on-run-start.0": "error",
            "model:m": "skipped",
            "operation:on-run-end.0": "success",
        }
    finally:
        spark.sql("DROP TABLE IF EXISTS rivc_audit")


SOURCE_ROUNDS = """{{ config(materialized='table') }}
{% if var('round') == 1 %}
select * from values (1, date'2024-01-01', 'a'), (2, date'2024-01-01', 'b'),
  (3, date'2024-01-02', 'c') as t(id, day, v)
{% else %}
select * from values (1, date'2024-01-01', 'A'), (2, date'2024-01-01', 'b'),
  (3, date'2024-01-02', 'C'), (4, date'2024-01-02', 'd') as t(id, day, v)
{% endif %}
"""
OVERWRITE = """{{{{ config(materialized='incremental', incremental_strategy='insert_overwrite'{by}) }}}}
select id, day, v from {{{{ ref('src') }}}}
{{% if is_incremental() %}} where day {when} {{% endif %}}
"""


def test_insert_overwrite_replaces_the_partitions_its_rows_fall_in(make_project):
    """dbt-spark's insert_overwrite on Delta: an incremental run replaces the partitions its
    rows fall in and keeps the rest (day 1's change, outside the filter, is not taken); with no
    partition_by, the whole table; a run that selects no rows replaces no partition. A kill
    before the commit leaves the table as it was, and the rerun lands the batch once."""
    root = make_project(
        {
            "rivc_project.yml": "name: t\nvars: {round: 1}\n",
            "models/src.sql": SOURCE_ROUNDS,
            "models/days.sql": OVERWRITE.format(by=", partition_by=['day']", when="= '2024-01-02'"),
            "models/whole.sql": OVERWRITE.format(by="", when="= '2024-01-02'"),
            "models/none.sql": OVERWRITE.format(by=", partition_by=['day']", when="> '2030-01-01'"),
            "sinks/out.yml": "sinks:\n  - {name: days_out, from: days, connector: delta,"
            " config: {table_uri: out/days, mode: overwrite}}\n",
            # partition values a path must encode, and NULL's partition
            "models/odd.sql": "{{ config(materialized='incremental', "
            "incremental_strategy='insert_overwrite', partition_by=['k']) }}\n"
            "select * from values ('a b', 1 * {{ var('round') }}), ('x:y%z/=', 2 * {{ var('round') }}),"
            " (cast(null as string), 3 * {{ var('round') }}) as t(k, v)\n"
            "{% if is_incremental() %} where k is null or k like 'x%' {% endif %}\n",
        },
        base=False,
    )

    def table(name: str) -> list[tuple]:
        rows = DeltaTable(str(root / "warehouse" / name)).to_pyarrow_table().to_pylist()
        return sorted((r["id"], str(r["day"]), r["v"]) for r in rows)

    first = [(1, "2024-01-01", "a"), (2, "2024-01-01", "b"), (3, "2024-01-02", "c")]
    assert rivc(root, "run").exit_code == 0
    assert table("days") == table("whole") == table("none") == first

    killed = run_rivc(root, "before-commit:days", "run", "--vars", "{round: 2}")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert table("days") == first
    again = rivc(root, "run", "--vars", "{round: 2}")
    assert again.exit_code == 0, again.output
    day2 = [(3, "2024-01-02", "C"), (4, "2024-01-02", "d")]
    assert table("days") == first[:2] + day2
    assert table("whole") == day2
    assert table("none") == first
    out = DeltaTable(str(root / "out/days")).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], str(r["day"]), r["v"]) for r in out) == table("days")  # its consumer
    odd = DeltaTable(str(root / "warehouse/odd")).to_pyarrow_table().to_pylist()
    assert sorted((r["k"] or "", r["v"]) for r in odd) == [("", 6), ("a b", 1), ("x:y%z/=", 4)]
    files = DeltaTable(str(root / "warehouse/days")).file_uris()
    assert len([f for f in files if "day=2024-01-02" in f]) >= 1
    assert all("day=2024-01-01" in f or "day=2024-01-02" in f for f in files)


VERSIONED = {
    "dbt_project.yml": "name: versioned\nversion: '1.0'\nprofile: versioned\n"
    "models:\n  versioned:\n    +materialized: table\n",
    "models/dim_customers_v1.sql": "select 1 as id, 'a' as name, 'x' as legacy\n",
    "models/dim_customers_v2.sql": "select 1 as id, 'a' as name\n",
    "models/dim_customers_next.sql": "select 1 as id, 'a' as name, 2 as score\n",
    "models/latest.sql": "select * from {{ ref('dim_customers') }}\n",
    "models/first.sql": "select * from {{ ref('dim_customers', v=1) }}\n",
    "models/third.sql": "select * from {{ ref('dim_customers', version=3) }}\n",
    "models/props.yml": """models:
  - name: dim_customers
    latest_version: 2
    columns:
      - name: id
        data_tests: [not_null]
      - name: legacy
    versions:
      - v: 1
      - v: 2
        columns:
          - include: all
            exclude: [legacy]
      - v: 3
        defined_in: dim_customers_next
""",
}


def test_model_versions_build_the_relations_dbt_builds(tmp_path):
    """dbt's model versions under rivc and under dbt-duckdb: the same relations (a version
    defined in a file of another name is still `<name>_v<v>`), the same refs, the same tests."""
    project = write_files(tmp_path / "dbt", VERSIONED)
    duckdb_profile(tmp_path, "versioned", tmp_path / "v.duckdb")
    dbt("build", project, tmp_path / "profiles")
    theirs = json.loads((project / "target/run_results.json").read_text())["results"]
    built = {r["unique_id"] for r in theirs if r["unique_id"].startswith("model.")}
    assert built == {
        "model.versioned.dim_customers.v1",
        "model.versioned.dim_customers.v2",
        "model.versioned.dim_customers.v3",
        "model.versioned.latest",
        "model.versioned.first",
        "model.versioned.third",
    }
    with duckdb.connect(str(tmp_path / "v.duckdb"), read_only=True) as con:
        relations = {
            r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()
        }
        expected = {
            name: sorted(con.execute(f"select * from {name}").fetchall())
            for name in ("latest", "first", "third")
        }
    assert {"dim_customers_v1", "dim_customers_v2", "dim_customers_v3"} <= relations

    root = write_files(tmp_path / "rivc", VERSIONED)
    done = rivc(root, "build")
    assert done.exit_code == 0, done.output
    ours = last_run(root)["results"]
    statuses = {r["node"]: r["status"] for r in ours}
    for name in ("dim_customers_v1", "dim_customers_v2", "dim_customers_v3", "latest", "first"):
        assert statuses[f"model:{name}"] == "success", statuses
    tests = {n for n in statuses if n.startswith("test:")}
    dbt_tests = {r["unique_id"].split(".")[2] for r in theirs if r["unique_id"].startswith("test.")}
    assert {t.removeprefix("test:") for t in tests} == dbt_tests
    for name, rows in expected.items():
        got = DeltaTable(str(root / "warehouse" / name)).to_pyarrow_table().to_pylist()
        assert sorted(tuple(r.values()) for r in got) == rows, name


CONTRACTED = {
    "dbt_project.yml": "name: contracted\nversion: '1.0'\nprofile: contracted\n"
    "models:\n  contracted:\n    +materialized: table\n",
    "models/orders.sql": "select cast(id as integer) as id, cast(v as string) as v from "
    "(values (1, 'a'), ({{ var('second', '2') }}, 'b')) as t(id, v)\n",
    "models/props.yml": """models:
  - name: orders
    config: {contract: {enforced: true}}
    columns:
      - name: id
        data_type: integer
        constraints: [{type: not_null}]
      - name: v
        data_type: varchar
""",
}


def test_an_enforced_contract_is_checked_before_the_write_as_dbt_checks_it(tmp_path):
    """The same project under dbt-duckdb and rivc: the contract holds and both build the same
    table; a NULL in a not_null column fails both, and rivc's table is as it was."""
    project = write_files(tmp_path / "dbt", CONTRACTED)
    duckdb_profile(tmp_path, "contracted", tmp_path / "c.duckdb")
    dbt("build", project, tmp_path / "profiles")
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    broken = subprocess.run(
        [
            str(DBT),
            "build",
            "--profiles-dir",
            str(tmp_path / "profiles"),
            "--vars",
            "{second: 'null'}",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert broken.returncode != 0  # DuckDB refuses the NULL: the NOT NULL dbt declared
    assert "NOT NULL constraint failed" in broken.stdout, broken.stdout[-2000:]
    with duckdb.connect(str(tmp_path / "c.duckdb"), read_only=True) as con:
        theirs = sorted(con.execute("select * from orders").fetchall())

    root = write_files(tmp_path / "rivc", CONTRACTED)
    done = rivc(root, "build")
    assert done.exit_code == 0, done.output
    table = root / "warehouse/orders"
    ours = sorted(tuple(r.values()) for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist())
    assert ours == theirs == [(1, "a"), (2, "b")]
    versions = len(DeltaTable(str(table)).history())
    failed = rivc(root, "build", "--vars", "{second: 'null'}")
    assert failed.exit_code == 1, failed.output
    assert "1 row(s) with id NULL (not_null)" in failed.output, failed.output
    assert len(DeltaTable(str(table)).history()) == versions  # nothing written


MICROBATCH = {
    "dbt_project.yml": "name: mb\nconfig-version: 2\nprofile: mb\n"
    "models:\n  mb:\n    +materialized: table\n",
    # one row at each edge of a day, one before `begin`, one with no time, one late
    "seeds/events.csv": "id,happened_at,amount\n1,2024-01-01 00:00:00,10\n"
    "2,2024-01-01 23:59:59,11\n3,2024-01-02 08:00:00,12\n4,2024-01-02 09:30:00,13\n"
    "5,2024-01-03 12:00:00,14\n6,2024-01-04 00:00:00,15\n7,2023-12-31 23:00:00,16\n8,,17\n",
    "models/stg_events.sql": "{{ config(event_time='happened_at') }}\n"
    "select id, happened_at, amount from {{ ref('events') }}\n",
    # `seen`: how many of its parent's rows the batch read (each batch reads its own day)
    "models/daily.sql": "{{ config(materialized='incremental', incremental_strategy='microbatch',"
    " event_time='happened_at', batch_size='day', begin='2024-01-01') }}\n"
    "select e.id, e.happened_at, e.amount * 2 as doubled,\n"
    "  (select count(*) from {{ ref('stg_events') }}) as seen\n"
    "from {{ ref('stg_events') }} as e\n",
    # the same by a `date` event_time: its rows fall in the day the date names
    "models/stg_days.sql": "{{ config(event_time='happened_on') }}\n"
    "select id, cast(happened_at as date) as happened_on, amount from {{ ref('events') }}\n",
    "models/daily_by_date.sql": "{{ config(materialized='incremental',"
    " incremental_strategy='microbatch', event_time='happened_on', batch_size='day',"
    " begin='2024-01-01') }}\n"
    "select d.id, d.happened_on, d.amount * 2 as doubled,\n"
    "  (select count(*) from {{ ref('stg_days') }}) as seen\n"
    "from {{ ref('stg_days') }} as d\n",
    # a parent with no event_time is read whole: each batch holds every row, and writes those
    # of its own period (the first, creating the table, all of them)
    "models/daily_whole.sql": "{{ config(materialized='incremental',"
    " incremental_strategy='microbatch', event_time='happened_at', batch_size='day',"
    " begin='2024-01-01') }}\n"
    "select id, happened_at, amount * 2 as doubled,\n"
    "  (select count(*) from {{ ref('events') }}) as seen\n"
    "from {{ ref('events') }}\n",
}


def test_microbatch_builds_each_period_as_dbt_does_and_once_across_a_kill(tmp_path):
    """dbt's microbatch on Delta: each day's batch reads its parent through that day and
    replaces that day's rows; a later run over one day replaces it alone. Compared with
    dbt-duckdb after each step, by a timestamp and by a date event_time. A run killed between
    batches is run again and the table holds each row once; run_results.json lists the
    batches as dbt's does."""
    ours, theirs = tmp_path / "rivc", tmp_path / "dbt"
    for where in (ours, theirs):
        write_files(where, MICROBATCH)
    duckdb_profile(tmp_path, "mb", tmp_path / "mb.duckdb")
    (ours / "profiles.yml").write_text("mb:\n  target: dev\n  outputs:\n    dev: {}\n")

    def both(*args: str, ours_too: bool = True) -> None:
        done = subprocess.run(
            [str(DBT), "build", "--profiles-dir", str(tmp_path / "profiles"), *args],
            cwd=theirs,
            env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        if ours_too:
            built = rivc(ours, "build", *args)
            assert built.exit_code == 0, built.output

    def table(name: str = "daily") -> list[tuple]:
        rows = DeltaTable(str(ours / "warehouse" / name)).to_pyarrow_table().to_pylist()
        return sorted((r["id"], r["doubled"], r["seen"]) for r in rows)

    def reference(name: str = "daily") -> list[tuple]:
        with duckdb.connect(str(tmp_path / "mb.duckdb"), read_only=True) as con:
            return sorted(con.sql(f"select id, doubled, seen from main.{name}").fetchall())

    def by_date() -> list[tuple]:
        rows = DeltaTable(str(ours / "warehouse/daily_by_date")).to_pyarrow_table().to_pylist()
        got = sorted((r["id"], r["doubled"], r["seen"]) for r in rows)
        assert got == reference("daily_by_date")
        return got

    span = ("--event-time-start", "2024-01-01", "--event-time-end", "2024-01-04")
    both(*span)
    assert table() == reference() == [(1, 20, 2), (2, 22, 2), (3, 24, 2), (4, 26, 2), (5, 28, 1)]
    assert by_date() == table()
    # each row once: before, every batch wrote the rows it held outside its day too
    whole = [(1, 20, 8), (2, 22, 8), (3, 24, 8), (4, 26, 8), (5, 28, 8), (6, 30, 8), (7, 32, 8)]
    assert table("daily_whole") == reference("daily_whole") == [*whole, (8, 34, 8)]
    batches = next(
        r["batch_results"]
        for r in json.loads((ours / "target/run_results.json").read_text())["results"]
        if r["unique_id"] == "model.mb.daily"
    )
    assert [s[:10] for s, _ in batches["successful"]] == ["2024-01-01", "2024-01-02", "2024-01-03"]

    for where in (ours, theirs):  # day 2 and day 3 change; only day 2 is built again
        csv = where / "seeds/events.csv"
        csv.write_text(csv.read_text().replace(",12\n", ",112\n").replace(",14\n", ",114\n"))
    both("--event-time-start", "2024-01-02", "--event-time-end", "2024-01-03")
    assert table() == reference() == [(1, 20, 2), (2, 22, 2), (3, 224, 2), (4, 26, 2), (5, 28, 1)]
    assert by_date() == table()
    assert table("daily_whole") == reference("daily_whole")  # day 2's rows replaced alone
    assert (3, 224, 8) in table("daily_whole") and (5, 28, 8) in table("daily_whole")

    # killed after its first batch's commit, a full rebuild of four days is run again
    wide = ("--full-refresh", "--event-time-start", "2024-01-01", "--event-time-end", "2024-01-05")
    killed = run_rivc(ours, "between-batches:daily", "run", "--select", "daily", *wide)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert table() == [(1, 20, 2), (2, 22, 2)]  # the first day is in, the rest is not yet
    again = rivc(ours, "run", "--select", "daily", *wide)
    assert again.exit_code == 0, again.output
    both(*wide, ours_too=False)
    assert table() == reference()
    assert table() == [(1, 20, 2), (2, 22, 2), (3, 224, 2), (4, 26, 2), (5, 228, 1), (6, 30, 1)]


def test_microbatch_filters_a_dbt_source_by_its_event_time_as_dbt_does(tmp_path):
    """A dbt source table with `config: {event_time: ...}` (here loaded by a seed of its name) is
    read by each batch through the batch's period, as dbt filters `source()`; compared with
    dbt-duckdb's table (`dbt seed`, then `dbt run`: dbt orders no seed before a source)."""
    files = {
        "dbt_project.yml": "name: mbs\nconfig-version: 2\nprofile: mbs\n",
        "seeds/events.csv": MICROBATCH["seeds/events.csv"],
        "models/sources.yml": "sources:\n  - name: raw\n    schema: main\n    tables:\n"
        "      - name: events\n        config: {event_time: happened_at}\n",
        "models/daily.sql": "{{ config(materialized='incremental',"
        " incremental_strategy='microbatch', event_time='happened_at', batch_size='day',"
        " begin='2024-01-01') }}\n"
        "select e.id, e.happened_at, e.amount * 2 as doubled,\n"
        "  (select count(*) from {{ source('raw', 'events') }}) as seen\n"
        "from {{ source('raw', 'events') }} as e\n",
    }
    ours, theirs = tmp_path / "rivc", tmp_path / "dbt"
    for where in (ours, theirs):
        write_files(where, files)
    duckdb_profile(tmp_path, "mbs", tmp_path / "mbs.duckdb")
    (ours / "profiles.yml").write_text("mbs:\n  target: dev\n  outputs:\n    dev: {}\n")
    span = "--event-time-start 2024-01-01 --event-time-end 2024-01-04"
    dbt("seed", theirs, tmp_path / "profiles")
    dbt(f"run {span}", theirs, tmp_path / "profiles")
    built = rivc(ours, "build", *span.split())
    assert built.exit_code == 0, built.output
    rows = DeltaTable(str(ours / "warehouse/daily")).to_pyarrow_table().to_pylist()
    got = sorted((r["id"], r["doubled"], r["seen"]) for r in rows)
    with duckdb.connect(str(tmp_path / "mbs.duckdb"), read_only=True) as con:
        expected = sorted(con.sql("select id, doubled, seen from main.daily").fetchall())
    assert got == expected == [(1, 20, 2), (2, 22, 2), (3, 24, 2), (4, 26, 2), (5, 28, 1)]


LISTED = {
    "dbt_project.yml": "name: listed\nversion: '1.0'\nprofile: listed\n"
    "seeds:\n  listed:\n    +schema: events\n"
    "models:\n  listed:\n    +materialized: table\n    late:\n      +schema: events\n",
    "seeds/data_events_20180101.csv": "user_id,event\n1,play\n2,pause\n",
    "seeds/data_events_20180102.csv": "user_id,event\n3,play\n",
    "seeds/data_events_20180103.csv": "user_id,event\n4,stop\n",
    "models/late/data_events_late.sql": "select 9 as user_id, 'late' as event\n",
    "models/late/data_events_0103_view.sql": "{{ config(materialized='view', alias='data_events_x') }}\n"
    "select 8 as user_id, 'view' as event\n",
    "models/other.sql": "select 1 as user_id\n",
    # what dbt_utils' get_relations_by_pattern does, written for this test
    "macros/relations_like.sql": """
{% macro relations_like(schema_pattern, table_pattern, exclude='') %}
  {% call statement('tables', fetch_result=True) %}
    select distinct table_schema as table_schema, table_name as table_name
    from information_schema.tables
    where table_schema ilike '{{ schema_pattern }}' and table_name ilike '{{ table_pattern }}'
      and table_name not ilike '{{ exclude }}'
    order by table_name
  {% endcall %}
  {% set found = [] %}
  {% for row in load_result('tables')['table'] %}
    {% do found.append(api.Relation.create(
        database=target.database, schema=row.table_schema, identifier=row.table_name)) %}
  {% endfor %}
  {{ return(found) }}
{% endmacro %}
""",
    "models/unioned.sql": """-- depends_on: {{ ref('data_events_late') }}
{% set relations = relations_like(target.schema ~ '%', 'data_events_%', '%0103') %}
{% for r in relations %}
select user_id, event, '{{ r.identifier }}' as source from {{ r }}
{% if not loop.last %}union all{% endif %}
{% endfor %}
""",
}


def test_information_schema_lists_the_projects_relations_at_compile_as_dbt_finds_them(tmp_path):
    """A model that lists relations through information_schema.tables (dbt_utils'
    get_relations_by_pattern, get_relations_by_prefix) and unions them: rivc answers from the
    project's relations under dbt's names while compiling, dbt-duckdb from its database; the same
    rows. A model's literal config() arguments are read before it renders; one whose config()
    computes another name for a listed relation is refused at compile."""
    project = write_files(tmp_path / "dbt", LISTED)
    duckdb_profile(tmp_path, "listed", tmp_path / "listed.duckdb")
    dbt("build", project, tmp_path / "profiles")
    with duckdb.connect(str(tmp_path / "listed.duckdb"), read_only=True) as con:
        theirs = sorted(con.execute("select * from main.unioned").fetchall())
    assert [r[2] for r in theirs] == [
        "data_events_20180101",
        "data_events_20180101",
        "data_events_20180102",
        "data_events_x",  # a view its own config() names
        "data_events_late",
    ]

    root = write_files(tmp_path / "rivc", LISTED)
    done = rivc(root, "build")
    assert done.exit_code == 0, done.output
    ours = DeltaTable(str(root / "warehouse" / "unioned")).to_pyarrow_table().to_pylist()
    assert sorted(tuple(r.values()) for r in ours) == theirs
    manifest = json.loads((root / "target/manifest.json").read_text())
    deps = manifest["nodes"]["model.listed.unioned"]["depends_on"]["nodes"]
    assert sorted(deps) == [
        "model.listed.data_events_0103_view",
        "model.listed.data_events_late",
        "seed.listed.data_events_20180101",
        "seed.listed.data_events_20180102",
    ]

    moved = write_files(
        tmp_path / "moved",
        {
            **LISTED,
            "models/late/data_events_late.sql": "{{ config(alias=var('to', 'data_events_zz')) }}\n"
            + LISTED["models/late/data_events_late.sql"],
        },
    )
    refused = rivc(moved, "compile")
    assert refused.exit_code == 2
    assert "models/unioned.sql" in refused.output
    assert "data_events_late is named by a model's own config()" in refused.output
