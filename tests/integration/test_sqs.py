"""The sqs sink against moto's SQS (a server of its own, in its own process): values exact, each
message with its row's id, a rerun and a lost .rivc/ sending nothing; killed mid-publish and
before the commit on a FIFO queue, with the ids SQS accepted forgotten, each row once (the
queue drops the rest by their deduplication ids). Read back with boto3."""

from __future__ import annotations

import json
import shutil
import signal
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from rivc_dbs import database, project

from rivc_testing import moto_server, rivc, run_rivc, write_files

pytestmark = pytest.mark.integration

KEYS = "{access_key_id: testing, secret_access_key: testing}"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


def sqs(endpoint: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def drain(endpoint: str, url: str) -> list[tuple[str, Any, dict[str, Any]]]:
    """(rivc_id, JSON body, attributes) of every message on the queue, deleted once read."""
    client = sqs(endpoint)
    out = []
    while True:
        got = client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not got:
            return out
        for m in got:
            out.append((m["MessageAttributes"]["rivc_id"]["StringValue"], json.loads(m["Body"]), m))
        client.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )


EDGES = (
    "{{ config(materialized='table') }}\n"
    "select * from values (1, 1.50bd, cast('-Infinity' as double), named_struct('a', "
    "'żółw \"🐢\"'), timestamp'2026-03-29 01:30:00.000001'), (1, 1.50bd, "
    "cast('-Infinity' as double), named_struct('a', 'żółw \"🐢\"'), "
    "timestamp'2026-03-29 01:30:00.000001'), (2, null, null, null, null) "
    "as t(id, dec, dbl, s, ts)"
)


def test_sqs_rows_exact_ids_stable_and_a_rerun_sends_nothing(spark, tmp_path, endpoint):
    url = sqs(endpoint).create_queue(QueueName="rivc-edges")["QueueUrl"]
    root = write_files(
        tmp_path / "q",
        {
            "rivc_project.yml": "name: sq\n",
            "models/edges.sql": EDGES,
            "sinks/q.yml": f"""
sinks:
  - {{name: edges_q, from: edges, connector: sqs,
     config: {{queue_url: "{url}", endpoint_url: "{endpoint}", auth: {KEYS}, batch_size: 2}}}}
""",
        },
    )
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    got = drain(endpoint, url)
    edge = {
        "id": 1,
        "dec": "1.50",
        "dbl": "-Infinity",
        "s": {"a": 'żółw "🐢"'},
        "ts": "2026-03-29T01:30:00.000001+00:00",
    }
    nulls = {"id": 2, "dec": None, "dbl": None, "s": None, "ts": None}
    assert sorted(json.dumps(b, sort_keys=True) for _, b, _ in got) == sorted(
        json.dumps(r, sort_keys=True) for r in (edge, edge, nulls)
    )
    assert len({m for m, _, _ in got}) == 3  # equal rows, two ids
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    shutil.rmtree(root / ".rivc")  # the commits are in the warehouse
    third = rivc(root, "run")
    assert third.exit_code == 0, third.output
    assert drain(endpoint, url) == []


