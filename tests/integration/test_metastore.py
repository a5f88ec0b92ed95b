"""A dbt project's tables in a real Hive metastore under dbt-spark's names (adapters/lake/
metastore.py), read by name through the Spark Thrift Server with a HiveServer2 client (beeline,
both from the jars PySpark ships): tests/fixtures/dbt_names (per-folder schemas, config()'s
schema and alias, the project's own naming macros, a version, two snapshots, a seed) and a
partitioned incremental model whose partition values hold glob characters and a model of edge
values. The names expected are dbt-core's (`dbt parse`), the rows deltalake's reading of the
same Delta tables. A run killed between a commit and the naming leaves the name on the snapshot
before; the next run moves it; `rivc maintain` compacts and VACUUMs without losing a row. The
runs share the project's warm server (started with the metastore); the embedded metastore's
test runs in a process's own Spark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

import pyspark
import pytest
from deltalake import DeltaTable

from rivc_testing import DBT_NAMES as FIXTURE
from rivc_testing import dbt_parse, free_port, hive_metastore, listening, run_rivc

pytestmark = pytest.mark.integration

SPARK_HOME = Path(pyspark.__file__).parent
STORED = {"table", "incremental", "seed", "snapshot"}

PARTED = """{{ config(materialized='incremental', unique_key='id', partition_by=['kind']) }}
select id, name, case when id % 2 = 0 then 'even, odd {x}' else 'o d%d*?' end as kind
from {{ ref('people') }}
{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}
"""

EDGES = """select 1 as id, cast(12345678901234.567 as decimal(17,3)) as amount,
  timestamp'1969-12-31 23:59:59.999999' as at, date'0001-01-01' as day, 'tab\there ''q'' é' as text,
  cast('NaN' as double) as f, cast('99999999999999999999999999999999999999' as decimal(38,0)) as big
union all
select 2, cast(null as decimal(17,3)), cast(null as timestamp), cast(null as date),
  cast(null as string), cast(null as double), cast(null as decimal(38,0))
union all
select 3, cast(-0.001 as decimal(17,3)), timestamp'9999-12-31 23:59:59.999999', date'9999-12-31',
  'NULL', cast('Infinity' as double), cast('-99999999999999999999999999999999999999' as decimal(38,0))
