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

import base64
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
from ..payloads import decode
from .spec import MqttSourceConfig

NAME = "rivc_mqtt"
SCHEMA = "payload binary, topic string, qos int, received_at timestamp"
SEGMENT_MESSAGES = 10_000  # a spool segment is closed after this many messages
FSYNC_EVERY_S = 0.02  # received messages are made durable (then acknowledged) this often
CONNECT_TIMEOUT_S = 10.0
DRAIN_LIMIT_S = 30.0  # available_now waits at most this long for the broker's queue


def spooled(data: bytes) -> dict[str, str]:
    """A payload as the spool's JSON line holds it: UTF-8 text as it is ("p"), other bytes in
    base64 ("b"); unspooled gives the bytes back exactly."""
    try:
        return {"p": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b": base64.b64encode(data).decode()}


def unspooled(record: Mapping[str, Any]) -> bytes:
    if "b" in record:
        return base64.b64decode(record["b"])
    text: str = record["p"]
    return text.encode("utf-8")


class Spool:
    """Append-only segments `<first seq>.jsonl`; a message's offset is its sequence number."""

    def __init__(self, path: Path, writer: bool = True) -> None:
        """One writer (the receiver) appends; readers (Spark's side) read and commit."""
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        segments = self._segments()
        if not segments and writer:
            (path / _segment_name(0)).touch()
            segments = [0]
        self.first = segments[0] if segments else 0
        self.next = self.durable = self.first
        self._out: Any = None
        self._in_segment = 0
        if writer:
            last = path / _segment_name(segments[-1])
            self.next = segments[-1] + _complete_lines(last)
            self.durable = self.next
            self._out = open(last, "ab")  # noqa: SIM115  (closed in close())
            self._in_segment = self.next - segments[-1]

    def first_segment(self) -> int:
        segments = self._segments()
        return segments[0] if segments else 0

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.path.glob("*.jsonl"))

    def append(self, record: dict[str, Any]) -> None:
        if self._in_segment >= SEGMENT_MESSAGES:
            self._rotate()
        self._out.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self.next += 1
        self._in_segment += 1

    def fileno(self) -> int:
        return int(self._out.fileno())

    def flush(self) -> None:
        """Hand what was appended to the OS: from now on it survives a kill of this process."""
        self._out.flush()

    def sync(self) -> None:
        """Flush and fsync what was appended; from now on it survives a machine crash."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self.durable = self.next

    def read(self, start: int, end: int) -> list[dict[str, Any]]:
        """Messages [start, end), which the writer has made durable."""
        out: list[dict[str, Any]] = []
        segments = self._segments()
        for i, first in enumerate(segments):
            upto = segments[i + 1] if i + 1 < len(segments) else end
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
        """Messages below `end` are in the sink: drop the segments that hold only those (never
        the newest, which the writer appends to)."""
        segments = self._segments()
        for first, upto in zip(segments, segments[1:], strict=False):
            if upto <= end:
                (self.path / _segment_name(first)).unlink(missing_ok=True)
        self.first = max(self.first, end)

    def reseed(self, start: int) -> None:
        """The checkpoint is ahead of an empty spool (the spool was removed): continue from it."""
        if self._out is not None:
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
    return decode(
        raw,
        cfg.payload,
        ctx.root,
        ctx.name,
        ctx.columns,
        metadata if cfg.metadata_columns else None,
        "concat('topic ', topic)",
    )


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
