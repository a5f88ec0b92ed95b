"""The MQTT receiver's client settings against real Mosquitto brokers (one of the test's own where
it must stop, restart or refuse): MQTT 3.1.1, a last will, reconnecting with backoff after the
broker went away, and a refusal that stops it. No Spark: the receiver is the process the stream
reader starts, read back through its spool."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from rivc.adapters.connectors.mqtt.source import STATUS, start_receiver, stop_receiver
from rivc.adapters.connectors.spool import Spool
from rivc_testing import free_port

pytestmark = pytest.mark.integration


class Broker:
    """A Mosquitto of the test's own on a free port, its sessions persisted in its folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self, anonymous: bool = True) -> None:
        conf = self.folder / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous {str(anonymous).lower()}\n"
            "user root\n"  # when started as root: stays so, to write its folder
            f"persistence true\npersistence_location {self.folder}/\n"
            f"log_dest file {self.folder}/mosquitto.log\nlog_type all\n"
        )
        self.proc = subprocess.Popen(
            ["/usr/sbin/mosquitto", "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                client = publisher(self.port)
                client.disconnect()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("mosquitto did not start")

    def protocols(self, client_id: str) -> list[str]:
        """The protocol each connection of `client_id` spoke, from the broker's log: p2 is
        MQTT 3.1.1, p5 MQTT 5."""
        log = (self.folder / "mosquitto.log").read_text()
        return re.findall(rf" as {re.escape(client_id)} \((p\d)", log)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # mosquitto saves its sessions on SIGTERM
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "broker")
    yield b
    b.stop()


def publisher(port: int = 1883, version: int = mqtt.MQTTv311) -> mqtt.Client:
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4().hex[:8]}", protocol=version
    )
    client.connect("127.0.0.1", port)
    return client


def publish(port: int, topic: str, payloads: list[str], qos: int = 1) -> None:
    client = publisher(port)
    client.loop_start()
    for payload in payloads:
        client.publish(topic, payload, qos=qos).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


def receiver(spool: Path, port: int, **config: Any) -> Any:
    cfg = {"url": f"mqtt://127.0.0.1:{port}", "topics": ["t/#"], "qos": 1, **config}
    options = {"config": json.dumps(cfg), "spool": str(spool), "client_id": spool.name}
    return start_receiver(options, spool, 5)


def status(spool: Path) -> dict[str, Any]:
    return dict(json.loads((spool / STATUS).read_text()))


def spooled(spool: Path, count: int, timeout: float = 10) -> list[str]:
    """The payloads of the first `count` messages, once the receiver made them durable."""
    deadline = time.time() + timeout
    while status(spool)["durable"] < count:
        assert time.time() < deadline, status(spool)
        time.sleep(0.02)
    return [r["p"] for r in Spool(spool, writer=False).read(0, count)]


def retained(port: int, topic: str, wait: float) -> list[bytes]:
    """What a new subscriber to `topic` receives within `wait` seconds (a retained message)."""
    got: list[bytes] = []
    client = publisher(port)
    client.on_message = lambda _c, _u, m: got.append(m.payload)
    client.subscribe(topic, qos=1)
    client.loop_start()
    deadline = time.time() + wait
    while not got and time.time() < deadline:
        time.sleep(0.05)
    client.disconnect()
    client.loop_stop()
    return got


def test_mqtt_3_1_1_keeps_its_session_and_every_qos(tmp_path, broker):
    broker.start()
    spool = tmp_path / f"r311-{uuid.uuid4().hex[:6]}"
    proc = receiver(spool, broker.port, protocol_version="3.1.1", qos=2)
    publish(broker.port, "t/a", ["q2-0", "q2-1"], qos=2)
    publish(broker.port, "t/b", ["q1-2"], qos=1)
    assert spooled(spool, 3) == ["q2-0", "q2-1", "q1-2"]
    stop_receiver(proc)  # a DISCONNECT: the broker keeps the 3.1.1 session and queues for it
    publish(broker.port, "t/a", ["while-away-3", "while-away-4"], qos=2)
    proc = receiver(spool, broker.port, protocol_version="3.1.1", qos=2)
    assert spooled(spool, 5)[3:] == ["while-away-3", "while-away-4"]
    stop_receiver(proc)
    assert broker.protocols(spool.name) == ["p2", "p2"]


def test_a_last_will_on_a_kill_and_none_on_a_stop(tmp_path, broker):
    broker.start()
    for version in ("5", "3.1.1"):
        killed, stopped = f"will/{version}/killed", f"will/{version}/stopped"
        will = {"message": "offline", "qos": 1, "retain": True}
        proc = receiver(
            tmp_path / f"k{version}", broker.port, protocol_version=version,
            last_will={"topic": killed, **will},
        )  # fmt: skip
        os.killpg(proc.pid, signal.SIGKILL)  # no DISCONNECT: the broker sends the will
        stop_receiver(proc)  # reaps it
        assert retained(broker.port, killed, 5) == [b"offline"], version
        proc = receiver(
            tmp_path / f"s{version}", broker.port, protocol_version=version,
            last_will={"topic": stopped, **will},
        )  # fmt: skip
        stop_receiver(proc)
        assert retained(broker.port, stopped, 1) == [], version


def test_a_lost_broker_is_reached_again_with_backoff_and_a_refusal_stops(tmp_path, broker):
    broker.start()
    spool = tmp_path / f"rc-{uuid.uuid4().hex[:6]}"
    proc = receiver(spool, broker.port, retry_initial_ms=50, retry_max_ms=400)
    publish(broker.port, "t/x", ["before-0", "before-1"])
    assert spooled(spool, 2) == ["before-0", "before-1"]

    broker.stop()
    deadline = time.time() + 10
    while "reconnecting" not in status(spool):
        assert time.time() < deadline and proc.poll() is None, status(spool)
        time.sleep(0.05)
    assert "closed the connection" in status(spool)["reconnecting"]
    time.sleep(1.5)  # several refused attempts, each wait longer, up to retry_max_ms
    assert proc.poll() is None and "Connection refused" in status(spool)["reconnecting"]

    broker.start()  # the session persisted: the subscription is renewed on it
    deadline = time.time() + 10
    while "reconnecting" in status(spool):
        assert time.time() < deadline, status(spool)
        time.sleep(0.05)
    publish(broker.port, "t/x", ["after-2", "after-3"])
    assert spooled(spool, 4) == ["before-0", "before-1", "after-2", "after-3"]

    broker.stop()
    broker.start(anonymous=False)  # the broker now refuses the client: the stream stops
    assert proc.wait(10) == 2
    stop_receiver(proc)
    assert "connection refused (not authorized)" in status(spool)["error"]
    assert spooled(spool, 4)[-1] == "after-3"  # the spool still holds every message
