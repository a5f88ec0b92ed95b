"""Incremental merges, exactly-once sinks under replay, failures and skipped downstream nodes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from deltalake import DeltaTable

from rivc_testing import last_run, rivc, write_files

pytestmark = pytest.mark.integration

PROJECT = "name: inc\n"


def results(root: Path) -> dict[str, dict]:
    data = last_run(root)
    return {r["node"]: r for r in data["results"]}


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_incremental_merge_applies_new_and_changed_rows(spark, tmp_path):
    root = write_files(
        tmp_path / "inc",
        {
            "rivc_project.yml": PROJECT,
            "sources/crm.yml": """
sources:
  - name: crm
    connector: files
    tables:
      - name: accounts
        config: {path: data/accounts, format: jsonl}
        columns: {id: bigint, plan: string, updated_at: timestamp}
""",
            "models/accounts.sql": """{{ config(materialized='incremental', unique_key='id') }}
select id, plan, updated_at from {{ source('crm', 'accounts') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
""",
            "data/accounts/a.json": jsonl(
                [
                    {"id": 1, "plan": "free", "updated_at": "2026-01-01T00:00:00Z"},
                    {"id": 2, "plan": "free", "updated_at": "2026-01-01T00:00:00Z"},
                    {"id": 3, "plan": "pro", "updated_at": "2026-01-02T00:00:00Z"},
                ]
            ),
        },
    )
    assert rivc(root, "run").exit_code == 0
    write_files(
        root,
        {
            "data/accounts/b.json": jsonl(
                [
                    {"id": 2, "plan": "team", "updated_at": "2026-01-03T00:00:00Z"},  # changed
                    {"id": 4, "plan": "free", "updated_at": "2026-01-03T00:00:00Z"},  # new
                ]
            )
        },
    )
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    assert results(root)["model:accounts"]["rows"] == 2  # only rows newer than the table's max
    table = DeltaTable(str(root / "warehouse/accounts")).to_pyarrow_table().sort_by("id")
    assert table.column("id").to_pylist() == [1, 2, 3, 4]
    assert table.column("plan").to_pylist() == ["free", "team", "pro", "free"]


def stream_project(root: Path, max_events: int) -> Path:
    return write_files(
        root,
        {
            "rivc_project.yml": "name: stream\n",
            "sources/gen.yml": f"""
sources:
  - name: gen
    connector: datagen
    tables:
      - name: orders
        config: {{pattern: orders, stream: true, events_per_second: 0, max_events: {max_events}, seed: 3}}
""",
            "sinks/lake.yml": """
sinks:
  - name: orders_delta
    from: source:gen.orders
    connector: delta
    config: {table_uri: out/orders, mode: append}
""",
        },
    )


def test_replayed_stream_batch_is_skipped_not_duplicated(spark, tmp_path):
    root = stream_project(tmp_path / "s", 50)
    assert rivc(root, "run").exit_code == 0
    table = DeltaTable(str(root / "out/orders"))
    assert table.to_pyarrow_table().num_rows == 50
    assert table.transaction_version("rivc:stream:orders_delta") == 0

    # Crash after the Delta commit, before Spark's own: Spark's checkpoint has no commit for
    # batch 0, so the restart replays it, with the same offsets and so the same rows.
    commits = root / "warehouse/_rivc_checkpoints/orders_delta/commits"
    assert (commits / "0").exists()
    (commits / "0").unlink()
    (commits / ".0.crc").unlink()
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    assert "1 replayed and skipped" in results(root)["sink:orders_delta"]["message"]
    table = DeltaTable(str(root / "out/orders"))
    ids = table.to_pyarrow_table().column("order_id").to_pylist()
    assert sorted(ids) == list(range(1, 51))

    # More events: the next batch continues from the checkpoint's offset.
    stream_project(root, 80)
    assert rivc(root, "run").exit_code == 0
    ids = DeltaTable(str(root / "out/orders")).to_pyarrow_table().column("order_id").to_pylist()
    assert sorted(ids) == list(range(1, 81))


def test_replayed_batch_run_is_skipped(spark, sample):
    assert rivc(sample, "run", "--select", "+orders_lake").exit_code == 0
    lake = sample / "output/delta/orders"
    version = DeltaTable(str(lake)).version()
    # A crash after the Delta commit, before the state store recorded the batch and the run
    # ended: the run is still marked running.
    db = sqlite3.connect(sample / ".rivc/state.db")
    with db:
        db.execute("DELETE FROM batches WHERE sink = 'sink:orders_lake'")
        db.execute("UPDATE runs SET status = 'running', finished_at = NULL")
    db.close()
    result = rivc(sample, "run", "--select", "+orders_lake")  # the same run again
    assert result.exit_code == 0
    assert "resuming run" in result.output
    # the model's commit had landed, so the resumed run does not rebuild it, and the sink's
    # table holds that model batch already (its place in the model, in the same commit)
    assert "nothing new" in results(sample)["sink:orders_lake"]["message"]
    assert DeltaTable(str(lake)).version() == version  # no second commit
    # The sink alone: the model has no new batch, so there is nothing to deliver
    assert rivc(sample, "run", "--select", "orders_lake").exit_code == 0
    assert DeltaTable(str(lake)).version() == version
    # Nor when the incremental model adds no rows; when it is rebuilt, a new batch again.
    assert rivc(sample, "run", "--select", "+orders_lake").exit_code == 0
    assert DeltaTable(str(lake)).version() == version
    assert rivc(sample, "run", "--select", "+orders_lake", "--full-refresh").exit_code == 0
    assert DeltaTable(str(lake)).version() == version + 1
    assert DeltaTable(str(lake)).transaction_version("rivc:shop:orders_lake") == 1


def test_failed_node_skips_downstream_others_go_on(spark, tmp_path):
    root = write_files(
        tmp_path / "f",
        {
            "rivc_project.yml": "name: f\n",
            "sources/gen.yml": """
sources:
  - name: gen
    connector: datagen
    tables:
      - {name: users, config: {pattern: users, max_events: 10, seed: 1}}
""",
            "models/broken.sql": "{{ config(materialized='table') }}\n"
            "select user_id, 1 / (user_id - user_id) as boom from {{ source('gen', 'users') }}\n",
            "models/after_broken.sql": "{{ config(materialized='table') }}\n"
            "select * from {{ ref('broken') }}\n",
            "models/fine.sql": "{{ config(materialized='table') }}\n"
            "select user_id, name from {{ source('gen', 'users') }}\n",
        },
    )
    result = rivc(root, "run")
    assert result.exit_code == 1
    res = results(root)
    assert res["model:broken"]["status"] == "error"
    assert "DIVIDE_BY_ZERO" in res["model:broken"]["error"]
    assert res["model:after_broken"]["status"] == "skipped"
    assert res["model:fine"]["status"] == "success"
    assert DeltaTable(str(root / "warehouse/fine")).to_pyarrow_table().num_rows == 10
    assert not (root / "warehouse/after_broken").exists()


def test_test_severity_and_build_skips_after_failed_test(spark, tmp_path):
    root = write_files(
        tmp_path / "t",
        {
            "rivc_project.yml": "name: t\n",
            "sources/gen.yml": """
sources:
  - name: gen
    connector: datagen
    tables:
      - {name: orders, config: {pattern: orders, max_events: 20, seed: 1}}
""",
            "models/orders.sql": "{{ config(materialized='table') }}\n"
            "select order_id, customer_id, status from {{ source('gen', 'orders') }}\n",
            "models/by_customer.sql": "{{ config(materialized='table') }}\n"
            "select customer_id, count(*) as n from {{ ref('orders') }} group by customer_id\n",
            "models/schema.yml": """
version: 2
models:
  - name: orders
    columns:
      - name: customer_id
        tests: [unique]
      - name: status
        tests:
          - accepted_values: {values: [paid], config: {severity: warn}}
""",
        },
    )
    result = rivc(root, "build")
    assert result.exit_code == 1
    res = results(root)
    assert res["test:unique_orders_customer_id"]["status"] == "fail"
    assert "failing row" in res["test:unique_orders_customer_id"]["error"]
    assert res["test:accepted_values_orders_status__paid"]["status"] == "warn"
    assert res["model:by_customer"]["status"] == "skipped"


def test_streaming_files_source_one_file_per_batch(spark, tmp_path):
    root = write_files(
        tmp_path / "fs",
        {
            "rivc_project.yml": "name: fs\n",
            "sources/drop.yml": """
sources:
  - name: drop
    connector: files
    tables:
      - name: events
        config: {path: inbox, format: jsonl, stream: true, max_files_per_trigger: 1}
        columns: {id: bigint, kind: string}
""",
            "sinks/out.yml": """
sinks:
  - {name: events_files, from: source:drop.events, connector: files,
     config: {path: out/events, format: parquet}}
""",
            **{
                f"inbox/{i}.json": jsonl(
                    [{"id": 2 * i, "kind": "a"}, {"id": 2 * i + 1, "kind": "b"}]
                )
                for i in range(3)
            },
        },
    )
    assert rivc(root, "run").exit_code == 0
    res = results(root)["sink:events_files"]
    assert res["rows"] == 6 and res["files"] == 3
    assert "3 batches" in res["message"]
    written = sorted(p.name for p in (root / "out/events").iterdir() if p.name != "_rivc")
    assert written == [f"batch-{i:06d}-part-0000.parquet" for i in range(3)]
    # A second run finds nothing new in the inbox and writes nothing.
    assert rivc(root, "run").exit_code == 0
    assert results(root)["sink:events_files"]["rows"] == 0


def test_init_project_runs_as_is(spark, tmp_path):
    from click.testing import CliRunner

    from rivc.adapters.cli import main

    target = tmp_path / "fresh"
    assert CliRunner().invoke(main, ["init", str(target)]).exit_code == 0
    result = rivc(target, "build", "--threads", "2")
    assert result.exit_code == 0, result.output
    statuses = {r["status"] for r in results(target).values()}
    assert statuses <= {"success", "pass"}
    # the generated orders span days, so the daily mart looks like one
    daily = DeltaTable(str(target / "warehouse/daily_orders")).to_pyarrow_table()
    assert daily.num_rows >= 10 and sum(daily.column("orders").to_pylist()) == 1000
    # the README's quick start, as written
    result = rivc(target, "run", "--select", "stg_orders+", "--param", "min_total=50")
    assert result.exit_code == 0, result.output


def test_trigger_once_runs_one_batch(spark, tmp_path):
    root = stream_project(tmp_path / "once", 30)
    spec = root / "sinks/lake.yml"
    spec.write_text(spec.read_text() + "    trigger: once\n")
    run = rivc(root, "run")
    assert run.exit_code == 0, run.output
    res = results(root)["sink:orders_delta"]
    assert res["rows"] == 30 and "1 batch" in res["message"]
    # one line per micro-batch while the stream runs
    assert "sink:orders_delta batch 0: 30 rows in " in run.output
    assert "(30 in all)" in run.output
    assert DeltaTable(str(root / "out/orders")).transaction_version("rivc:stream:orders_delta") == 0


def test_iceberg_sink_skips_a_replayed_stream_batch(spark, tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    root = stream_project(tmp_path / "ice", 40)
    (root / "sinks/lake.yml").write_text(
        """
sinks:
  - name: orders_ice
    from: source:gen.orders
    connector: iceberg
    config: {namespace: shop, table: orders, partitioning: [{field: created_at, transform: day}]}
"""
    )
    assert rivc(root, "run").exit_code == 0
    commits = root / "warehouse/_rivc_checkpoints/orders_ice/commits"
    (commits / "0").unlink()
    (commits / ".0.crc").unlink()
    assert rivc(root, "run").exit_code == 0
    assert "1 replayed and skipped" in results(root)["sink:orders_ice"]["message"]
    home = root / ".rivc/iceberg"
    catalog = SqlCatalog(
        "rivc", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )
    ids = catalog.load_table("shop.orders").scan().to_arrow().column("order_id").to_pylist()
    assert sorted(ids) == list(range(1, 41))
