"""Streaming sources against real systems: MQTT through the Mosquitto broker on 127.0.0.1:1883,
Ctrl-C during a streaming run, and the Kafka source's clear error without its connector jar."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from rivc_testing import free_port, rivc, scrape, write_files

pytestmark = pytest.mark.integration
BROKER = ("127.0.0.1", 1883)
BIG = 21_000_000


def mqtt_project(root: Path, topic: str, client_id: str, trigger: str = "available_now") -> Path:
    return write_files(
        root,
        {
            "rivc_project.yml": "name: iot\n",
            "sources/iot.yml": f"""
sources:
  - name: iot
    connector: mqtt
    tables:
      - name: sensors
        config: {{url: "mqtt://{BROKER[0]}:{BROKER[1]}", topics: ["{topic}/+"], qos: 1,
                  client_id: {client_id}, drain_ms: 1500, metadata_columns: true}}
        columns: {{device: string, seq: bigint, temp: double}}
""",
            "sinks/lake.yml": f"""
sinks:
  - name: readings
    from: source:iot.sensors
    connector: delta
    config: {{table_uri: out/readings}}
    trigger: {trigger}
""",
        },
    )


class Publisher:
    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4()}")
        self.client.connect(*BROKER)
        self.client.loop_start()

    def send(self, seqs: range) -> None:
        for i in seqs:
            payload = json.dumps({"device": f"d{i % 3}", "seq": i, "temp": 20 + i / 10})
            self.client.publish(f"{self.topic}/d{i % 3}", payload, qos=1).wait_for_publish(5)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def session():
    """A topic and a client id of our own; the broker forgets the session afterwards."""
    topic, client_id = f"rivc-test/{uuid.uuid4().hex[:8]}", f"rivc-test-{uuid.uuid4().hex[:8]}"
    pub = Publisher(topic)
    yield topic, client_id, pub
    pub.close()
    cleaner = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
    cleaner.connect(*BROKER)
    cleaner.disconnect()


def seqs(root: Path) -> list[int]:
    table = DeltaTable(str(root / "out/readings")).to_pyarrow_table()
    return sorted(table.column("seq").to_pylist())


def test_mqtt_every_message_once_across_restarts(spark, tmp_path, session):
    topic, client_id, pub = session
    root = mqtt_project(tmp_path / "m", topic, client_id)
    first = rivc(root, "run")  # subscribes: from now on the broker queues for this session
    assert first.exit_code == 0, first.output

    pub.send(range(0, 50))  # published while no pipeline runs
    second = rivc(root, "run")
    assert second.exit_code == 0, second.output
    assert seqs(root) == list(range(50))

    pub.send(range(50, 80))
    # a payload with a string past Jackson's 20,000,000-character limit arrives whole
    big = json.dumps({"device": "d" * BIG, "seq": 80, "temp": 1.5})
    pub.client.publish(f"{topic}/big", big, qos=1).wait_for_publish(30)
    third = rivc(root, "run")
    assert third.exit_code == 0, third.output
    assert seqs(root) == list(range(81))  # every message once, none twice
    table = DeltaTable(str(root / "out/readings")).to_pyarrow_table()
    big_row = table.filter(pc.equal(table.column("seq"), 80)).to_pylist()[0]
    assert (len(big_row["device"]), big_row["temp"]) == (BIG, 1.5)
    table = table.filter(pc.not_equal(table.column("seq"), 80))

    rows = table.to_pylist()
    assert {r["mqtt_topic"] for r in rows} == {f"{topic}/d{i}" for i in range(3)}
    assert {r["mqtt_qos"] for r in rows} == {1} and all(r["mqtt_received_at"] for r in rows)
    # Spark commits a batch's offsets when it plans the next one, so the spool keeps a segment
    spool = root / ".rivc/spool/iot.sensors"
    assert len(list(spool.glob("*.jsonl"))) == 1


def set_trigger(root: Path, trigger: str) -> None:
    text = (root / "sinks/lake.yml").read_text()
    (root / "sinks/lake.yml").write_text(text[: text.index("trigger:")] + f"trigger: {trigger}\n")


def test_ctrl_c_stops_after_the_batch_and_restart_continues(spark, tmp_path, session):
    topic, client_id, pub = session
    root = mqtt_project(tmp_path / "c", topic, client_id)
    assert rivc(root, "run").exit_code == 0  # the broker keeps this session from now on
    set_trigger(root, '{processing_time: "1 second"}')
    port = free_port()
    (root / "profiles.yml").write_text(f"default:\n  metrics: {{port: {port}}}\n")
    rivc_bin = Path(sys.executable).with_name("rivc")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [str(rivc_bin), "run", "--project-dir", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        sent = 0
        while time.monotonic() < deadline:  # publish until some batches reached the table
            pub.send(range(sent, sent + 10))
            sent += 10
            time.sleep(0.5)
            if (root / "out/readings/_delta_log").exists() and len(seqs(root)) >= 20:
                break
        assert proc.poll() is None, proc.communicate()[0]
        scraped = [scrape(port), scrape(port)]  # what Prometheus reads while the stream runs
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    rows = [m["rivc_sink_rows_total"][("sink:readings",)] for m in scraped]
    assert 0 < rows[0] <= rows[1] <= len(seqs(root))
    assert scraped[1]["rivc_sink_batches_total"][("sink:readings",)] >= 1
    with pytest.raises(OSError):  # the endpoint lives as long as the run
        scrape(port)
    assert "stopping after the current batch" in output and "stopped by Ctrl-C" in output
    before = seqs(root)
    assert before == sorted(set(before))  # no duplicates so far

    pub.send(range(sent, sent + 25))  # arrives while stopped
    sent += 25
    set_trigger(root, "available_now")
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    assert seqs(root) == list(range(sent))


def test_kafka_spec_compiles_and_run_names_the_missing_jar(spark, tmp_path):
    root = write_files(
        tmp_path / "k",
        {
            "rivc_project.yml": "name: k\n",
            "sources/bus.yml": """
