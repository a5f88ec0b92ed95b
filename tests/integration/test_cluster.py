"""rivc on a Spark standalone cluster started the way operators start one: a master and two
workers, each a JVM of its own from the installed PySpark, in a mount namespace where an empty
tmpfs hides the folder the projects live in (their executors cannot read rivc's disk). rivc is
the driver in client mode (`master: spark://...`); the warehouse and sinks are on S3 (moto).
A worker is killed with its executor and Python workers while a task of theirs writes: Spark
runs the task again on the other worker, and every table holds every row once; so after rivc,
the driver, is killed, and `rivc maintain` deletes the files no commit names. A postgres-cdc
source feeds merge, scd2 and Iceberg sinks on the cluster, one of them through its generated
job under spark-submit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from rivc_dbs import Db, database
from rivc_remote import (
    Cluster,
    kill_tree,
    run,
    s3_fs,
    s3_options,
    sample_gives_local_tables,
)

from rivc_testing import S3_KEYS, free_port, moto_s3, write_files

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root"),
]


@pytest.fixture(scope="module")
def cluster(hidden: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(hidden, tmp_path_factory.mktemp("cluster"))
    try:
        started.start(workers=2)
        yield started
    finally:
        started.stop()


def test_the_sample_project_on_a_standalone_cluster_gives_the_local_tables(
    tmp_path: Path,
    hidden: Path,
    s3: str,
    cluster: Cluster,
    spark: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sample_project as it ships, built with `--target cluster` (SPARK_MASTER): every table, the
    files sink, the data tests and the console sink are a local build's. The console sink's
    rows come back from executors that cannot write to the project folder."""
    sample_gives_local_tables(
        hidden,
        tmp_path,
        s3,
        "cluster",
        {"SPARK_MASTER": cluster.url},
        ("build",),
        monkeypatch,
        show=False,  # a view read through Spark's tasks: test_remote's; an application less
    )


ROWS = 60_000


def kill_project(root: Path, cluster: Cluster, s3: str, db: Db, ui: int, shared: Path) -> Path:
    return write_files(
        root,
        {
            "rivc_project.yml": "name: kills\n",
            "profiles.yml": f"""
default:
  spark:
    master: "{cluster.url}"
    conf: {{spark.executor.memory: 640m, spark.ui.enabled: "true", spark.ui.port: "{ui}",
           spark.executor.extraJavaOptions: "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
           spark.shuffle.io.maxRetries: "1", spark.shuffle.io.retryWait: "1s"}}
  warehouse: s3://lake/kills
  storage: {{AWS_ENDPOINT_URL: "{s3}", AWS_ALLOW_HTTP: "true"}}
  connections:
    pg: {{type: postgres, host: 127.0.0.1, user: postgres, database: {db.name}}}
""",
            "sources/pg.yml": """
sources:
  - name: pg
    connector: postgres
    connection: pg
    tables:
      - {name: items, table: items, mode: chunked, chunk_column: id, chunk_size: 30000,
         parallel: 2}
""",
            "models/wide.sql": "{{ config(materialized='table') }}\n"
            "select /*+ REPARTITION(6) */ id, body, sha2(body, 256) as h\n"
            "from {{ source('pg', 'items') }}\n",
            "sinks/lake.yml": """
sinks:
  - {name: items_lake, from: wide, connector: delta,
     config: {table_uri: "s3://lake/kills-sink/items", mode: merge, merge_keys: [id]}}
  - {name: items_disk, from: wide, connector: delta,
     config: {table_uri: "{shared}", mode: merge, merge_keys: [id]}}
""".replace("{shared}", shared.as_uri()),
        },
    )


