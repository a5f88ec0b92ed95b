"""The data plane against a Spark that cannot see rivc's disk: a Spark Connect server in its own
mount namespace (a fresh tmpfs hides the folder the projects live in), the warehouse and every
sink on S3 (a moto server). The same project run on the local Spark must give the same tables."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable
from rivc_dbs import database
from rivc_remote import (
    hidden_popen,
    run,
    s3_fileio,
    s3_fs,
    s3_options,
    sample_gives_local_tables,
    sorted_table,
    spark_env,
)

from rivc_testing import S3_KEYS, at_entry, free_port, last_run, rivc, write_files

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root"),
]

PROJECT = {
    "rivc_project.yml": "name: remote_shop\nprofile: default\n",
    "sources/shop.yml": """
sources:
  - name: shop
    connector: datagen
    tables:
      - name: orders
        config: {pattern: orders, max_events: 3000, seed: 42, events_per_second: 0.01}
      - name: users
        config: {pattern: users, max_events: 300, seed: 7}
""",
    "models/stg_orders.sql": "select * from {{ source('shop', 'orders') }}\n",
    "models/orders_enriched.sql": """
{{ config(materialized='incremental', unique_key='order_id') }}
select o.order_id, o.customer_id, u.name as customer_name, o.total, o.status,
       to_date(o.created_at) as order_date, o.created_at
from {{ ref('stg_orders') }} o
left join {{ source('shop', 'users') }} u on u.user_id = o.customer_id
{% if is_incremental() %}
where o.order_id % 3 = 0
{% endif %}
""",
    "models/customer_orders.sql": """
{{ config(materialized='table', partition_by=['status']) }}
select customer_id, status, count(*) as orders, sum(total) as revenue
from {{ ref('orders_enriched') }}
group by customer_id, status
""",
    "sinks/lake.yml": """
sinks:
  - name: orders_lake
    from: orders_enriched
    connector: delta
    config: {table_uri: "${LAKE}/delta/orders", mode: merge, merge_keys: [order_id],
             partition_by: [order_date]}
  - name: customer_files
    from: customer_orders
    connector: files
    config: {path: "${LAKE}/files/customer_orders", format: parquet, mode: overwrite}
  - name: orders_ice
    from: orders_enriched
    connector: iceberg
    config: {catalog: {warehouse: "${LAKE}/ice"}, namespace: shop, table: orders,
             mode: overwrite, partitioning: [{field: order_date, transform: day}]}
  - name: orders_ice_up
    from: orders_enriched
    connector: iceberg
    config: {catalog: {warehouse: "${LAKE}/ice"}, namespace: shop, table: orders_up,
             mode: upsert, key_fields: [order_id],
             partitioning: [{field: order_date, transform: day}]}
""",
}


@pytest.fixture(scope="module")
def connect(hidden: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 whose mount namespace has an empty tmpfs over
    `hidden`: it sees none of the files rivc writes there."""
    port = free_port()
    logs = tmp_path_factory.mktemp("connect-logs")
    env = spark_env(logs)
    from rivc.adapters.spark.session import jdbc_jars

    start = (
        f'"{env["SPARK_HOME"]}/sbin/start-connect-server.sh" '
        f"--master local[2] --jars {','.join(jdbc_jars())} "
        "--conf spark.connect.grpc.binding.address=127.0.0.1 "
        f"--conf spark.connect.grpc.binding.port={port} --conf spark.ui.enabled=false "
        "--conf spark.sql.shuffle.partitions=2 --conf spark.sql.session.timeZone=UTC"
    )
    with (logs / "out.log").open("w") as out:  # the server keeps its own copy of the handle
        server = hidden_popen(hidden, start, env, out)
    import socket

    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                os.killpg(server.pid, signal.SIGKILL)
                raise RuntimeError((logs / "out.log").read_text()[-3000:]) from None
            time.sleep(0.5)
    yield f"sc://127.0.0.1:{port}"
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


