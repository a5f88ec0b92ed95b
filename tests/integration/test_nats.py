"""The nats sink and source against the machine's NATS server with JetStream (127.0.0.1:4222):
values exact, each row once across kills on either side of the commit and after the server's
duplicate window, the source read by sequence and acknowledged after the sink's commit; read
back with nats-py and deltalake. Each test makes its own streams and removes them with its keys
in its `rivc_commits_<stream>` bucket."""

from __future__ import annotations

import base64
import json
import math
import shutil
import signal
import time
from collections import Counter
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project
from rivc_nats import URL, create_stream, js, messages

from rivc_testing import rivc, run_rivc, write_files

pytestmark = pytest.mark.integration


def expected(value: Any) -> Any:
    """A value read by deltalake, as the nats sink's JSON holds it (docs/types.md)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[str(value)]
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, date):  # and datetime
        return value.isoformat()
    if isinstance(value, dict):
        return {k: expected(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) for v in value):
            return {k: expected(v) for k, v in value}
        return [expected(v) for v in value]
    return value


EDGES = """{{ config(materialized='table') }}
select * from values
  (1, cast(9223372036854775807 as bigint), cast('NaN' as double), cast(-0.0 as double),
   cast('99999999999999999999.999999999999999999' as decimal(38,18)),
   'comma, "quote", back\\\\slash, new\nline, żółw 🐢', X'00FF10', date'0001-01-01',
   timestamp'2026-03-29 01:30:00.000001', array(1, null, 3),
   named_struct('x', 1.10bd, 'y', cast('-Infinity' as double)), map('k', 1), true),
  (2, cast(-9223372036854775808 as bigint), cast('Infinity' as double), 5e-324d,
   cast('-0.000000000000000001' as decimal(38,18)), '', X'', date'9999-12-31',
   timestamp'1970-01-01 00:00:00', array(), named_struct('x', null, 'y', 0d), map(), false),
  (3, null, null, null, null, null, null, null, null, null, null, null, null),
  (3, null, null, null, null, null, null, null, null, null, null, null, null)
  as t(id, big, dbl, tiny, dec, txt, bin, d, ts, ints, obj, m, flag)
"""


def test_nats_sink_values_exact_ids_stable_and_a_rerun_publishes_nothing(spark, tmp_path, stream):
    root = write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: bus\n",
            "models/edges.sql": EDGES,
            "sinks/bus.yml": f"""
sinks:
  - {{name: edges_bus, from: edges, connector: nats,
     config: {{url: "{URL}", stream: {stream}, subject: out.edges}}}}
""",
        },
    )
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    got = messages(stream)
    model = DeltaTable(str(root / "warehouse/edges")).to_pyarrow_table().to_pylist()
    for r in model:  # deltalake reads a map as key-value pairs, an empty one as []
        r["m"] = None if r["m"] is None else dict(r["m"])
    assert sorted((json.dumps(p, sort_keys=True) for _, _, p in got)) == sorted(
        json.dumps(expected(r), sort_keys=True) for r in model
    )
    assert {s for s, _, _ in got} == {"out.edges"}
    ids = [h["Nats-Msg-Id"] for _, h, _ in got]
    assert len(set(ids)) == 4  # the two equal rows carry ids numbered 1 and 2
    assert sorted(i.rsplit("-", 1)[1] for i in ids) == ["1", "1", "1", "2"]
    assert len({i.rsplit("-", 2)[0] for i in ids}) == 1  # one sink, one batch
    edge = next(p for _, _, p in got if p["id"] == 1)
    assert edge["dec"] == "99999999999999999999.999999999999999999"
    assert edge["dbl"] == "NaN" and edge["obj"] == {"x": "1.10", "y": "-Infinity"}
    assert edge["m"] == {"k": 1} and edge["ts"] == "2026-03-29T01:30:00.000001+00:00"

    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    assert len(messages(stream)) == 4  # the bucket holds batch 0 of this sink

    # the model changes: a full refresh is a new batch with new ids, published once
    (root / "models/edges.sql").write_text(
        EDGES.replace("(1, cast(9223372036854775807", "(7, cast(9223372036854775807")
    )
    third = rivc(root, "run")
    assert third.exit_code == 0, third.output
    after = messages(stream)
    assert len(after) == 8 and sorted(p["id"] for _, _, p in after[4:]) == [2, 3, 3, 7]


def test_nats_sink_every_row_once_across_kills_beyond_the_duplicate_window(spark, tmp_path, stream):
    """A landed source published from rivc's process (killed mid-publish) and a view of it
    published by Spark's tasks (killed before the commit), each rerun after the server's
    duplicate window has passed: each row version once on each subject."""
    create_stream(stream, [f"{stream.lower()}.>"], window_s=0.5)
    raw, view = f"{stream.lower()}.raw", f"{stream.lower()}.view"
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, amount numeric(12,2), updated_at timestamp)"
        )
        db.execute(
            "INSERT INTO orders SELECT i, i * 1.25, timestamp '2026-01-01' + i * interval '1 s' "
            "FROM generate_series(1, 5000) i"
        )
        sinks = f"""