def last_stage(ui: int, node: str) -> tuple[str, dict[str, object], list[dict[str, object]]]:
    """(application, stage, its tasks) of the last stage of a running job of `node` (rivc names
    each node's Spark jobs by their job group), from the driver's REST API; raises LookupError
    while there is none."""

    def get(path: str) -> list[dict[str, object]]:
        url = f"http://127.0.0.1:{ui}/api/v1/applications{path}"
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.load(r)  # type: ignore[no-any-return]

    try:
        (app,) = get("")
        for job in get(f"/{app['id']}/jobs?status=running"):
            if job.get("jobGroup") == node:
                last = max(job["stageIds"])  # type: ignore[type-var]
                for stage in get(f"/{app['id']}/stages/{last}"):
                    at = f"/{app['id']}/stages/{last}/{stage['attemptId']}/taskList?length=500"
                    return str(app["id"]), stage, get(at)
    except (OSError, ValueError, KeyError) as exc:  # the driver is not up, or the job ended
        raise LookupError(node) from exc
    raise LookupError(node)


def running_task(ui: int, node: str) -> tuple[str, str] | None:
    """(application, executor) of a task now running in the last stage of a job of `node`."""
    try:
        app, _, tasks = last_stage(ui, node)
    except LookupError:
        return None
    running = [t["executorId"] for t in tasks if t["status"] == "RUNNING"]
    return (app, str(running[0])) if running else None


def writing(ui: int, node: str) -> bool:
    """Whether the stage of `node` that writes (rivc's task writer) has a task running."""
    try:
        _, stage, tasks = last_stage(ui, node)
    except LookupError:
        return False
    running = any(t["status"] == "RUNNING" for t in tasks)
    return running and "taskwrite.py" in str(stage["name"])


