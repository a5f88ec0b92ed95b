"""The rabbitmq sink against the machine's RabbitMQ (127.0.0.1:5672): rows exact as JSON,
message ids that reruns send unchanged, kills mid-publish and before the commit, a lost
`.rivc/`, an unroutable message refused by name; read back with pika. Each test declares its
own queues and deletes them."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections import Counter
from typing import Any

import pika
import pytest
from rivc_dbs import database, project

from rivc_testing import rivc, run_rivc, write_files

pytestmark = pytest.mark.integration
URL = "amqp://guest@127.0.0.1:5672/%2F"


def drain(queue: str) -> list[tuple[str, Any]]:
    """(message_id, JSON body) of every message in the queue, taken off it."""
    conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F"))
    try:
        channel = conn.channel()
        out = []
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            assert props.content_type == "application/json" and props.delivery_mode == 2
            out.append((props.message_id, json.loads(body)))
    finally:
        conn.close()


def test_rabbitmq_rows_exact_ids_stable_and_a_rerun_sends_nothing(
    spark, tmp_path, queue, monkeypatch
):
    monkeypatch.setenv("MQ_PASSWORD", "guest")
    root = write_files(
        tmp_path / "q",
        {
            "rivc_project.yml": "name: mq\n",
            "models/edges.sql": "{{ config(materialized='table') }}\n"
            "select * from values (1, 1.50bd, cast('-Infinity' as double), named_struct('a', "
            "'żółw \"🐢\"'), timestamp'2026-03-29 01:30:00.000001'), (1, 1.50bd, "
            "cast('-Infinity' as double), named_struct('a', 'żółw \"🐢\"'), "
            "timestamp'2026-03-29 01:30:00.000001'), (2, null, null, null, null) "
            "as t(id, dec, dbl, s, ts)",
            "sinks/mq.yml": f"""
sinks:
  - {{name: edges_mq, from: edges, connector: rabbitmq,
     config: {{url: "{URL}", password_env: MQ_PASSWORD, routing_key: {queue}, queue: {queue}}}}}
  - {{name: nowhere, from: edges, connector: rabbitmq,
     config: {{url: "{URL}", password_env: MQ_PASSWORD, routing_key: {queue}_none}}}}
""",
        },
    )
    done = rivc(root, "run")
    assert done.exit_code == 1  # the unroutable sink fails; its sibling delivers
    assert (
        "sink nowhere: rabbitmq 127.0.0.1:5672 (default exchange) "
        f"{queue}_none: the broker did not take message "
    ) in done.output, done.output
    assert "no queue is bound for its routing key" in done.output
    got = drain(queue)
    edge = {
        "id": 1,
        "dec": "1.50",
        "dbl": "-Infinity",
        "s": {"a": 'żółw "🐢"'},
        "ts": "2026-03-29T01:30:00.000001+00:00",
    }
    nulls = {"id": 2, "dec": None, "dbl": None, "s": None, "ts": None}
    assert sorted((json.dumps(b, sort_keys=True) for _, b in got)) == sorted(
        json.dumps(r, sort_keys=True) for r in (edge, edge, nulls)
    )
    assert len({m for m, _ in got}) == 3  # equal rows, two ids

    (root / "sinks/mq.yml").write_text(
        (root / "sinks/mq.yml").read_text().split("  - {name: nowhere")[0]
    )
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    shutil.rmtree(root / ".rivc")  # the commits are in the warehouse
    third = rivc(root, "run")
    assert third.exit_code == 0, third.output
    assert drain(queue) == []


def test_rabbitmq_kills_mid_publish_and_before_the_commit_send_each_row_once(tmp_path, queue):
    """A landed source published from rivc's process: killed with half its messages confirmed,
    then with all confirmed and the commit not made; then new rows. Each row once: the kills
    left nothing in flight, and the confirmed ids were recorded."""
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, amount numeric(12,2), updated_at timestamp)"
        )
        db.execute(
            "INSERT INTO orders SELECT i, i * 1.25, timestamp '2026-01-01' + i * interval '1 s' "
            "FROM generate_series(1, 3000) i"
        )
        sinks = f"""
sinks:
  - {{name: mq, from: source:src.orders, connector: rabbitmq,
     config: {{url: "amqp://guest:guest@127.0.0.1:5672/%2F", routing_key: {queue},
               queue: {queue}, max_in_flight: 100}}}}