sinks:
  - {{name: a_raw, from: source:src.orders, connector: nats,
     config: {{url: "{URL}", stream: {stream}, subject: {raw}}}}}
  - {{name: b_view, from: big_orders, connector: nats,
     config: {{url: "{URL}", stream: {stream}, subject: {view}}}}}
"""
        tables = (
            "- {name: orders, table: orders, mode: incremental, cursor_column: updated_at, "
            "unique_key: id}"
        )
        models = {
            "big_orders": "select id, amount from {{ source('src', 'orders') }} where id > 100"
        }
        root = project(tmp_path, db, tables, models, sinks)

        killed = run_rivc(root, f"mid-publish:{stream}")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        partial = Counter(s for s, _, _ in messages(stream))
        assert 0 < partial[raw] < 5000
        time.sleep(1)  # past the duplicate window: the server no longer drops a repeated id
        killed = run_rivc(root, f"before-commit:{stream}")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        time.sleep(1)
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr

        def held() -> dict[str, Counter[tuple[int, str]]]:
            out: dict[str, Counter[tuple[int, str]]] = {raw: Counter(), view: Counter()}
            for subject, _, p in messages(stream):
                out[subject][(p["id"], p["amount"])] += 1
            return out

        first = held()
        assert first[raw] == Counter((i, str(Decimal(i) * Decimal("1.25"))) for i in range(1, 5001))
        assert first[view] == Counter(
            (i, str(Decimal(i) * Decimal("1.25"))) for i in range(101, 5001)
        )

        db.execute("INSERT INTO orders VALUES (5001, 1, '2026-02-01'), (5002, 2, '2026-02-01')")
        db.execute("UPDATE orders SET amount = 0, updated_at = '2026-02-02' WHERE id = 4000")
        killed = run_rivc(root, "after-commit:a_raw")  # published and committed, not recorded
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        second = held()
        new = Counter({(5001, "1.00"): 1, (5002, "2.00"): 1, (4000, "0.00"): 1})
        assert second[raw] == first[raw] + new
        assert second[view] == first[view] + new


def test_nats_source_read_by_sequence_acknowledged_after_the_commit(spark, tmp_path, stream):
    create_stream(stream, ["iot.>", "other.>"], window_s=120)

    def publish(start: int, n: int) -> None:
        async def work(j: Any) -> None:
            for i in range(start, start + n):
                subject = ("iot.a.t", "iot.b", "other.x")[i % 3]
                body = {
                    "device": subject,
                    "seq": i,
                    "temp": i / 4,
                    "blob": base64.b64encode(b"\0").decode(),
                }
                await j.publish(subject, json.dumps(body).encode())

        js(work)

    publish(0, 1500)
    root = write_files(
        tmp_path / "s",
        {
            "rivc_project.yml": "name: iot\n",
            "sources/bus.yml": f"""
sources:
  - name: bus
    connector: nats
    tables:
      - name: readings
        config: {{url: "{URL}", stream: {stream}, subjects: ["iot.*.t", "iot.b"],
                  metadata_columns: true, max_messages_per_trigger: 400}}
        columns: {{device: string, seq: bigint, temp: double}}
""",
            "sinks/lake.yml": """
sinks:
  - {name: readings, from: source:bus.readings, connector: delta,
     config: {table_uri: out/readings}}
