"""MQTT as a PySpark Python streaming data source, with a durable local spool.

An MQTT broker does not replay history, so Spark's usual "re-read the offsets of a failed batch"
needs a buffer of our own. The stream reader lives in Spark's driver-side Python worker for the
whole query and starts the receiver (receiver.py), a process of its own that keeps the
persistent MQTT session, appends each message to the spool, hands it to the OS and only then
acknowledges it, and fsyncs every 20 ms. Offsets are sequence numbers in the spool, read only up
to what is fsynced: `partitions(start, end)` ships the messages of [start, end) to the executors
inside the partition, and `commit(end)` deletes spool segments that are entirely below `end`. A
restart resumes from Spark's checkpoint, and the spool still holds every message after it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rivc.compiler.loading.locate import STATE_DIR
from rivc.compiler.loading.secrets import with_secrets

from ...plane.base import SourceContext, register_data_source
from ..payloads import decode_stream
from ..spool import Spool, unspooled
from .spec import MqttSourceConfig

NAME = "rivc_mqtt"
SCHEMA = "payload binary, topic string, qos int, received_at timestamp"
FSYNC_EVERY_S = 0.02  # received messages are made durable (then acknowledged) this often
CONNECT_TIMEOUT_S = 10.0
DRAIN_LIMIT_S = 30.0  # available_now waits at most this long for the broker's queue


class MessagesPartition(InputPartition):
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(len(rows))
        self.rows = rows


class MqttSource(DataSource):
    """`spark.readStream.format("rivc_mqtt").option("config", json).option("spool", dir)`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MqttStreamReader(dict(self.options))


class MqttStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark pickles the reader before its first call; on first use it starts the receiver
    (receiver.py), a process of its own that holds the MQTT session and writes the spool,
    so that Spark's work in this process never slows the acknowledgements down. The reader
    reads the spool up to what the receiver reports durable, and deletes what Spark committed."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.cfg = MqttSourceConfig.model_validate(json.loads(options["config"]))
        self.spool_path = Path(options["spool"])
        self.receiver: Any = None
        self.target: int | None = None  # available_now: the end of this run

    def _ensure_connected(self) -> None:
        if self.receiver is not None and self.receiver.poll() is None:
            return
        self.receiver = start_receiver(self.options, self.spool_path, self.cfg.connect_timeout_s)
        self.spool = Spool(self.spool_path, writer=False)

    def _status(self) -> dict[str, Any]:
        return read_status(self.spool_path, self.receiver)

    # ------------------------------------------------------------------ Spark

    def initialOffset(self) -> dict[str, int]:
        self._ensure_connected()
        return {"seq": self.spool.first_segment()}

    def prepareForTriggerAvailableNow(self) -> None:
        """Catch up on what the broker queued: wait until it has been quiet for drain_ms."""
        self._ensure_connected()
        started = time.time()
        quiet = self.cfg.drain_ms / 1000
        while time.time() - max(started, self._status()["last_message"]) < quiet:
            if time.time() - started > DRAIN_LIMIT_S:
                break
            time.sleep(0.05)
        self.target = self._settled()

    def _settled(self) -> int:
        """The durable end once every message received so far is fsynced."""
        deadline = time.time() + 5
        status = self._status()
        while status["durable"] < status["received"] and time.time() < deadline:
            time.sleep(FSYNC_EVERY_S)
            status = self._status()
        return int(status["durable"])

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        self._ensure_connected()
        begin = int(start["seq"])
        status = self._status()
        if status["received"] < begin:  # the spool was removed, the checkpoint kept
            self._reseed(begin)
            status = self._status()
        end = int(status["durable"])
        if self.target is not None:
            end = min(end, self.target)
        cap = self.cfg.max_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, limit.max_rows)
        return {"seq": max(begin, min(end, begin + cap))}

    def _reseed(self, start: int) -> None:
        stop_receiver(self.receiver)
        Spool(self.spool_path, writer=True).reseed(start)
        self.receiver = start_receiver(self.options, self.spool_path, self.cfg.connect_timeout_s)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[MessagesPartition]:
        self._ensure_connected()
        records = self.spool.read(int(start["seq"]), int(end["seq"]))
        rows = [
            (unspooled(r), r["t"], r["q"], datetime.fromtimestamp(r["r"], UTC)) for r in records
        ]
        return [MessagesPartition(rows)]

    def read(self, partition: MessagesPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        self._ensure_connected()
        self.spool.commit(int(end["seq"]))

    def stop(self) -> None:
        if self.receiver is not None:
            stop_receiver(self.receiver)
            self.receiver = None


STATUS = "status.json"


def start_receiver(options: dict[str, str], spool: Path, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """Start the receiver process and wait until it is subscribed (or name why it is not)."""
    import subprocess
    import sys

    spool.mkdir(parents=True, exist_ok=True)
    (spool / STATUS).unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rivc.adapters.connectors.mqtt.receiver"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # terminal signals are rivc's; the reader stops it with SIGTERM
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(options).encode())  # the password travels here, not in argv
    proc.stdin.close()
    deadline = time.time() + timeout + 5
    while time.time() < deadline:
        status = _load_status(spool)
        if status is not None:
            if status.get("error"):
                proc.wait(5)
                raise ConnectionError(status["error"])
            return proc
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
            lines = err.strip().splitlines()
            raise ConnectionError(
                f"MQTT receiver exited: {lines[-1] if lines else proc.returncode}"
            )
        time.sleep(0.02)
    proc.kill()
    raise ConnectionError("MQTT receiver did not subscribe in time")


def stop_receiver(proc: Any) -> None:
    """SIGTERM: the receiver fsyncs, disconnects (the broker keeps the session) and exits."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:  # noqa: BLE001  (subprocess.TimeoutExpired: it did not stop in time)
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def _load_status(spool: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((spool / STATUS).read_text())
        return data
    except (OSError, ValueError):
        return None


def read_status(spool: Path, proc: Any) -> dict[str, Any]:
    status = _load_status(spool)
    if proc is not None and proc.poll() is not None:
        raise ConnectionError(
            f"MQTT receiver stopped (exit {proc.returncode}): "
            + ((status or {}).get("error") or "see Spark's log")
        )
    if status is None:
        raise ConnectionError("MQTT receiver wrote no status")
    return status


def read(spark: Any, ctx: SourceContext[MqttSourceConfig]) -> Any:
    """The registry's entry point: the stream of `ctx.name`, spooled under .rivc/spool/, as the
    declared columns decoded from each payload."""
    cfg: MqttSourceConfig = ctx.config
    source_name, table_name = ctx.name.split(".", 1)
    password = cfg.password or (os.environ.get(cfg.password_env) if cfg.password_env else None)
    register_data_source(spark, MqttSource)
    raw = (
        spark.readStream.format(NAME)
        .option("config", with_secrets(cfg))
        .option("spool", str(ctx.root / STATE_DIR / "spool" / ctx.name))
        .option("client_id", cfg.client_id or f"rivc-{ctx.project}-{source_name}-{table_name}")
        .option("password", password or "")
        .load()
    )
    metadata = {"mqtt_topic": "topic", "mqtt_qos": "qos", "mqtt_received_at": "received_at"}
    return decode_stream(raw, ctx, metadata, "concat('topic ', topic)")


def probe(cfg: MqttSourceConfig, _root: Path, _storage: Mapping[str, str]) -> tuple[bool, str]:
    """Connect and authenticate to the broker with a throwaway clean session."""
    import secrets
    import ssl
    import threading
    from urllib.parse import urlparse

    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    url = urlparse(cfg.url)
    tls = url.scheme == "mqtts"
    host, port = url.hostname or "localhost", url.port or (8883 if tls else 1883)
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=f"rivc-doctor-{secrets.token_hex(4)}"
    )
    if cfg.username:
        password = cfg.password or (os.environ.get(cfg.password_env) if cfg.password_env else None)
        client.username_pw_set(cfg.username, password)
    if tls:
        client.tls_set(ca_certs=cfg.ca_file, cert_reqs=ssl.CERT_REQUIRED)
    answered = threading.Event()
    reason: list[Any] = []

    def on_connect(_c: Any, _u: Any, _f: Any, code: Any, _p: Any) -> None:
        reason.append(code)
        answered.set()

    client.on_connect = on_connect
    try:
        client.connect(host, port, keepalive=10)
    except OSError as exc:
        return False, f"connectivity error: {host}:{port}: {exc}"
    client.loop_start()
    try:
        if not answered.wait(5):
            return False, f"connectivity error: {host}:{port}: no answer from the broker"
        if reason[0].is_failure:
            # bad user name or password, not authorized (MQTT 3.1.1: 4, 5; MQTT 5: 134, 135)
            category = "auth error" if reason[0].value in (4, 5, 134, 135) else "other"
            return False, f"{category}: {reason[0]}"
        return True, f"{host}:{port}"
    finally:
        client.disconnect()
        client.loop_stop()