def start_rivc(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rivc.adapters.cli", *args, "--project-dir", str(root)],
        env={**os.environ, **S3_KEYS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def killed_while_writing(
    root: Path, cluster: Cluster, ui: int, nodes: list[str], *args: str
) -> str:
    """`rivc run ARGS` with, for each node of `nodes` (in whatever order they run), the worker
    of an executor that runs a task of the node's write (the last stage of one of its jobs)
    killed and started again. The run must end well all the same; returns its output."""
    rivc = start_rivc(root, "run", *args)
    pending = list(nodes)  # no worker killed yet while a task of theirs ran
    deadline = time.monotonic() + 600
    while pending and rivc.poll() is None and time.monotonic() < deadline:
        hit = None
        for node in pending:
            found = running_task(ui, node)
            if found is not None:
                app, executor = found
                at = [i for i, w in cluster.work.items() if (w / app / executor).is_dir()]
                if at:
                    hit = node, at[0]
                    break
        if hit is None:
            time.sleep(0.05)
            continue
        node, worker = hit
        work = cluster.work[worker]
        cluster.kill_worker(worker)
        cluster.start_worker(worker)
        if cluster.running_tasks(worker, work):  # its log: a task never finished
            pending.remove(node)  # else the task ended just before: the next one
    out, _ = rivc.communicate(timeout=600)
    assert not pending, f"no task of {pending} was hit: {out[-2000:]}"
    assert rivc.returncode == 0, out[-3000:]
    return out


def driver_killed_while_writing(
    root: Path, ui: int, node: str, written: Callable[[], bool]
) -> None:
    """`rivc run` killed with its JVM (the driver) while tasks of `node`'s write run, once
    some of its files are `written`: no commit will name those."""
    rivc = start_rivc(root, "run")
    deadline = time.monotonic() + 600
    while not (writing(ui, node) and written()):
        if rivc.poll() is not None or time.monotonic() > deadline:
            kill_tree(rivc)
            out = rivc.communicate()[0]
            raise AssertionError(f"{node} was never caught mid-write: {out[-3000:]}")
        time.sleep(0.1)
    kill_tree(rivc)
    rivc.communicate()


def unreferenced(s3: str, table: str) -> set[str]:
    """The data files under the Delta table at s3://`table` that no commit in its log adds
    (read from the store and the log's JSON with pyarrow, not with delta-rs)."""
    from urllib.parse import unquote

    import pyarrow.fs as pafs

    fs = s3_fs(s3)
    files = {
        f.path[len(table) + 1 :]
        for f in fs.get_file_info(pafs.FileSelector(table, recursive=True))
        if f.type == pafs.FileType.File and "_delta_log" not in f.path
    }
    added: set[str] = set()
    for f in fs.get_file_info(pafs.FileSelector(f"{table}/_delta_log")):
        if f.path.endswith(".json"):
            with fs.open_input_stream(f.path) as log:
                for line in log.read().decode().splitlines():
                    if "add" in (action := json.loads(line)):
                        added.add(unquote(action["add"]["path"]))
    return files - added


def assert_once(rows: list[dict[str, object]], want: dict[int, str], what: str) -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(want), f"{what}: {len(ids)} rows, {len(set(ids))} ids"
    assert {r["id"]: r["body"] for r in rows} == want, what


def test_killed_workers_and_a_killed_driver_leave_every_row_once(
    hidden: Path, cluster: Cluster, tmp_path: Path
) -> None:
    """A worker SIGKILLed with its executor and Python workers while one of its tasks writes:
    an extraction's landing batch (COPY in Spark's tasks), a model's table (its tasks read the
    shuffle the dead executor held), a Delta merge sink's batch rewriting the files its keys are
    in, on S3 (rivc's task writer) and in a `file://` folder every process mounts (Spark's own
    writer). Spark runs the lost tasks again on the other worker or the restarted one; every
    table holds each row once, with its values, and reads whole (no commit names a missing
    file). Then rivc itself, the driver, is killed while the model's tasks write, after some of
    them wrote their files: the rerun delivers each row once, and `rivc maintain` deletes every file
    no commit names (the store dates its objects a week back, past the retention)."""
    import hashlib

    def table(uri: str) -> list[dict[str, object]]:
        return DeltaTable(uri, storage_options=s3_options(s3)).to_pyarrow_table().to_pylist()

    tables = {"landing": "lake/kills/_rivc/landing/pg.items", "wide": "lake/kills/wide"}
    tables["items_lake"] = "lake/kills-sink/items"

    def check(want: dict[int, str]) -> None:
        landing = table(f"s3://{tables['landing']}")
        latest = max(r["_rivc_batch"] for r in landing)
        assert_once([r for r in landing if r["_rivc_batch"] == latest], want, "landing")
        wide = table(f"s3://{tables['wide']}")
        assert_once(wide, want, "wide")
        assert all(r["h"] == hashlib.sha256(str(r["body"]).encode()).hexdigest() for r in wide)
        assert_once(table(f"s3://{tables['items_lake']}"), want, "items_lake")
        disk = DeltaTable(str(shared)).to_pyarrow_table().to_pylist()
        assert_once(disk, want, "items_disk")

    with moto_s3(days_behind=8) as s3, database("postgres") as db:
        db.execute(
            "CREATE TABLE items (id bigint primary key, body text)",
            f"INSERT INTO items SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, {ROWS}) g",
        )
        conn = db.connect()
        ui = free_port()
        shared = tmp_path / "items"  # not under `hidden`: the workers see it
        root = kill_project(hidden / "kills", cluster, s3, db, ui, shared)
        try:
            want = dict(conn.execute("SELECT id, body FROM items").fetchall())
            killed_while_writing(root, cluster, ui, ["source:pg.items", "model:wide"])
            check(want)
            # a third of the rows changed: extracted again, the table rebuilt, the sink merges
            conn.execute("UPDATE items SET body = body || '!' WHERE id % 3 = 0")
            want = dict(conn.execute("SELECT id, body FROM items").fetchall())
            wide = tables["wide"]  # six tasks write it: some end while others write
            before = unreferenced(s3, wide)
            driver_killed_while_writing(
                root, ui, "model:wide", lambda: unreferenced(s3, wide) > before
            )
            killed_while_writing(root, cluster, ui, ["sink:items_lake", "sink:items_disk"])
            check(want)
            written = DeltaTable(str(shared)).file_uris()  # by Spark's writer (maintain compacts)
            assert written and all(f.endswith(".snappy.parquet") for f in written), written
            maintain = start_rivc(root, "maintain")
            out, _ = maintain.communicate(timeout=300)
            assert maintain.returncode == 0, out
            assert {name: unreferenced(s3, t) for name, t in tables.items()} == dict.fromkeys(
                tables, set()
            ), out
            check(want)
        finally:
            conn.close()


CDC = {
    "sources/pg.yml": """
sources:
  - name: pg
    connector: postgres-cdc
    connection: db
    config: {slot_name: rivc_cluster, publication_name: rivc_cluster}
    tables: [{name: orders, table: public.cluster_orders}]
""",
    "sinks/lake.yml": """
sinks:
  - name: lake
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: delta
    config: {table_uri: "${SHARED}/orders", mode: merge, merge_keys: [id]}
  - name: history
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: delta
    config: {table_uri: "s3://lake/cdc-sink/history", mode: scd2, merge_keys: [id]}
  - name: ice
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]
    connector: iceberg
    config: {catalog: {warehouse: "s3://lake/cdc-ice"}, namespace: cdc, table: orders,
             mode: upsert, key_fields: [id]}
""",
}


def test_a_postgres_change_log_on_the_cluster_and_a_sink_job_under_spark_submit(
    hidden: Path, s3: str, cluster: Cluster, logical_pg: int, tmp_path: Path
) -> None:
    """A postgres-cdc source, its log read by rivc (the driver), its merge, scd2 and Iceberg
    upsert sinks written by the cluster's executors: the scd2 and Iceberg ones on S3 (rivc's
    task writer), the merge one in a `file://` folder every process mounts, which Spark's own
    Parquet writer writes on the executors. The next changes (a TOASTed value
    kept through two updates, a key updated three times, one deleted and inserted again, a
    moved key, a bulk transaction) are taken by the merge sink's generated job under
    `spark-submit --master spark://...` (client mode), which extracts the log first; `rivc run`
    then brings the other sinks up to it and past one more change. Each sink equals the table
    read with psycopg; the history holds every landed version once."""
    import psycopg
    from pyiceberg.catalog.sql import SqlCatalog
    from rivc_remote import s3_fileio

    from rivc_testing import versions_of

    options = s3_options(s3)
    con = psycopg.connect(
        f"host=127.0.0.1 port={logical_pg} user=postgres dbname=postgres", autocommit=True
    )

    def source() -> dict[int, tuple[object, ...]]:
        rows = con.execute("SELECT id, status, body FROM cluster_orders").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def delta(uri: str) -> list[dict[str, object]]:
        return DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()

    def merged() -> dict[int, tuple[object, ...]]:
        rows = DeltaTable(str(shared / "orders")).to_pyarrow_table().to_pylist()
        assert len(rows) == len({r["id"] for r in rows}), "a key twice"
        return {r["id"]: (r["status"], r["body"]) for r in rows}

    def iceberg() -> dict[int, tuple[object, ...]]:
        catalog = f"sqlite:///{root / '.rivc/iceberg/catalog.db'}"
        table = SqlCatalog("rivc", uri=catalog, **s3_fileio(s3)).load_table("cdc.orders")
        rows = table.scan().to_arrow().to_pylist()
        assert len(rows) == len({r["id"] for r in rows}), "a key twice"
        return {r["id"]: (r["status"], r["body"]) for r in rows}

    shared = tmp_path / "shared"  # not under `hidden`: the workers see it
    env = {**S3_KEYS, "SHARED": shared.as_uri()}
    con.execute("DROP TABLE IF EXISTS cluster_orders")
    con.execute("CREATE TABLE cluster_orders (id int PRIMARY KEY, status text, body text)")
    con.execute(
        "INSERT INTO cluster_orders SELECT g, 'placed', 'b' || g FROM generate_series(1, 3000) g"
    )
    root = write_files(
        hidden / "cdc",
        {
            "rivc_project.yml": "name: cdc\n",
            "profiles.yml": f"""
default:
  spark:
    master: "{cluster.url}"
    conf: {{spark.executor.memory: 640m,
           spark.executor.extraJavaOptions: "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}}
  warehouse: s3://lake/cdc
  storage: {{AWS_ENDPOINT_URL: "{s3}", AWS_ALLOW_HTTP: "true"}}
  connections:
    db: {{type: postgres, host: 127.0.0.1, port: {logical_pg}, user: postgres,
          database: postgres}}
""",
            **CDC,
        },
    )
    try:
        run(root, env, "run")
        assert merged() == source() == iceberg()
        # the shared folder's files are Spark's writer's, those on S3 rivc's task writer's
        on_disk = DeltaTable(str(shared / "orders")).file_uris()
        on_s3 = DeltaTable("s3://lake/cdc-sink/history", storage_options=options).file_uris()
        assert on_disk and all(f.endswith(".snappy.parquet") for f in on_disk), on_disk
        assert on_s3 and all(re.search(r"/part-[0-9a-f]{32}\.parquet$", f) for f in on_s3)

        big = "SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g"
        con.execute(f"UPDATE cluster_orders SET body = ({big}) WHERE id = 5")
        con.execute("UPDATE cluster_orders SET status = 'paid' WHERE id = 5")  # body TOASTed,
        con.execute("UPDATE cluster_orders SET status = 'shipped' WHERE id = 5")  # unchanged
        for status in ("a", "b", "c"):
            con.execute("UPDATE cluster_orders SET status = %s WHERE id = 7", (status,))
        con.execute("DELETE FROM cluster_orders WHERE id = 8")
        con.execute("INSERT INTO cluster_orders VALUES (8, 'again', NULL)")
        con.execute("UPDATE cluster_orders SET id = 9009 WHERE id = 9")  # a moved key
        with con.transaction():
            con.execute("UPDATE cluster_orders SET status = 'bulk' WHERE id > 2000")
            con.execute(
                "INSERT INTO cluster_orders SELECT g, 'new', 'n' FROM generate_series(4001, 6000) g"
            )
        job = subprocess.run(
            [
                str(Path(sys.executable).parent / "spark-submit"),
                *("--master", cluster.url, "--executor-memory", "640m"),
                str(root / "target/jobs/lake.py"),
            ],
            cwd=root,
            env={**os.environ, **env, "PYSPARK_PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
        assert "lake: success" in job.stdout, job.stdout
        assert "rivc job lake" in cluster.applications()  # the job's executors were the cluster's
        want = source()
        assert merged() == want
        assert want[5][0] == "shipped" and len(str(want[5][1])) == 12_800

        con.execute("UPDATE cluster_orders SET status = 'd' WHERE id = 7")
        run(root, env, "run")
        want = source()
        assert merged() == want == iceberg()
        landing = DeltaTable("s3://lake/cdc/_rivc/landing/pg.orders", storage_options=options)
        landed = versions_of(landing.to_pyarrow_table(), lambda i: (i["status"], i["body"]))
        history = {
            (r["id"], (r["status"], r["body"]), r["valid_from"], r["valid_to"], r["is_current"])
            for r in delta("s3://lake/cdc-sink/history")
        }
        assert history == landed
        assert sum(1 for k, *_ in history if k == 7) == 5  # the snapshot's, a, b, c, d
        assert {k: v for k, v, _, _, current in history if current} == want
    finally:
        con.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = 'rivc_cluster'"
        )
        con.execute("DROP PUBLICATION IF EXISTS rivc_cluster")
        con.execute("DROP TABLE IF EXISTS cluster_orders")
        con.close()