""",
        },
    )

    def rows() -> list[dict[str, Any]]:
        table = DeltaTable(str(root / "out/readings")).to_pyarrow_table()
        return sorted(table.to_pylist(), key=lambda r: r["seq"])

    def ack_floor() -> int:
        async def work(j: Any) -> int:
            info = await j.consumer_info(stream, "rivc-iot-bus-readings")
            return int(info.ack_floor.stream_seq)

        return int(js(work))

    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    got = rows()
    assert [r["seq"] for r in got] == [i for i in range(1500) if i % 3 != 2]
    assert all(r["nats_seq"] == r["seq"] + 1 and r["nats_subject"] == r["device"] for r in got)
    assert all(r["temp"] == r["seq"] / 4 and r["nats_time"] is not None for r in got)
    assert ack_floor() == 1500  # acknowledged after the sink's commits, up to the stream's end

    publish(1500, 900)
    killed = run_rivc(root, "after-commit:readings")  # the Delta commit landed, Spark's did not
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert ack_floor() < 2400
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    assert [r["seq"] for r in rows()] == [i for i in range(2400) if i % 3 != 2]
    assert ack_floor() == 2400

    # a checkpoint behind what the stream still holds is refused by name, nothing written
    publish(2400, 30)
    js(lambda j: j.purge_stream(stream, seq=2420))  # removes messages below 2420, unread
    lost = rivc(root, "run")
    assert lost.exit_code != 0
    assert f"NATS stream {stream} no longer holds messages 2401..2419" in lost.output, lost.output
    assert len(rows()) == 1600
    # the loss accepted: a new checkpoint goes on from what the stream still holds
    shutil.rmtree(root / "warehouse/_rivc_checkpoints/readings")
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    kept = [i for i in range(2419, 2430) if i % 3 != 2]  # stream sequences 2420..2430
    assert [r["seq"] for r in rows()] == [i for i in range(2400) if i % 3 != 2] + kept


def test_nats_refusals_name_the_sink(spark, tmp_path, stream):
    create_stream(stream, ["only.this"], window_s=120)
    root = write_files(
        tmp_path / "r",
        {
            "rivc_project.yml": "name: bus\n",
            "models/one.sql": "select 1 as id",
            "sinks/bus.yml": f"""
sinks:
  - {{name: wrong_subject, from: one, connector: nats,
     config: {{url: "{URL}", stream: {stream}, subject: not.this}}}}
  - {{name: no_stream, from: one, connector: nats,
     config: {{url: "{URL}", stream: {stream}_MISSING, subject: x.y,
               auto_create_stream: false}}}}
""",
        },
    )
    done = rivc(root, "run")
    assert done.exit_code == 1
    assert (
        f"sink wrong_subject: stream {stream}: takes subjects only.this, not not.this"
        in done.output
    )
    assert (
        f"sink no_stream: stream {stream}_MISSING: does not exist and auto_create_stream is false"
        in done.output
    )
    assert messages(stream) == []
    doctor = rivc(root, "doctor")
    assert "sink wrong_subject (nats" in doctor.output, doctor.output


def test_nats_lag_is_scraped_while_the_stream_runs(tmp_path, stream):
    """`rivc_source_lag_messages`: what the stream holds that the sink has not had
    acknowledged, read from the durable consumer while a followed stream runs."""
    import subprocess
    import sys
    from pathlib import Path

    from rivc_testing import free_port, scrape

    create_stream(stream, ["lag.>"], window_s=120)

    def publish(start: int, n: int) -> None:
        async def work(j: Any) -> None:
            for i in range(start, start + n):
                await j.publish("lag.x", json.dumps({"seq": i}).encode())

        js(work)

    publish(0, 20)
    port = free_port()
    root = write_files(
        tmp_path / "l",
        {
            "rivc_project.yml": "name: lag\n",
            "profiles.yml": f"default:\n  metrics: {{port: {port}}}\n",
            "sources/bus.yml": f"""
sources:
  - name: bus
    connector: nats
    tables:
      - {{name: ev, config: {{url: "{URL}", stream: {stream}}}, columns: {{seq: bigint}}}}
""",
            "sinks/lake.yml": """
sinks:
  - {name: lake, from: source:bus.ev, connector: delta, config: {table_uri: out/ev},
     trigger: {processing_time: "15 seconds"}}
""",
        },
    )
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("rivc")), "run"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    node = ("source:bus.ev",)
    try:
        deadline = time.monotonic() + 120
        lag = None
        while time.monotonic() < deadline:  # the first batch committed and acknowledged
            try:
                lag = scrape(port).get("rivc_source_lag_messages", {}).get(node)
            except OSError:
                lag = None
            if lag == 0:
                break
            time.sleep(0.5)
        assert lag == 0, lag
        publish(20, 7)  # right after a trigger: the next is seconds away
        assert scrape(port)["rivc_source_lag_messages"][node] == 7
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
