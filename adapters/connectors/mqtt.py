"""MQTT as a PySpark Python streaming data source, with a durable local spool.

An MQTT broker does not replay history, so Spark's usual "re-read the offsets of a failed batch"
needs a buffer of our own. The stream reader lives in Spark's driver-side Python worker for the
whole query; it keeps a persistent MQTT session (clean_session false, a fixed client id) and
subscribes with the configured QoS. Each message is appended to a spool file and fsynced, and only
then acknowledged (paho's manual ack), so a message is either in the spool or still held by the
broker. Offsets are sequence numbers in the spool: `partitions(start, end)` ships the messages of
[start, end) to the executors inside the partition, and `commit(end)` deletes spool segments that
are entirely below `end`. A restart resumes from Spark's checkpoint, and the spool still holds every
message after it.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rivc.compiler.connectors import MqttSourceConfig

NAME = "rivc_mqtt"
SCHEMA = "payload string, topic string, qos int, received_at timestamp"
SEGMENT_MESSAGES = 10_000  # a spool segment is closed after this many messages
FSYNC_EVERY_S = 0.02  # received messages are made durable (then acknowledged) this often
CONNECT_TIMEOUT_S = 10.0
DRAIN_LIMIT_S = 30.0  # available_now waits at most this long for the broker's queue
METADATA = ("mqtt_topic", "mqtt_qos", "mqtt_received_at")


class Spool:
    """Append-only segments `<first seq>.jsonl`; a message's offset is its sequence number."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        segments = self._segments()
        if not segments:
            (path / _segment_name(0)).touch()
            segments = [0]
        self.first = segments[0]
        last = path / _segment_name(segments[-1])
        self.next = segments[-1] + _complete_lines(last)
        self.durable = self.next
        self._out = open(last, "ab")  # noqa: SIM115  (closed in close())
        self._in_segment = self.next - segments[-1]

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.path.glob("*.jsonl"))

    def append(self, record: dict[str, Any]) -> None:
        if self._in_segment >= SEGMENT_MESSAGES:
            self._rotate()
        self._out.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self.next += 1
        self._in_segment += 1

    def sync(self) -> None:
        """Flush and fsync what was appended; from now on it survives a crash."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self.durable = self.next

    def read(self, start: int, end: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        segments = self._segments()
        for i, first in enumerate(segments):
            upto = segments[i + 1] if i + 1 < len(segments) else self.durable
            if upto <= start or first >= end:
                continue
            with open(self.path / _segment_name(first), "rb") as fh:
                for seq, line in enumerate(fh, start=first):
                    if seq >= end:
                        break
                    if seq >= start:
                        out.append(json.loads(line))
        if len(out) != max(0, end - start):
            raise RuntimeError(
                f"MQTT spool {self.path} holds {len(out)} of messages {start}..{end - 1}: "
                "it was deleted or edited while the checkpoint was kept"
            )
        return out

    def commit(self, end: int) -> None:
        """Messages below `end` are in the sink: drop the segments that hold only those."""
        if end >= self.next and self._in_segment:
            self._rotate()
        segments = self._segments()
        for first, upto in zip(segments, segments[1:], strict=False):
            if upto <= end:
                (self.path / _segment_name(first)).unlink(missing_ok=True)
        self.first = max(self.first, min(end, self.next))

    def reseed(self, start: int) -> None:
        """The checkpoint is ahead of an empty spool (the spool was removed): continue from it."""
        self._out.close()
        for first in self._segments():
            (self.path / _segment_name(first)).unlink()
        (self.path / _segment_name(start)).touch()
        self.first = self.next = self.durable = start
        self._out = open(self.path / _segment_name(start), "ab")  # noqa: SIM115
        self._in_segment = 0

    def _rotate(self) -> None:
        self.sync()
        self._out.close()
        self._out = open(self.path / _segment_name(self.next), "ab")  # noqa: SIM115
        self._in_segment = 0

    def close(self) -> None:
        self.sync()
        self._out.close()


def _segment_name(first: int) -> str:
    return f"{first:016d}.jsonl"


def _complete_lines(path: Path) -> int:
    """Count whole lines; a torn last line (a crash mid-write) is cut off."""
    data = path.read_bytes()
    whole = data.rfind(b"\n") + 1
    if whole != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(whole)
    return data[:whole].count(b"\n")


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
    """Spark pickles the reader before its first call: files, locks and the client are made
    on first use, in the driver-side Python worker that then serves the whole query."""

    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = MqttSourceConfig.model_validate(json.loads(options["config"]))
        self.client_id = options["client_id"]
        self.password = options.get("password") or None
        self.spool_path = options["spool"]
        self.client: Any = None
        self.target: int | None = None  # available_now: the end of this run

    # ------------------------------------------------------------------ MQTT

    def _ensure_connected(self) -> None:
        if self.client is not None:
            return
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.spool = Spool(Path(self.spool_path))
        self.lock = threading.Lock()
        self.pending: list[tuple[int, int]] = []  # (mid, qos) spooled, not yet acknowledged
        self.last_message = 0.0
        self.stopping = threading.Event()

        url = urlparse(self.cfg.url)
        tls = url.scheme == "mqtts"
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=self.cfg.clean_session,
            protocol=mqtt.MQTTv311,
            manual_ack=True,
        )
        if self.cfg.username:
            client.username_pw_set(self.cfg.username, self.password)
        if tls:
            client.tls_set(ca_certs=self.cfg.ca_file, cert_reqs=ssl.CERT_REQUIRED)
        connected = threading.Event()
        failure: list[str] = []

        def on_connect(c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
            if reason.is_failure:
                failure.append(str(reason))
            else:
                c.subscribe([(t, self.cfg.qos) for t in self.cfg.topics])
            connected.set()

        client.on_connect = on_connect
        client.on_message = self._on_message
        try:
            client.connect(
                url.hostname or "localhost",
                url.port or (8883 if tls else 1883),
                keepalive=self.cfg.keepalive_s,
            )
        except OSError as exc:
            raise ConnectionError(f"MQTT broker {self.cfg.url}: {exc}") from None
        client.loop_start()
        if not connected.wait(CONNECT_TIMEOUT_S) or failure:
            client.loop_stop()
            raise ConnectionError(
                f"MQTT broker {self.cfg.url}: {failure[0] if failure else 'no CONNACK'}"
            )
        self.client = client
        threading.Thread(target=self._syncer, name="rivc-mqtt-spool", daemon=True).start()

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        try:
            payload = msg.payload.decode("utf-8")
        except UnicodeDecodeError:
            payload = "base64:" + base64.b64encode(msg.payload).decode()
        record = {"p": payload, "t": msg.topic, "q": msg.qos, "r": time.time()}
        with self.lock:
            self.spool.append(record)
            self.pending.append((msg.mid, msg.qos))
            self.last_message = time.monotonic()

    def _syncer(self) -> None:
        """Make received messages durable, then acknowledge them to the broker."""
        while not self.stopping.wait(FSYNC_EVERY_S):
            self._sync()

    def _sync(self) -> None:
        with self.lock:
            if not self.pending:
                return
            self.spool.sync()
            acks, self.pending = self.pending, []
        for mid, qos in acks:
            if qos:
                self.client.ack(mid, qos)

    # ------------------------------------------------------------------ Spark

    def initialOffset(self) -> dict[str, int]:
        self._ensure_connected()
        return {"seq": self.spool.first}

    def prepareForTriggerAvailableNow(self) -> None:
        """Catch up on what the broker queued: wait until it has been quiet for drain_ms."""
        self._ensure_connected()
        started = time.monotonic()
        self.last_message = max(self.last_message, started)
        quiet = self.cfg.drain_ms / 1000
        while time.monotonic() - self.last_message < quiet:
            if time.monotonic() - started > DRAIN_LIMIT_S:
                break
            time.sleep(0.05)
        self._sync()
        self.target = self.spool.durable

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        self._ensure_connected()
        begin = int(start["seq"])
        with self.lock:
            if self.spool.next < begin:
                self.spool.reseed(begin)
            end = self.spool.durable
        if self.target is not None:
            end = min(end, self.target)
        cap = self.cfg.max_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, limit.max_rows)
        return {"seq": max(begin, min(end, begin + cap))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[MessagesPartition]:
        self._ensure_connected()
        with self.lock:
            records = self.spool.read(int(start["seq"]), int(end["seq"]))
        rows = [(r["p"], r["t"], r["q"], datetime.fromtimestamp(r["r"], UTC)) for r in records]
        return [MessagesPartition(rows)]

    def read(self, partition: MessagesPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        self._ensure_connected()
        with self.lock:
            self.spool.commit(int(end["seq"]))

    def stop(self) -> None:
        if self.client is None:
            return
        self.stopping.set()
        self._sync()  # acknowledge what is spooled, or the broker would send it again
        self.client.disconnect()
        self.client.loop_stop()
        with self.lock:
            self.spool.close()


def read_stream(
    spark: Any,
    cfg: MqttSourceConfig,
    columns: dict[str, str],
    spool: Path,
    client_id: str,
    password: str | None,
) -> Any:
    """The stream as a DataFrame of the declared columns (parsed from the JSON payload)."""
    spark.dataSource.register(MqttSource)
    raw = (
        spark.readStream.format(NAME)
        .option("config", cfg.model_dump_json())
        .option("spool", str(spool))
        .option("client_id", client_id)
        .option("password", password or "")
        .load()
    )
    declared = {k: v for k, v in columns.items() if k not in METADATA}
    ddl = ", ".join(f"`{k}` {v}" for k, v in declared.items())
    parsed = raw.selectExpr(f"from_json(payload, '{ddl}') AS data", "topic", "qos", "received_at")
    select = [f"data.`{k}` AS `{k}`" for k in declared]
    if cfg.metadata_columns:
        select += ["topic AS mqtt_topic", "qos AS mqtt_qos", "received_at AS mqtt_received_at"]
    return parsed.selectExpr(*select)