"""
        tables = (
            "- {name: orders, table: orders, mode: incremental, cursor_column: updated_at, "
            "unique_key: id}"
        )
        root = project(tmp_path, db, tables, {}, sinks)
        killed = run_rivc(root, "mid-publish:mq")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        first = drain(queue)
        assert 0 < len(first) < 3000
        killed = run_rivc(root, "before-commit:mq")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        got = first + drain(queue)
        assert Counter(m for m, _ in got).most_common(1)[0][1] == 1  # no id twice
        assert Counter(b["id"] for _, b in got) == Counter(range(1, 3001))

        db.execute("INSERT INTO orders VALUES (3001, 1, '2026-02-01')")
        db.execute("UPDATE orders SET amount = 0, updated_at = '2026-02-02' WHERE id = 7")
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted((b["id"], b["amount"]) for _, b in drain(queue)) == [
            (7, "0.00"),
            (3001, "1.00"),
        ]


def test_rabbitmq_source_acknowledges_after_the_commit_and_a_kill_loses_and_doubles_nothing(
    spark, tmp_path, queue, monkeypatch
):
    from deltalake import DeltaTable

    conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F"))
    channel = conn.channel()
    channel.queue_declare(queue, durable=True)

    def publish(start: int, n: int) -> None:
        for i in range(start, start + n):
            props = pika.BasicProperties(message_id=f"m{i}", delivery_mode=2, timestamp=1767225600)
            body = json.dumps({"device": f"d{i % 3}", "seq": i, "temp": i / 4})
            channel.basic_publish("", queue, body.encode(), props)

    def waiting() -> tuple[int, int]:
        """(ready, unacknowledged) messages of the queue."""
        out = subprocess.run(
            [
                "rabbitmqctl",
                "-q",
                "list_queues",
                "name",
                "messages_ready",
                "messages_unacknowledged",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        line = next(r for r in out.splitlines() if r.split()[0] == queue)
        return int(line.split()[1]), int(line.split()[2])

    try:
        publish(0, 1500)
        root = write_files(
            tmp_path / "s",
            {
                "rivc_project.yml": "name: mqsrc\n",
                "sources/mq.yml": f"""
sources:
  - name: mq
    connector: rabbitmq
    tables:
      - name: readings
        config: {{url: "{URL}", password_env: MQ_PASSWORD, queue: {queue},
                  metadata_columns: true, max_messages_per_trigger: 400}}
        columns: {{device: string, seq: bigint, temp: double}}
""",
                "sinks/lake.yml": """
sinks:
  - {name: lake, from: source:mq.readings, connector: delta,
     config: {table_uri: out/readings}}
""",
            },
        )
        monkeypatch.setenv("MQ_PASSWORD", "guest")
        from rivc.adapters.plane.registry import lag
        from rivc.compiler.loading.project import load_project

        source = load_project(root).sources["mq.readings"]
        assert lag(source.connector, source.config, "mqsrc", "mq.readings") == 1500  # all ready
        doctor = rivc(root, "doctor")
        # the password is guest too: every occurrence of a secret's value is masked
        shown = URL.replace("guest@", "****@")
        assert "guest" not in doctor.output
        assert (
            f"[OK] source mq.readings (rabbitmq {shown}): 127.0.0.1:5672 queue {queue}: 1500 ready"
            in doctor.output
        ), doctor.output
        (root / "sources/mq.yml").write_text(
            (root / "sources/mq.yml").read_text().replace(f"queue: {queue},", f"queue: {queue}_no,")
        )
        missing = rivc(root, "doctor")
        assert (
            f"[FAIL] source mq.readings (rabbitmq {shown}): not found: NOT_FOUND - no queue '{queue}_no'"
            in missing.output
        ), missing.output
        (root / "sources/mq.yml").write_text(
            (root / "sources/mq.yml").read_text().replace(f"queue: {queue}_no,", f"queue: {queue},")
        )

        def seqs() -> list[int]:
            table = DeltaTable(str(root / "out/readings")).to_pyarrow_table()
            return sorted(table.column("seq").to_pylist())

        done = rivc(root, "run")
        assert done.exit_code == 0, done.output
        assert seqs() == list(range(1500))
        rows = DeltaTable(str(root / "out/readings")).to_pyarrow_table().to_pylist()
        assert all(r["rabbitmq_message_id"] == f"m{r['seq']}" for r in rows)
        assert all(
            r["rabbitmq_routing_key"] == queue and not r["rabbitmq_redelivered"] for r in rows
        )
        assert all(r["temp"] == r["seq"] / 4 for r in rows)
        assert waiting() == (0, 0)  # every message acknowledged once the sink held it
        assert lag(source.connector, source.config, "mqsrc", "mq.readings") == 0

        publish(1500, 900)
        killed = run_rivc(root, "after-commit:lake")  # a Delta commit landed, Spark's did not
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert sum(waiting()) > 0  # what the killed run held went back to the queue
        done = rivc(root, "run")
        assert done.exit_code == 0, done.output
        assert seqs() == list(range(2400))
        assert waiting() == (0, 0)
    finally:
        conn.close()