def test_sqs_fifo_killed_mid_publish_and_before_the_commit_each_row_once(tmp_path, endpoint):
    client = sqs(endpoint)
    url = client.create_queue(QueueName="rivc-orders.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    with database("postgres") as db:
        db.execute("CREATE TABLE orders (id int PRIMARY KEY, shop text, updated_at timestamp)")
        db.execute(
            "INSERT INTO orders SELECT i, 'shop' || (i % 3), "
            "timestamp '2026-01-01' + i * interval '1 s' FROM generate_series(1, 300) i"
        )
        sinks = f"""
sinks:
  - {{name: q, from: source:src.orders, connector: sqs,
     config: {{queue_url: "{url}", endpoint_url: "{endpoint}", auth: {KEYS},
               message_group_id_field: shop}}}}
"""
        tables = (
            "- {name: orders, table: orders, mode: incremental, cursor_column: updated_at, "
            "unique_key: id}"
        )
        root = project(tmp_path, db, tables, {}, sinks)
        killed = run_rivc(root, "mid-publish:q")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        killed = run_rivc(root, "before-commit:q")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        # the ids SQS accepted forgotten: the rerun sends the whole batch again, and the FIFO
        # queue drops what it holds by deduplication id
        for sent in root.glob("warehouse/_rivc_sent/q/sent.json"):
            sent.unlink()
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        got = drain(endpoint, url)
        assert Counter(m for m, _, _ in got).most_common(1)[0][1] == 1  # no id twice
        assert Counter(b["id"] for _, b, _ in got) == Counter(range(1, 301))
        groups = {m["Attributes"]["MessageGroupId"] for _, _, m in got}
        assert groups == {"shop0", "shop1", "shop2"}
        by_group: dict[str, list[str]] = {}
        for mid, body, _ in got:  # a group in the order it was sent: its rows' ids, every run
            by_group.setdefault(body["shop"], []).append(mid)
        assert all(ids == sorted(ids) for ids in by_group.values())


def test_sqs_refusals_name_the_sink(spark, tmp_path, endpoint):
    root = write_files(
        tmp_path / "r",
        {
            "rivc_project.yml": "name: sr\n",
            "models/edges.sql": EDGES,
            "sinks/q.yml": f"""
sinks:
  - {{name: fifo_q, from: edges, connector: sqs,
     config: {{queue_url: "{endpoint}/123456789012/x.fifo", endpoint_url: "{endpoint}"}}}}
""",
        },
    )
    refused = rivc(root, "compile")
    assert refused.exit_code == 2
    assert "a FIFO queue needs message_group_id or message_group_id_field" in refused.output
    (root / "sinks/q.yml").write_text(
        f"sinks:\n  - {{name: gone_q, from: edges, connector: sqs, config: {{queue_url: "
        f'"{endpoint}/123456789012/gone", endpoint_url: "{endpoint}", auth: {KEYS}}}}}\n'
    )
    failed = rivc(root, "run")
    assert failed.exit_code == 1
    assert f"sink gone_q: sqs {endpoint}/123456789012/gone:" in failed.output, failed.output


def test_sqs_source_deletes_after_the_commit_and_a_kill_loses_and_doubles_nothing(
    spark, tmp_path, endpoint
):
    client = sqs(endpoint)
    url = client.create_queue(QueueName="rivc-readings")["QueueUrl"]

    def send(start: int, n: int) -> None:
        for at in range(start, start + n, 10):
            client.send_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "MessageBody": json.dumps({"seq": i, "temp": i / 4})}
                    for i in range(at, min(at + 10, start + n))
                ],
            )

    def waiting() -> int:
        attrs = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )

    send(0, 250)
    root = write_files(
        tmp_path / "s",
        {
            "rivc_project.yml": "name: sqsin\n",
            "sources/q.yml": f"""
sources:
  - name: q
    connector: sqs
    tables:
      - name: readings
        config: {{queue_url: "{url}", endpoint_url: "{endpoint}", auth: {KEYS},
                  wait_time_s: 0, max_messages_per_trigger: 100, metadata_columns: true}}
        columns: {{seq: bigint, temp: double}}
""",
            "sinks/lake.yml": """
sinks:
  - {name: landed, from: source:q.readings, connector: delta, config: {table_uri: out/landed}}
""",
        },
    )

    def rows() -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        table = DeltaTable(str(root / "out/landed")).to_pyarrow_table()
        return sorted(table.to_pylist(), key=lambda r: r["seq"])

    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    got = rows()
    assert [r["seq"] for r in got] == list(range(250))
    assert all(r["temp"] == r["seq"] / 4 and r["sqs_receive_count"] == 1 for r in got)
    assert len({r["sqs_message_id"] for r in got}) == 250 and got[0]["sqs_sent_at"] is not None

    send(250, 150)
    killed = run_rivc(root, "after-commit:landed")  # the Delta commit landed, Spark's did not
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert waiting() > 0  # received, spooled, not deleted: the batch is not committed
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    assert [r["seq"] for r in rows()] == list(range(400))
    again = rivc(root, "run")  # Spark commits the last batch when it plans the next
    assert again.exit_code == 0, again.output
    assert waiting() == 0 and [r["seq"] for r in rows()] == list(range(400))
