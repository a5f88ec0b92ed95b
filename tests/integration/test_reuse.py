"""A table model whose SQL and inputs are unchanged is reused, decided from its own commit
(adapters/models/inputs.py): a rerun with nothing new starts no Spark, a lost `.rivc/` decides the
same, and anything that changes what the table would hold builds it again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner
from deltalake import DeltaTable

from rivc.adapters.cli import main
from rivc_testing import last_run, rivc, write_files


def results(root: Path) -> dict[str, dict]:
    data = last_run(root)
    return {r["node"]: r for r in data["results"]}


def version(path: Path) -> int:
    return DeltaTable(str(path)).version()


def revenue(table: pa.Table) -> list[tuple]:
    return sorted(
        zip(*(table.column(c).to_pylist() for c in ("customer_id", "revenue")), strict=True)
    )


def without_java(root: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`rivc ARGS` in a process whose PATH has no java: starting Spark would fail it."""
    bin_ = tmp_path / "nojava"
    if not bin_.exists():
        bin_.mkdir()
        (bin_ / "rivc").symlink_to(Path(sys.executable).parent / "rivc")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = str(bin_)
    return subprocess.run(
        [str(bin_ / "rivc"), *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_rerun_with_nothing_new_reuses_the_tables_without_spark(spark, tmp_path):
    root = tmp_path / "shop"
    assert CliRunner().invoke(main, ["init", str(root)]).exit_code == 0
    first = rivc(root, "run")
    assert first.exit_code == 0, first.output
    tables = {n: root / "warehouse" / n for n in ("customer_revenue", "daily_orders")}
    lake = root / "output/delta/customer_revenue"
    before = {n: version(p) for n, p in tables.items()} | {"lake": version(lake)}

    for lost_state in (False, True):
        if lost_state:  # the decision is read from the tables, not from .rivc/
            shutil.rmtree(root / ".rivc")
        again = without_java(root, tmp_path, "run")
        assert again.returncode == 0, again.stdout + again.stderr
        done = results(root)
        for name in tables:
            assert done[f"model:{name}"]["message"].startswith("reused"), done[f"model:{name}"]
        assert done["sink:customer_revenue_delta"]["rows"] == 0
        assert {n: version(p) for n, p in tables.items()} | {"lake": version(lake)} == before

    # a changed param changes the view both tables read: both are built, and the sink delivers
    changed = rivc(root, "run", "--param", "min_total=100")
    assert changed.exit_code == 0, changed.output
    done = results(root)
    assert all(version(p) == before[n] + 1 for n, p in tables.items())
    assert done["sink:customer_revenue_delta"]["rows"] > 0
    model = DeltaTable(str(tables["customer_revenue"])).to_pyarrow_table()
    delivered = DeltaTable(str(lake)).to_pyarrow_table()
    # a merge sink: every customer of the rebuilt model, with its new revenue
    assert set(revenue(model)) <= set(revenue(delivered))
    assert delivered.num_rows == len(set(delivered.column("customer_id").to_pylist()))

    # --full-refresh builds what would be reused
    refreshed = rivc(root, "run", "--full-refresh", "--param", "min_total=100")
    assert refreshed.exit_code == 0, refreshed.output
    assert all(version(p) == before[n] + 2 for n, p in tables.items())


SEED = "id,country\n1,DE\n2,FR\n3,DE\n"


def test_a_table_is_built_again_when_what_it_reads_changes(spark, tmp_path):
    root = write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: p\nprofile: default\n",
            "seeds/people.csv": SEED,
            "models/by_country.sql": "{{ config(materialized='table') }}\n"
            "select country, count(*) as n from {{ ref('people') }} group by country",
            "models/stamped.sql": "{{ config(materialized='table') }}\n"
            "select id, current_date() as seen from {{ ref('people') }}",
            "models/orders.sql": "{{ config(materialized='table') }}\n"
            "select count(*) as n, 'all' as part from {{ source('gen', 'orders') }}",
            "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
            "      - name: orders\n        config: {pattern: orders, max_events: 50, seed: 7}\n",
            "sinks/lake.yml": "sinks:\n  - name: by_country_lake\n    from: by_country\n"
            "    connector: delta\n"
            "    config: {table_uri: out/by_country, mode: merge, merge_keys: [country]}\n",
        },
    )
    first = rivc(root, "build")
    assert first.exit_code == 0, first.output
    built = {n: version(root / "warehouse" / n) for n in ("by_country", "stamped", "orders")}

    assert rivc(root, "build").exit_code == 0
    done = results(root)
    assert done["model:by_country"]["message"].startswith("reused")
    assert done["model:orders"]["message"].startswith("reused")  # datagen: a function of config
    assert not done["model:stamped"]["message"].startswith("reused")  # current_date()
    assert version(root / "warehouse/stamped") == built["stamped"] + 1
    assert done["sink:by_country_lake"]["rows"] == 0

    (root / "seeds/people.csv").write_text(SEED + "4,IT\n5,DE\n")
    third = rivc(root, "build")
    assert third.exit_code == 0, third.output
    done = results(root)
    assert not done["model:by_country"]["message"].startswith("reused")
    assert done["model:orders"]["message"].startswith("reused")
    lake = DeltaTable(str(root / "out/by_country")).to_pyarrow_table().to_pylist()
    assert sorted((r["country"], r["n"]) for r in lake) == [("DE", 3), ("FR", 1), ("IT", 1)]

    # a config that changes the table (its partitioning) builds it too
    model = root / "models/orders.sql"
    model.write_text(model.read_text().replace("'table'", "'table', partition_by=['part']"))
    last = rivc(root, "build")
    assert last.exit_code == 0, last.output
    assert not results(root)["model:orders"]["message"].startswith("reused")
    assert DeltaTable(str(root / "warehouse/orders")).metadata().partition_columns == ["part"]