union all
select 4, 0, timestamp'2024-03-10 02:30:00', date'1970-01-01', '', cast('-Infinity' as double), 0
"""


def test_a_dbt_projects_tables_are_read_by_their_dbt_names_through_the_thrift_server(tmp_path):
    root = tmp_path / "names"
    shutil.copytree(FIXTURE, root)
    (root / "models/marts/parted.sql").write_text(PARTED)
    (root / "models/edges.sql").write_text(EDGES)
    with (
        ThreadPoolExecutor(1) as pool,
        hive_metastore(tmp_path / "hms") as uri,
        warm_server_stopped(root),
    ):
        parsed = pool.submit(dbt_parse, tmp_path, "analytics", "dev", root)  # beside rivc's build
        (root / "profiles.yml").write_text(
            "names:\n  target: dev\n  outputs:\n    dev: {type: spark, method: session, "
            f"schema: analytics, spark: {{master: 'local[1]', metastore: '{uri}', "
            "server: auto}}\n"  # the runs share the warm server, which has the metastore too
        )
        done = run_rivc(root, None, "build")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        manifest = parsed.result()
        stored = {
            n["name"] + (f"_v{n['version']}" if n.get("version") else ""): (n["schema"], n["alias"])
            for n in manifest["nodes"].values()
            if n["resource_type"] in ("model", "seed", "snapshot")
            and n["config"]["materialized"] in STORED
        }
        assert {"parted", "edges", "ledger", "accounts_v1", "people", "people_history"} <= set(
            stored
        )
        views = {
            n["name"]: (n["schema"], n["alias"])
            for n in manifest["nodes"].values()
            if n["resource_type"] == "model" and n["config"]["materialized"] == "view"
        }
        assert views == {"stg_people": ("analytics_staging", "stg_people")}

        with thrift_server(tmp_path, uri) as port:
            schemas = sorted({s for s, _ in [*stored.values(), *views.values()]})
            listed = beeline(port, [f"SHOW TABLES IN {s}" for s in schemas])
            names = {(row[0], row[1]) for rows in listed for row in rows}
            assert names == set(stored.values()) | set(views.values())
            # the view reads its parent by its name there: the seed's rows
            (view_rows,) = beeline(port, ["SELECT id, name FROM analytics_staging.stg_people"])
            assert sorted(view_rows) == [["1", "Ann"], ["2", "Bo"]]

            counts = beeline(port, [f"SELECT count(*) FROM {s}.{a}" for s, a in stored.values()])
            for (name, _), rows in zip(stored.items(), counts, strict=True):
                assert int(rows[0][0]) == delta_rows(root, name), name

            s, a = stored["edges"]
            (edges,) = beeline(
                port,
                [
                    f"SELECT id, cast(amount as string), cast(at as string), cast(day as string), "
                    f"coalesce(hex(encode(text, 'UTF-8')), 'NULL'), cast(f as string), "
                    f"cast(big as string) FROM {s}.{a} ORDER BY id"
                ],
            )
            assert edges == [
                [
                    "1",
                    "12345678901234.567",
                    "1969-12-31 23:59:59.999999",
                    "0001-01-01",
                    "tab\there 'q' é".encode().hex().upper(),
                    "NaN",
                    "9" * 38,
                ],
                ["2", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL"],
                [
                    "3",
                    "-0.001",
                    "9999-12-31 23:59:59.999999",
                    "9999-12-31",
                    b"NULL".hex().upper(),  # the text NULL, not a NULL
                    "Infinity",
                    "-" + "9" * 38,
                ],
                ["4", "0.000", "2024-03-10 02:30:00", "1970-01-01", "", "-Infinity", "0"],
            ]
            s, a = stored["parted"]

            def parted() -> tuple[list[list[str]], set[str]]:
                """parted's rows by its name, and the files they were read from."""
                time.sleep(2)  # the server's metadata cache (1 s)
                rows, files = beeline(
                    port,
                    [
                        f"SELECT id, kind FROM {s}.{a} ORDER BY id",
                        f"SELECT DISTINCT input_file_name() FROM {s}.{a}",
                    ],
                )
                return rows, {unquote(f[0]).removeprefix("file://") for f in files}

            two = [["1", "o d%d*?"], ["2", "even, odd {x}"]]
            assert parted() == (two, snapshot(root, "parted"))

            # a new row of the seed, and a run killed after parted's commit, before its name:
            # the name stays on the snapshot before, whole
            seed = root / "seeds/people.csv"
            seed.write_text(seed.read_text() + "3,Cy,2024-05-06\n")
            old = snapshot(root, "parted")
            killed = run_rivc(root, "after-commit:parted", "build", "--select", "people", "parted")
            assert killed.returncode != 0
            assert delta_rows(root, "parted") == 3  # committed
            assert parted() == (two, old)
            again = run_rivc(root, None, "build", "--select", "people", "parted")
            assert again.returncode == 0, again.stdout[-3000:]
            three = [*two, ["3", "o d%d*?"]]
            assert parted() == (three, snapshot(root, "parted"))

            # maintain compacts: the name moves to the new files before VACUUM may delete the
            # old ones (a week on; deleted here by hand, as that VACUUM would)
            for n in (4, 5):
                seed.write_text(seed.read_text() + f"{n},P{n},2024-05-0{n}\n")
                more = run_rivc(root, None, "build", "--select", "people", "parted")
                assert more.returncode == 0, more.stdout[-3000:]
            before = snapshot(root, "parted")
            kept = run_rivc(root, None, "maintain", "--select", "parted")
            assert kept.returncode == 0, kept.stdout[-3000:] + kept.stderr[-3000:]
            after = snapshot(root, "parted")
            assert not before & after
            for f in before:
                Path(f).unlink()
            rows, files = parted()
            assert [r[0] for r in rows] == ["1", "2", "3", "4", "5"] and files == after

            # a table of a node's name that rivc did not make is left alone; the node fails
            s, a = stored["top_level"]
            other = tmp_path / "other"
            beeline(
                port,
                [
                    f"DROP TABLE {s}.{a}",
                    f"CREATE TABLE {s}.{a} (id int) USING parquet LOCATION '{other}'",
                    f"INSERT INTO {s}.{a} VALUES (42)",
                ],
            )
            clash = run_rivc(root, None, "run", "--select", "top_level")
            assert clash.returncode == 1
            assert f"{s}.{a} in Spark's catalog is not this warehouse's" in clash.stdout
            assert beeline(port, [f"SELECT * FROM {s}.{a}"]) == [[["42"]]]

            # a view model made a table, and a view again: the name follows each time
            stg = root / "models/staging/stg_people.sql"
            text = stg.read_text()
            kinds = []
            for config in ("{{ config(materialized='table') }}\n", ""):
                stg.write_text(config + text)
                again = run_rivc(root, None, "run", "--select", "stg_people")
                assert again.returncode == 0, again.stdout[-3000:]
                time.sleep(2)
                described, rows = beeline(
                    port,
                    [
                        "DESCRIBE TABLE EXTENDED analytics_staging.stg_people",
                        "SELECT count(*) FROM analytics_staging.stg_people",
                    ],
                )
                kinds.append(next(r[1] for r in described if r[0] == "Type"))
                assert rows == [["5"]]
            assert kinds == ["EXTERNAL", "VIEW"]


