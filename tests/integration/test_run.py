"""sample_project end to end on local Spark, outputs read back with deltalake and DuckDB."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from rivc_testing import last_run, rivc

pytestmark = pytest.mark.integration


def results(root: Path) -> dict[str, dict]:
    data = last_run(root)
    return {r["node"]: r for r in data["results"]}


def parquet_rows(directory: Path, sql: str = "SELECT count(*) FROM t") -> list[tuple]:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{directory}/*.parquet')")
    return con.execute(sql).fetchall()


def test_sample_project_runs_end_to_end(spark, sample):
    result = rivc(sample, "run")
    assert result.exit_code == 0, result.output
    res = results(sample)
    assert {r["status"] for r in res.values()} == {"success"}
    assert res["model:orders_enriched"]["rows"] == 5000

    lake = DeltaTable(str(sample / "output/delta/orders")).to_pyarrow_table()
    assert lake.num_rows == 5000
    assert len(set(lake.column("order_id").to_pylist())) == 5000
    assert set(lake.column("region").to_pylist()) == {"eu"}
    assert DeltaTable(str(sample / "output/delta/orders")).metadata().partition_columns == [
        "order_date"
    ]

    customers = DeltaTable(str(sample / "warehouse/customer_orders")).to_pyarrow_table()
    files_dir = sample / "output/files/customer_orders"
    assert parquet_rows(files_dir) == [(customers.num_rows,)]
    # The files sink holds exactly the model's rows: same customers, same revenue.
    total = sum(v for v in customers.column("revenue").to_pylist())
    assert parquet_rows(files_dir, "SELECT sum(revenue) FROM t") == [(total,)]

    # The stdout sink printed its rows as JSON lines.
    printed = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert printed and set(printed[0]) == {"order_date", "orders", "revenue"}
    assert len(printed) <= 5

    # The state store has the batch, the file and the schema of every node.
    shown = rivc(sample, "state", "files", "--json")
    files = json.loads(shown.output)["files"]
    assert {f["node"] for f in files} == {"sink:customer_orders_files", "sink:orders_lake"}
    assert all(Path(f["path"]).exists() for f in files)

    # The sink alone has nothing new to deliver: its model was not rebuilt since.
    assert rivc(sample, "run", "--select", "customer_orders_files").exit_code == 0
    assert "nothing new" in results(sample)["sink:customer_orders_files"]["message"]
    # Nor after a run of its model, which is reused: its SQL and inputs did not change.
    assert rivc(sample, "run", "--select", "customer_orders+").exit_code == 0
    assert results(sample)["model:customer_orders"]["message"].startswith("reused")
    assert "nothing new" in results(sample)["sink:customer_orders_files"]["message"]
    # With its model rebuilt, it replaces its output (mode: overwrite) instead of adding to it.
    assert rivc(sample, "run", "--select", "customer_orders+", "--full-refresh").exit_code == 0
    assert parquet_rows(files_dir) == [(customers.num_rows,)]
    written = [p.name for p in files_dir.iterdir() if p.name != "_rivc"]
    assert written == ["batch-000001-part-0000.parquet"]

    # Tests pass on the built project; build runs nodes and tests together.
    tested = rivc(sample, "test")
    assert tested.exit_code == 0, tested.output
    assert all(r["status"] in ("pass", "warn") for r in results(sample).values())
    assert any(n.startswith("test:unique_orders_enriched") for n in results(sample))


def test_incremental_model_is_not_rebuilt_and_second_run_adds_nothing(spark, sample):
    assert rivc(sample, "run", "--select", "+orders_enriched").exit_code == 0
    first = DeltaTable(str(sample / "warehouse/orders_enriched"))
    version = first.version()
    assert rivc(sample, "run", "--select", "orders_enriched").exit_code == 0
    res = results(sample)
    assert list(res) == ["model:orders_enriched"]  # nothing else ran
    assert res["model:orders_enriched"]["rows"] == 0  # is_incremental(): no newer orders
    assert DeltaTable(str(sample / "warehouse/orders_enriched")).version() == version
    # --full-refresh rebuilds it in one overwrite.
    assert rivc(sample, "run", "--select", "orders_enriched", "--full-refresh").exit_code == 0
    again = DeltaTable(str(sample / "warehouse/orders_enriched"))
    assert again.version() == version + 1
    assert again.to_pyarrow_table().num_rows == 5000


def test_selection_and_params(spark, sample):
    result = rivc(sample, "run", "--select", "stg_users+", "--param", "region=us")
    assert result.exit_code == 0, result.output
    ran = set(results(sample))
    assert ran == {
        "model:stg_users",
        "model:orders_enriched",
        "model:customer_orders",
        "model:daily_revenue",
        "sink:orders_lake",
        "sink:customer_orders_files",
        "sink:daily_revenue_console",
    }
    assert not (sample / "warehouse/stg_orders").exists()  # a view, bound but not stored
    lake = DeltaTable(str(sample / "output/delta/orders")).to_pyarrow_table()
    assert set(lake.column("region").to_pylist()) == {"us"}


def test_the_product_cards_orders_plus_builds_the_order_pipeline(spark, sample):
    result = rivc(sample, "build", "--select", "orders+", "--param", "min_total=50")
    assert result.exit_code == 0, result.output
    ran = set(results(sample))
    assert {
        "model:orders",
        "model:stg_orders",
        "model:orders_enriched",
        "model:customer_orders",
        "model:daily_revenue",
        "sink:orders_lake",
        "test:not_null_orders_order_id",
        "test:unique_stg_orders_order_id",
    } <= ran
    assert not {"model:stg_users", "model:stg_pageviews"} & ran  # bound, not run
    # cents_to_amount turns cents back into the amounts generated, exactly
    lake = DeltaTable(str(sample / "output/delta/orders")).to_pyarrow_table()
    totals = lake.column("total").to_pylist()
    assert (
        totals
        and min(totals) >= Decimal("50")
        and all(t == t.quantize(Decimal("0.01")) for t in totals)
    )


def test_retry_runs_what_failed_or_was_skipped_with_the_last_runs_options(spark, sample):
    boom = sample / "models/marts/boom.sql"
    boom.write_text(
        "{{ config(materialized='table') }} select ${region} as region, cast('x' as int) as n\n"
    )
    (sample / "models/marts/after_boom.sql").write_text(
        "{{ config(materialized='table') }} select region, n + 1 as m from {{ ref('boom') }}\n"
    )
    failed = rivc(sample, "run", "--select", "boom+ +daily_revenue", "--param", "region=us")
    assert failed.exit_code == 1, failed.output
    ran = {n: r["status"] for n, r in results(sample).items()}
    assert ran["model:boom"] == "error" and ran["model:after_boom"] == "skipped"
    assert ran["model:daily_revenue"] == "success"

    boom.write_text("{{ config(materialized='table') }} select ${region} as region, 1 as n\n")
    retried = rivc(sample, "retry")
    assert retried.exit_code == 0, retried.output
    assert {n: r["status"] for n, r in results(sample).items()} == {
        "model:boom": "success",
        "model:after_boom": "success",
    }
    rows = DeltaTable(str(sample / "warehouse/after_boom")).to_pyarrow_table().to_pylist()
    assert rows == [{"region": "us", "m": 2}]  # the failed run's --param, kept

    again = rivc(sample, "retry")
    assert again.exit_code == 0 and "nothing to retry" in again.output
    last = last_run(sample)
    assert last["args"]["params"] == {"region": "us"}
    (sample / "target/run_results.json").unlink()
    missing = rivc(sample, "retry")
    assert missing.exit_code == 2 and "there was no run" in missing.output


def test_a_pull_request_builds_what_it_changed_and_what_reads_it(spark, sample, tmp_path):
    """The CI flow: production's target/ is the state; a fresh clone of a branch changes one
    model's SQL and another's layout only; `build --select state:modified+ --defer` builds the
    first and what reads it, reading the unchanged parents from production's tables."""
    import shutil

    assert rivc(sample, "run").exit_code == 0  # production
    prod = str(sample / "target")
    clone = tmp_path / "clone"
    shutil.copytree(
        sample, clone, ignore=shutil.ignore_patterns("warehouse", "output", ".rivc", "target")
    )
    daily = clone / "models/marts/daily_revenue.sql"
    daily.write_text(daily.read_text().replace("count(*)", "count(distinct customer_id)"))
    customers = clone / "models/marts/customer_orders.sql"
    customers.write_text("-- reformatted\n" + customers.read_text().replace("    ", "\t"))
    listed = rivc(clone, "ls", "--select", "state:modified", "--state", prod)
    assert listed.output.split() == ["daily_revenue", "revenue_is_not_negative"], listed.output

    linted = rivc(clone, "lint", "--state", prod)  # the console sink's `orders` changes meaning
    assert linted.exit_code == 1 and "column orders of model daily_revenue was redefined" in (
        linted.output
    )
    built = rivc(clone, "build", "--select", "state:modified+", "--defer", "--state", prod)
    assert built.exit_code == 0, built.output
    assert set(results(clone)) == {
        "model:daily_revenue",
        "sink:daily_revenue_console",
        "test:revenue_is_not_negative",
    }
    assert not (clone / "warehouse/orders_enriched").exists()  # read from production's
    orders = DeltaTable(str(sample / "warehouse/orders_enriched")).to_pyarrow_table().to_pylist()
    customers_by_day: dict = {}
    for o in orders:
        customers_by_day.setdefault(o["order_date"], set()).add(o["customer_id"])
    got = DeltaTable(str(clone / "warehouse/daily_revenue")).to_pyarrow_table().to_pylist()
    assert {r["order_date"]: r["orders"] for r in got} == {
        d: len(c) for d, c in customers_by_day.items()
    }
    assert (
        rivc(clone, "ls", "--select", "state:modified", "--state", str(clone / "target")).output
        == ""
    )
    unselected = rivc(clone, "build", "--select", "daily_revenue", "--defer")
    assert unselected.exit_code == 2 and "give --state DIR" in unselected.output