def remote_profile(connect: str, s3: str, warehouse: str) -> str:
    """A profile for the Connect server with its warehouse on the moto S3 server."""
    return f"""
default:
  spark: {{remote: "{connect}"}}
  warehouse: {warehouse}
  storage: {{AWS_ENDPOINT_URL: "{s3}", AWS_ALLOW_HTTP: "true"}}
"""


def project(root: Path, profile: str) -> Path:
    return write_files(root, {**PROJECT, "profiles.yml": profile})


def test_the_same_project_on_a_remote_spark_and_s3_gives_the_local_tables(
    tmp_path: Path,
    hidden: Path,
    s3: str,
    connect: str,
    spark: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow.dataset as pads

    remote = project(hidden / "remote", remote_profile(connect, s3, "s3://lake/warehouse"))
    local = project(
        tmp_path / "local",
        'default:\n  spark: {master: "local[2]", conf: {spark.sql.shuffle.partitions: "2"}}\n',
    )
    lake = "s3://lake/sinks"
    remote_env = {**S3_KEYS, "LAKE": lake}
    monkeypatch.setenv("LAKE", str(tmp_path / "local-lake"))

    # the server cannot see the project: reading one of its files fails there
    probe = (
        "from pyspark.sql import SparkSession;"
        f"s=SparkSession.builder.remote('{connect}').getOrCreate();"
        f"print(s.read.text('{remote / 'rivc_project.yml'}').count())"
    )
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert seen.returncode != 0 and "PATH_NOT_FOUND" in seen.stderr + seen.stdout

    for _ in range(2):  # the second run merges into what the first one built
        run(remote, remote_env, "run")
        done = rivc(local, "run")  # on the test session's local Spark
        assert done.exit_code == 0, done.output

    options = s3_options(s3)
    pairs = [
        ("s3://lake/warehouse/orders_enriched", local / "warehouse/orders_enriched", ["order_id"]),
        (
            "s3://lake/warehouse/customer_orders",
            local / "warehouse/customer_orders",
            ["customer_id", "status"],
        ),
        (f"{lake}/delta/orders", tmp_path / "local-lake/delta/orders", ["order_id"]),
    ]
    for uri, path, keys in pairs:
        far = DeltaTable(uri, storage_options=options)
        near = DeltaTable(str(path))
        assert far.metadata().partition_columns == near.metadata().partition_columns
        got = sorted_table(far.to_pyarrow_table(), keys)
        want = sorted_table(near.to_pyarrow_table(), keys)
        assert got.num_rows > 0 and got.equals(want), uri
    # the incremental model merged on the second run: one row per order, the rewrite recorded
    assert DeltaTable(f"{lake}/delta/orders", storage_options=options).version() >= 1
    orders = DeltaTable("s3://lake/warehouse/orders_enriched", storage_options=options)
    assert orders.to_pyarrow_table().num_rows == 3000
    history = [h["operation"] for h in orders.history()]
    assert len(history) >= 2

    fs = s3_fs(s3)
    listed = [
        f
        for f in fs.get_file_info(pafs.FileSelector("lake/sinks/files/customer_orders"))
        if f.base_name != "_rivc"  # the commit markers (docs/sinks.md)
    ]
    # written by the server's tasks (one name per task), not staged through rivc
    assert listed and all(
        re.fullmatch(r"batch-\d{6}-part-\d{5}-\d{4}\.parquet", f.base_name) for f in listed
    ), [f.base_name for f in listed]
    assert not fs.get_file_info(
        pafs.FileSelector("lake/warehouse/_rivc_staging", allow_not_found=True)
    )
    far_files = pads.dataset("lake/sinks/files/customer_orders", filesystem=fs).to_table()
    near_files = pads.dataset(str(tmp_path / "local-lake/files/customer_orders")).to_table()
    keys = ["customer_id", "status"]
    assert sorted_table(far_files, keys).equals(sorted_table(near_files, keys))
    # Iceberg: the server's tasks wrote the files on S3, rivc committed them (add_files)
    from pyiceberg.catalog.sql import SqlCatalog

    def iceberg(root: Path, name: str = "shop.orders", **props: str) -> pa.Table:
        home = root / ".rivc/iceberg"
        catalog = SqlCatalog("rivc", uri=f"sqlite:///{home / 'catalog.db'}", **props)
        return catalog.load_table(name)

    on_s3 = s3_fileio(s3)
    far_ice = iceberg(remote, **on_s3)
    data_files = [t.file.file_path for t in far_ice.scan().plan_files()]
    assert data_files and all(
        p.startswith(f"{lake}/ice/") and "/data/rivc-batch-" in p for p in data_files
    ), data_files
    got = sorted_table(far_ice.scan().to_arrow(), ["order_id"])
    want = sorted_table(iceberg(local).scan().to_arrow(), ["order_id"])
    assert got.num_rows == 3000 and got.equals(want)
    # the upsert: the second batch rewrote, on the server, the files its keys can be in
    far_up = iceberg(remote, "shop.orders_up", **on_s3)
    assert far_up.current_snapshot().summary.operation.value == "overwrite"
    assert all("/data/rivc-batch-" in t.file.file_path for t in far_up.scan().plan_files())
    got = sorted_table(far_up.scan().to_arrow(), ["order_id"])
    want = sorted_table(iceberg(local, "shop.orders_up").scan().to_arrow(), ["order_id"])
    assert got.num_rows == 3000 and got.equals(want)
    # nothing was staged in the project folder: the server could not have read it
    assert not list((remote / ".rivc").glob("staging/*"))

    # the tables on S3 are sources of another project, read by the server's tasks
    catalog = f"sqlite:///{remote / '.rivc/iceberg/catalog.db'}"
    reader = write_files(
        hidden / "reader",
        {
            "rivc_project.yml": "name: reader\n",
            "profiles.yml": remote_profile(connect, s3, "s3://lake/reader"),
            "sources/lake.yml": f"""
sources:
  - name: lake
    connector: delta
    tables:
      - {{name: orders, config: {{table_uri: "{lake}/delta/orders"}}}}
  - name: ice
    connector: iceberg
    tables:
      - {{name: orders, config: {{catalog: {{uri: "{catalog}", warehouse: "{lake}/ice"}},
         namespace: shop, table: orders_up}}}}
""",
            "models/both.sql": "{{ config(materialized='table') }}\n"
            "select d.order_id, d.total as delta_total, i.total as iceberg_total\n"
            "from {{ source('lake', 'orders') }} d\n"
            "full join {{ source('ice', 'orders') }} i on i.order_id = d.order_id\n",
        },
    )
    run(reader, S3_KEYS, "run")
    both = DeltaTable("s3://lake/reader/both", storage_options=options).to_pyarrow_table()
    assert both.num_rows == 3000 and both.column("order_id").null_count == 0
    assert both.column("delta_total").to_pylist() == both.column("iceberg_total").to_pylist()


def test_the_sample_project_on_a_remote_spark_and_s3_gives_the_local_tables(
    tmp_path: Path,
    hidden: Path,
    s3: str,
    connect: str,
    spark: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sample_project as it ships, run and built with `--target lake` (its Spark Connect output):
    what a local run and build give (rivc_remote.sample_gives_local_tables)."""
    sample_gives_local_tables(
        hidden, tmp_path, s3, "lake", {"SPARK_REMOTE": connect}, ("run", "build"), monkeypatch
    )


def test_relational_sources_stage_where_a_remote_spark_reaches(
    hidden: Path, s3: str, connect: str
) -> None:
    """Each extraction path (COPY in rivc's process, COPY in the server's tasks, JDBC) stages its
    copy under the warehouse on S3: the server reads it, and no row is lost or changed."""
    import decimal
    from datetime import UTC, datetime

    options = s3_options(s3)

    def lake(name: str) -> list[dict[str, object]]:
        table = DeltaTable(f"s3://lake/rel/{name}", storage_options=options).to_pyarrow_table()
        return sorted(table.to_pylist(), key=lambda r: r["id"])

    with database("postgres") as pg, database("mysql") as my:
        pg.execute(
            "CREATE TABLE orders (id int primary key, amount numeric(12,2), note text, "
            "at timestamptz)"
        )
        notes = ["", "NULL", None, 'a "quoted", text\nwith a newline']
        orders = [
            (
                i,
                decimal.Decimal(f"{i}.{i % 100:02d}"),
                notes[i % 4],
                datetime(2026, 1, 1, tzinfo=UTC),
            )
            for i in range(1, 201)
        ]
        pg.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s)", orders)
        my.execute("CREATE TABLE items (id int primary key, name varchar(20), n bigint)")
        items = [(i, f"item {i}", 2**62 + i) for i in range(1, 51)]
        my.executemany("INSERT INTO items VALUES (%s, %s, %s)", items)
        root = write_files(
            hidden / "rel",
            {
                "rivc_project.yml": "name: rel\n",
                "profiles.yml": remote_profile(connect, s3, "s3://lake/rel")
                + f"""  connections:
    pg: {{type: postgres, host: 127.0.0.1, user: postgres, database: {pg.name}}}
    my: {{type: mysql, host: 127.0.0.1, user: root, database: {my.name}}}
""",
                "sources/db.yml": """
sources:
  - name: pg
    connector: postgres
    connection: pg
    tables:
      - {name: orders, table: orders, mode: incremental, cursor_column: id, unique_key: id}
      - {name: chunks, table: orders, mode: chunked, chunk_column: id, chunk_size: 50,
         parallel: 2}
  - name: my
    connector: mysql
    connection: my
    tables:
      - {name: items, table: items, mode: incremental, cursor_column: id, unique_key: id}
""",
                "models/orders.sql": "{{ config(materialized='incremental', unique_key='id') }}\n"
                "select * from {{ source('pg', 'orders') }}\n",
                "models/chunks.sql": "{{ config(materialized='table') }}\n"
                "select * from {{ source('pg', 'chunks') }}\n",
                "models/items.sql": "{{ config(materialized='incremental', unique_key='id') }}\n"
                "select * from {{ source('my', 'items') }}\n",
            },
        )
        first = run(root, S3_KEYS, "run")
        vias = {
            "pg.orders": "via COPY",
            "pg.chunks": "via COPY in Spark",
            "my.items": "via JDBC",
        }
        for name, via in vias.items():
            assert re.search(rf"source:{re.escape(name)} .* {via}, ", first.stdout), first.stdout
        want = [{"id": i, "amount": a, "note": n, "at": t} for i, a, n, t in orders]
        assert lake("orders") == want and lake("chunks") == want
        assert lake("items") == [{"id": i, "name": s, "n": n} for i, s, n in items]

        pg.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s)", [(201, 1, "new", None)])
        my.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(51, "new", -(2**63))])
        again = run(root, S3_KEYS, "run")
        assert "pg.orders" in again.stdout
        assert lake("orders")[-1] == {
            "id": 201,
            "amount": decimal.Decimal("1.00"),
            "note": "new",
            "at": None,
        }
        assert len(lake("orders")) == 201 and len(lake("chunks")) == 201
        assert lake("items")[-1] == {"id": 51, "name": "new", "n": -(2**63)}

    fs = s3_fs(s3)
    # every staged copy went once its cursor advanced; none was ever in the project folder
    left = fs.get_file_info(
        pafs.FileSelector("lake/rel/_rivc_staging", recursive=True, allow_not_found=True)
    )
    assert not [f.path for f in left if f.type == pafs.FileType.File]
    assert not (root / ".rivc" / "extract").exists()


def test_a_killed_run_leaves_no_operation_running_on_the_server(
    hidden: Path, s3: str, connect: str
) -> None:
    """kill -9 of rivc does not stop the server's job; the next run stops it before it writes,
    so the killed job never lands a file (its tasks would write theirs 40 s in)."""
    import sqlite3

    slow = (
        "{{ config(materialized='table') }}\n"
        "select id, reflect('java.lang.Thread', 'sleep', cast(40000 as bigint)) as slept\n"
        "from range(0, 2, 1, 2)\n"
    )
    root = write_files(
        hidden / "kill",
        {
            "rivc_project.yml": "name: kill\n",
            "profiles.yml": remote_profile(connect, s3, "s3://lake/kill"),
            "models/slow.sql": slow,
        },
    )
    killed = subprocess.Popen(
        [sys.executable, "-m", "rivc.adapters.cli", "run", "--project-dir", str(root)],
        env={**os.environ, **S3_KEYS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    session = None
    while session is None and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.5)
        try:
            with sqlite3.connect(root / ".rivc/state.db") as db:
                row = db.execute(
                    "SELECT spark_session FROM runs WHERE status = 'running'"
                ).fetchone()
            session = row[0] if row else None
        except sqlite3.Error:
            pass  # not created yet
    assert session, "the run never reached Spark"
    time.sleep(10)  # the model's job runs: its two tasks sleep for 40 s
    killed.kill()
    killed.wait()
    killed_at = time.monotonic()

    (root / "models/slow.sql").write_text("{{ config(materialized='table') }}\nselect 1 as id\n")
    done = run(root, S3_KEYS, "run")
    said = done.stdout + done.stderr
    assert re.search(
        r"was killed: stopped [1-9]\d* of its Spark operations? still running", said
    ), said

    time.sleep(max(0.0, 50 - (time.monotonic() - killed_at)))  # past the killed tasks' sleep
    options = s3_options(s3)
    table = DeltaTable("s3://lake/kill/slow", storage_options=options)
    assert table.to_pyarrow_table().to_pylist() == [{"id": 1}]
    fs = s3_fs(s3)
    listed = fs.get_file_info(pafs.FileSelector("lake/kill/slow", recursive=True))
    on_s3 = {f"s3://{f.path}" for f in listed if f.path.endswith(".parquet")}
    assert on_s3 == set(table.file_uris())  # nothing of the killed job's


def test_edge_values_stage_on_s3_exactly_or_are_refused_by_name(
    hidden: Path, s3: str, connect: str
) -> None:
    """The type matrix of test_types (NaN, infinities, -0, year 1 and 9999, 38-digit decimals,
    money, intervals...) through each extraction path when the copy is staged on S3 for a remote
    Spark: every value arrives as PostgreSQL returns it, read back with deltalake and pyarrow. A
    value with no exact Spark type (an infinite date) is refused by its column, and its sink
    writes nothing."""

    import pyarrow.dataset as pads
    from rivc_types import PG_EXPECTED, PG_ROWS, PG_TABLE, READERS, compare, expected_rows

    options = s3_options(s3)
    fs = s3_fs(s3)
    with database("postgres") as pg:
        pg.execute(PG_TABLE, "INSERT INTO types VALUES " + ", ".join(PG_ROWS))
        pg.execute("CREATE TABLE dinf (id int, v date)")
        pg.execute("INSERT INTO dinf VALUES (1, NULL), (2, '-infinity')")
        tables = "".join(
            f"""      - {{name: {reader}, query: "{query}", parallel: {parallel}, chunk_column: id,
         mode: {"chunked" if parallel > 1 else "full"}, chunk_size: 3}}
"""
            for reader, (query, parallel) in READERS.items()
        )
        sinks = "".join(
            f"""  - {{name: {reader}_lake, from: source:pg.{reader}, connector: delta,
     config: {{table_uri: "s3://lake/types/delta/{reader}"}}}}
  - {{name: {reader}_files, from: source:pg.{reader}, connector: files,
     config: {{path: "s3://lake/types/files/{reader}", format: parquet}}}}
"""
            for reader in [*READERS, "dinf"]
        )
        root = write_files(
            hidden / "types",
            {
                "rivc_project.yml": "name: types\n",
                "profiles.yml": remote_profile(connect, s3, "s3://lake/types/warehouse")
                + f"  connections:\n    pg: {{type: postgres, host: 127.0.0.1, user: postgres,"
                f" database: {pg.name}}}\n",
                "sources/db.yml": "sources:\n  - name: pg\n    connector: postgres\n"
                f"    connection: pg\n    tables:\n{tables}"
                '      - {name: dinf, query: "SELECT * FROM dinf"}\n',
                "sinks/out.yml": f"sinks:\n{sinks}",
            },
        )
        done = subprocess.run(
            [sys.executable, "-m", "rivc.adapters.cli", "run", "--project-dir", str(root)],
            env={**os.environ, **S3_KEYS},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
        results = {r["node"]: r for r in last_run(root)["results"]}
        want = expected_rows(pg, PG_EXPECTED)

    vias = {"copy": "via COPY", "copy_spark": "via COPY in Spark", "jdbc": "via JDBC"}
    for reader, via in vias.items():
        message = results[f"source:pg.{reader}"]["message"]
        assert message.endswith(via) or f"{via}," in message, message
        lake = DeltaTable(f"s3://lake/types/delta/{reader}", storage_options=options)
        compare(f"{reader} -> delta on S3", lake.to_pyarrow_table().to_pylist(), want)
        files = pads.dataset(f"lake/types/files/{reader}", filesystem=fs, format="parquet")
        compare(f"{reader} -> parquet on S3", files.to_table().to_pylist(), want)

    refused = results["source:pg.dinf"]
    assert refused["status"] == "error" and "\n" not in refused["error"]
    message = at_entry(refused["error"], "sources/db.yml")
    assert message.startswith("source pg.dinf: column v (date) value '"), refused
    assert "is not a date" in refused["error"]
    for sink in ("sink:dinf_lake", "sink:dinf_files"):
        assert results[sink]["status"] == "skipped"
    written = fs.get_file_info(
        pafs.FileSelector("lake/types/delta/dinf", recursive=True, allow_not_found=True)
    ) + fs.get_file_info(
        pafs.FileSelector("lake/types/files/dinf", recursive=True, allow_not_found=True)
    )
    assert written == []
    assert not (root / ".rivc" / "extract").exists()


# rivc's CLI with its own I/O counters and peak RSS written to stderr as it exits
MEASURED = (
    "import atexit, resource, sys\n"
    "def _report():\n"
    "    io = dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())\n"
    "    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "    sys.stderr.write(f\"\\nRIVC-IO {io['rchar']} {io['wchar']} {rss}\\n\")\n"
    "atexit.register(_report)\n"
    "from rivc.adapters.cli import main\n"
    "sys.argv = ['rivc', *sys.argv[1:]]\n"
    "main()\n"
)


def test_the_rivc_process_carries_no_rows(hidden: Path, s3: str, connect: str) -> None:
    """A table model and a Delta, an Iceberg and a files sink of it, on the hidden Connect
    server and S3, at 200,000 rows and at ten times that: what the rivc process reads (sockets
    included: /proc/self/io rchar), writes and holds stays flat, because only descriptions of
    files come back to it."""
    counters = {}
    for rows in (200_000, 2_000_000):
        root = write_files(
            hidden / f"flat{rows}",
            {
                "rivc_project.yml": "name: flat\n",
                "profiles.yml": remote_profile(connect, s3, f"s3://lake/flat{rows}"),
                "models/big.sql": "{{ config(materialized='table') }}\n"
                "select id, id % 97 as grp, cast(id * 0.01 as decimal(18,2)) as amount,\n"
                f"       concat('note-', id) as note from range(0, {rows}, 1, 4)\n",
                "sinks/out.yml": f"""
sinks:
  - {{name: d, from: big, connector: delta, config: {{table_uri: "s3://lake/flat{rows}/d"}}}}
  - {{name: i, from: big, connector: iceberg,
     config: {{catalog: {{warehouse: "s3://lake/flat{rows}/ice"}}, namespace: f, table: i}}}}
  - {{name: f, from: big, connector: files,
     config: {{path: "s3://lake/flat{rows}/files", format: parquet}}}}
""",
            },
        )
        done = subprocess.run(
            [sys.executable, "-c", MEASURED, "run", "--project-dir", str(root)],
            env={**os.environ, **S3_KEYS},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert all(re.search(rf"OK sink:{s} ", done.stdout) for s in "dif"), done.stdout
        rchar, wchar, rss_kb = map(int, re.findall(r"RIVC-IO (\d+) (\d+) (\d+)", done.stderr)[-1])
        counters[rows] = (rchar, wchar, rss_kb)
        options = s3_options(s3)
        table = DeltaTable(f"s3://lake/flat{rows}/d", storage_options=options)
        assert table.to_pyarrow_dataset().count_rows() == rows
    (small_r, small_w, small_rss), (big_r, big_w, big_rss) = counters.values()
    # 1.8M more rows of about 40 bytes each would be over 70 MB through the process
    assert big_r - small_r < 8_000_000, counters
    assert big_w - small_w < 8_000_000, counters
    assert big_rss - small_rss < 40_000, counters  # KB
    assert big_r < 100_000_000, counters
    print("rivc process (rchar, wchar, peak RSS KB) by rows:", counters)


STREAM_SINKS = """
sinks:
  - name: d
    from: source:gen.orders
    connector: delta
    config: {table_uri: "${LAKE}/d", mode: append}
    quality:
      - {check: range, column: total, min: 0, max: 100, action: warn}
  - name: i
    from: source:gen.orders
    connector: iceberg
    config: {catalog: {uri: "${ICE_URI:-}", warehouse: "${LAKE}/ice"}, namespace: s, table: i,
             mode: upsert, key_fields: [order_id]}
"""
STREAM_SOURCE = (
    "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
    "      - {name: orders, config: {pattern: orders, stream: true, events_per_second: 0,"
    " max_events: 3000, seed: 3}}\n"
)


def test_a_stream_on_a_server_that_cannot_see_the_project(
    tmp_path: Path,
    hidden: Path,
    s3: str,
    connect: str,
    spark: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A datagen stream into Delta and Iceberg sinks on S3, run by the hidden Connect server:
    its Python worker writes and commits each micro-batch and leaves a receipt beside the
    checkpoint (under the warehouse, on a disk both see), which rivc records; the tables, the
    state store and the quality counts are the local run's, and a replayed micro-batch is
    skipped. The default Iceberg catalog, a SQLite file in .rivc/, is refused there: the
    worker could not open it."""
    from pyiceberg.catalog.sql import SqlCatalog

    shared = tmp_path / "shared"  # the server sees it: the checkpoints live there
    files = {"rivc_project.yml": "name: stream\n", "sources/gen.yml": STREAM_SOURCE}
    remote = write_files(
        hidden / "stream",
        {
            **files,
            "profiles.yml": remote_profile(connect, s3, shared.as_uri()),
            "sinks/out.yml": STREAM_SINKS,
        },
    )
    local = write_files(tmp_path / "local", {**files, "sinks/out.yml": STREAM_SINKS})
    env = {**S3_KEYS, "LAKE": "s3://lake/stream"}
    refused = subprocess.run(
        [sys.executable, "-m", "rivc.adapters.cli", "run", "--select", "sink:i"],
        cwd=remote,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 1
    assert "sink:i: a stream on this Spark commits from the server" in refused.stdout

    options = s3_options(s3)
    on_s3 = s3_fileio(s3)

    def untimed(table: pa.Table) -> pa.Table:  # a stream's events are timed from its start
        return sorted_table(table.drop_columns(["created_at"]), ["order_id"])

    def ice(uri: str, **props: str) -> pa.Table:
        catalog = SqlCatalog("rivc", uri=uri, **props)
        try:
            return catalog.load_table("s.i").scan().to_arrow()
        finally:
            catalog.engine.dispose()  # before the database is dropped

    def batches(root: Path) -> dict[str, tuple[int, int]]:
        with sqlite3.connect(root / ".rivc/state.db") as db:
            rows = db.execute("SELECT sink, count(*), sum(rows) FROM batches GROUP BY sink")
            return {r[0]: (r[1], r[2]) for r in rows}

    def quality(root: Path) -> list[tuple[str, str, str, int]]:
        with sqlite3.connect(root / ".rivc/state.db") as db:
            return db.execute(
                "SELECT sink, check_name, action, sum(rows) FROM quality GROUP BY 1, 2, 3"
            ).fetchall()

    with database("postgres") as pg:
        catalog = f"postgresql+psycopg://postgres@127.0.0.1/{pg.name}"
        env["ICE_URI"] = catalog
        first = run(remote, env, "run")
        assert "sink:d" in first.stdout and "sink:i" in first.stdout
        monkeypatch.setenv("LAKE", str(tmp_path / "local-lake"))
        near = rivc(local, "run")
        assert near.exit_code == 0, near.output

        far_d = DeltaTable("s3://lake/stream/d", storage_options=options)
        got = untimed(far_d.to_pyarrow_table())
        want = untimed(DeltaTable(str(tmp_path / "local-lake/d")).to_pyarrow_table())
        assert got.num_rows == 3000 and got.equals(want)
        near_i = ice(f"sqlite:///{local / '.rivc/iceberg/catalog.db'}")
        assert untimed(ice(catalog, **on_s3)).equals(untimed(near_i))

        # the state store holds what the server's worker committed, as a local run records it
        assert batches(remote) == batches(local) and batches(remote)["sink:d"][1] == 3000
        assert quality(remote) == quality(local) and quality(remote)[0][3] > 0
        left = list((shared / "_rivc_checkpoints").rglob("rivc-receipts/*"))
        assert not left, left  # every receipt recorded, then removed
        assert not (remote / ".rivc/checkpoints").exists()

        # Spark replays a micro-batch whose commit it did not record: the tables skip it
        commits = shared / "_rivc_checkpoints/d/commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(last)).unlink()
        (commits / f".{last}.crc").unlink(missing_ok=True)
        again = run(remote, env, "run")
        assert "replayed and skipped" in again.stdout, again.stdout
        version = DeltaTable("s3://lake/stream/d", storage_options=options).version()
        assert version == far_d.version()
        assert batches(remote)["sink:d"][1] == 3000

        # More events, and the server's worker killed (SIGKILL) right after its Delta commit,
        # before the receipt and Spark's own commit: the rerun replays the batch, the table
        # skips it, and both tables hold every event once, as a local run without a kill does
        more = STREAM_SOURCE.replace("max_events: 3000", "max_events: 4500")
        (remote / "sources/gen.yml").write_text(more)
        (local / "sources/gen.yml").write_text(more)
        killed = subprocess.run(
            [sys.executable, "-m", "rivc.adapters.cli", "run"],
            cwd=remote,
            env={**os.environ, **env, "RIVC_FAULT": "after-commit:d"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == 1, killed.stdout[-2000:]
        grown = DeltaTable("s3://lake/stream/d", storage_options=options)
        assert grown.to_pyarrow_dataset().count_rows() == 4500  # committed, then killed
        rerun = run(remote, env, "run")
        assert "replayed and skipped" in rerun.stdout, rerun.stdout
        near = rivc(local, "run")
        assert near.exit_code == 0, near.output
        final = DeltaTable("s3://lake/stream/d", storage_options=options)
        assert final.version() == grown.version()  # the replay committed nothing
        got = untimed(final.to_pyarrow_table())
        want = untimed(DeltaTable(str(tmp_path / "local-lake/d")).to_pyarrow_table())
        assert got.num_rows == 4500 and got.equals(want)
        near_i = ice(f"sqlite:///{local / '.rivc/iceberg/catalog.db'}")
        assert untimed(ice(catalog, **on_s3)).equals(untimed(near_i))
        assert not list((shared / "_rivc_checkpoints").rglob("rivc-receipts/*"))