def test_an_embedded_metastore_names_the_tables_for_the_next_spark(tmp_path):
    """`metastore: embedded`: Derby in .rivc/metastore, where a Spark started after the run
    (with the same two settings) reads the seed and a model by their dbt names (the project's
    macros put a seed in its custom schema as given)."""
    root = tmp_path / "names"
    shutil.copytree(FIXTURE, root)
    (root / "profiles.yml").write_text(
        "names:\n  target: dev\n  outputs:\n    dev: {type: spark, method: session, "
        "schema: analytics, spark: {master: 'local[1]', metastore: embedded}}\n"
    )
    done = run_rivc(root, None, "build", "--select", "people", "ledger")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    derby = root / ".rivc" / "metastore"
    assert (derby / "service.properties").exists()
    read = subprocess.run(
        [sys.executable, "-c", READ_BY_NAME, str(derby), str(tmp_path / "spark-warehouse")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert read.returncode == 0, read.stderr[-3000:]
    assert not (root / "derby.log").exists() and (root / ".rivc" / "derby.log").exists()
    assert json.loads(read.stdout.splitlines()[-1]) == {
        "raw.people": [[1, "Ann"], [2, "Bo"]],
        "analytics.general_ledger": [[1, 0], [2, 0]],
    }


READ_BY_NAME = """
import json, sys
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.sql.catalogImplementation", "hive")
    .config("spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={sys.argv[1]};create=false")
    .config("spark.sql.warehouse.dir", sys.argv[2])
    .getOrCreate()
)
out = {
    name: [list(r)[:2] for r in spark.table(name).orderBy("id").collect()]
    for name in ("raw.people", "analytics.general_ledger")
}
print(json.dumps(out))
"""


@contextmanager
def warm_server_stopped(root: Path) -> Iterator[None]:
    """The project's warm server (`server: auto` starts it) stopped on the way out."""
    try:
        yield
    finally:
        run_rivc(root, None, "server", "stop")


def snapshot(root: Path, name: str) -> set[str]:
    """The files of the Delta table's current snapshot (deltalake)."""
    return {
        f.removeprefix("file://") for f in DeltaTable(str(root / "warehouse" / name)).file_uris()
    }


def delta_rows(root: Path, name: str) -> int:
    return int(DeltaTable(str(root / "warehouse" / name)).to_pyarrow_table().num_rows)


@contextmanager
def thrift_server(folder: Path, metastore: str) -> Iterator[int]:
    """The Spark Thrift Server (HiveServer2) of PySpark's jars on the metastore, as a BI tool
    reaches it; its metadata cache lives one second, so a name moved by another writer is
    seen at once (docs/dbt.md)."""
    port = free_port()
    conf = {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": metastore,
        "spark.hadoop.hive.server2.thrift.port": str(port),
        "spark.hadoop.hive.server2.thrift.bind.host": "127.0.0.1",
        "spark.sql.metadataCacheTTLSeconds": "1",
        "spark.sql.warehouse.dir": str(folder / "thrift-warehouse"),
        "spark.ui.enabled": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
    }
    args = [str(SPARK_HOME / "bin/spark-submit"), "--master", "local[1]"]
    args += ["--class", "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    log = open(folder / "thrift.log", "wb")  # noqa: SIM115  (closed below)
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME)}
    proc = subprocess.Popen([*args, "spark-internal"], env=env, stdout=log, stderr=log, cwd=folder)
    try:
        listening(port, proc, folder / "thrift.log")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


MARK = "@@"


def beeline(port: int, queries: list[str]) -> list[list[list[str]]]:
    """Each query's rows (tab-separated text, header left out) as beeline prints them."""
    script = "".join(f"{q};\nSELECT '{MARK}' AS `{MARK}`;\n" for q in queries)
    done = subprocess.run(
        [str(SPARK_HOME / "bin/beeline"), "-u", f"jdbc:hive2://127.0.0.1:{port}/"]
        + ["--silent=true", "--outputformat=tsv2", "-e", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return _split(done.stdout, len(queries))


def _split(stdout: str, n: int) -> list[list[list[str]]]:
    """Cut beeline's output at the separator queries: header, rows, then `@@` twice."""
    lines = [line for line in stdout.splitlines() if not line.startswith("0: jdbc:hive2://")]
    out: list[list[list[str]]] = []
    current: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i] == MARK and i + 1 < len(lines) and lines[i + 1] == MARK:
            out.append([line.split("\t") for line in current[1:]])  # less the header
            current = []
            i += 2
            continue
        current.append(lines[i])
        i += 1
    assert len(out) == n, stdout[-3000:]
    return out