sources:
  - name: bus
    connector: kafka
    tables:
      - name: clicks
        config: {brokers: ["127.0.0.1:9092"], topic: clicks, starting_offsets: earliest,
                 metadata_columns: true,
                 security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, username: u, password_env: KPW}}
        columns: {user_id: bigint, url: string}
""",
            "sinks/out.yml": "sinks:\n  - {name: clicks_out, from: source:bus.clicks, connector: "
            "delta, config: {table_uri: out/clicks, merge_keys: [kafka_offset]}}\n",
        },
    )
    compiled = rivc(root, "compile")
    assert compiled.exit_code == 0, compiled.output
    manifest = json.loads((root / "target/rivc_manifest.json").read_text())
    assert set(manifest["nodes"]["source:bus.clicks"]["columns"]) == {
        "user_id",
        "url",
        "kafka_key",
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
    }
    result = rivc(root, "run")
    assert result.exit_code == 1
    assert "the kafka source needs Spark's Kafka connector on the classpath" in result.output
    assert "spark.jars" in result.output and "spark-sql-kafka-0-10_2.13-4." in result.output
    shutil.rmtree(root)


def test_doctor_reaches_the_mqtt_broker(tmp_path):
    root = mqtt_project(tmp_path / "d", "rivc-test/doctor", "rivc-test-doctor")
    ok = rivc(root, "doctor")
    assert ok.exit_code == 0, ok.output
    assert "[OK] source iot.sensors (mqtt mqtt://127.0.0.1:1883)" in ok.output
    bad = root / "sources/iot.yml"
    bad.write_text(bad.read_text().replace(":1883", ":1884"))  # nothing listens there
    failed = rivc(root, "doctor")
    assert failed.exit_code == 1
    assert (
        "[FAIL] source iot.sensors (mqtt mqtt://127.0.0.1:1884): connectivity error"
        in failed.output
    )


def test_mqtt_burst_kill_and_restart_every_message_once(spark, tmp_path, session):
    """20,000 QoS 1 messages at the publisher's full speed into a running pipeline, a kill -9
    mid-stream, more messages while it is down (within the broker's queue of 1,000), then a
    restart: every message once."""
    topic, client_id, pub = session
    root = mqtt_project(tmp_path / "b", topic, client_id)
    assert rivc(root, "run").exit_code == 0  # subscribes: the broker keeps the session
    set_trigger(root, '{processing_time: "3 seconds"}')
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("rivc")), "run", "--project-dir", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # warm-up messages until the stream delivers one
            pub.send(range(-1, 0))
            if (root / "out/readings/_delta_log").exists() and -1 in seqs(root):
                break
            time.sleep(0.5)
        burst = 20_000
        infos = [
            pub.client.publish(
                f"{topic}/d{i % 3}", json.dumps({"device": "d", "seq": i, "temp": 1.0}), qos=1
            )
            for i in range(burst)
        ]
        for info in infos:
            info.wait_for_publish(60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill once part of the burst reached the table
            if len(seqs(root)) >= 2_000:
                break
            time.sleep(0.2)
        assert proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    pub.send(range(burst, burst + 500))  # while no pipeline runs
    set_trigger(root, "available_now")
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    assert [s for s in seqs(root) if s >= 0] == list(range(burst + 500))