def test_show_previews_rows(spark, sample):
    result = rivc(sample, "show", "stg_users", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert "customer_id" in result.output
    assert "example.com" in result.output
    assert not (sample / "warehouse").exists()  # a preview writes nothing


def test_show_of_a_built_table_needs_no_jvm(spark, sample, tmp_path):
    import os
    import subprocess
    import sys

    built = rivc(sample, "run", "--select", "+customer_orders_files", "+orders_lake")
    assert built.exit_code == 0, built.output
    nojava = tmp_path / "bin"  # a PATH without java: starting Spark would fail with exit 2
    nojava.mkdir()
    (nojava / "rivc").symlink_to(Path(sys.executable).parent / "rivc")
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(nojava)

    def show(node: str) -> str:
        shown = subprocess.run(
            [str(nojava / "rivc"), "show", node, "--limit", "3"],
            cwd=sample,
            env=env,
            capture_output=True,
            text=True,
        )
        assert shown.returncode == 0, shown.stdout + shown.stderr
        rows = [line for line in shown.stdout.splitlines() if "│" in line]
        # a wide cell wraps onto lines whose first cell is blank: count rows by the first cell
        assert len([line for line in rows if line.split("│")[0].strip()]) == 3, shown.stdout
        return shown.stdout

    assert "customer_id" in (text := show("customer_orders")) and "segment" in text
    # a sink shows what it delivered: its Delta table, its Parquet files
    lake = DeltaTable(str(sample / "output/delta/orders")).to_pyarrow_table()
    header = show("orders_lake").splitlines()[0]
    assert all(name in header for name in lake.column_names), header
    assert "segment" in show("customer_orders_files")


def test_a_failed_run_posts_one_message_to_the_chat_webhook(make_project, monkeypatch):
    """profiles.yml `notify:` posts one message per failed run in Slack's format, naming each
    failed node with its error (a local receiver here); a run that succeeds posts nothing; a
    hook that refuses is a warning that shows the hook's host, never its secret path."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    posted: list[dict] = []
    status = [200]

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            posted.append({"path": self.path, **json.loads(body)})
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_port}/services/T0/B0/s3cretHookPath"
    monkeypatch.setenv("CHAT_HOOK", hook)
    root = make_project(
        {
            "models/boom.sql": "{{ config(materialized='table') }} select cast('x' as int) as n",
            "profiles.yml": "default:\n  notify: {url_env: CHAT_HOOK}\n",
        }
    )
    try:
        failed = rivc(root, "run")
        assert failed.exit_code == 1
        (one,) = posted
        assert one["path"] == "/services/T0/B0/s3cretHookPath"
        lines = one["text"].splitlines()
        assert lines[0].startswith("rivc run in t failed: 1 of ")
        assert lines[1].startswith("• model:boom: error: ") and "CAST_INVALID_INPUT" in lines[1]

        (root / "models/boom.sql").write_text("{{ config(materialized='table') }} select 1 as n")
        assert rivc(root, "run").exit_code == 0
        assert len(posted) == 1  # nothing to say

        (root / "models/boom.sql").write_text(
            "{{ config(materialized='table') }} select cast('y' as int) as n"
        )
        status[0] = 500
        refused = rivc(root, "run", "--select", "boom")
        assert refused.exit_code == 1 and len(posted) == 2
        assert "notify: posting to http://127.0.0.1" in refused.output
        assert "s3cretHookPath" not in refused.output
    finally:
        server.shutdown()
        server.server_close()
