"""The MQTT source's receiver: a process of its own that holds the MQTT session, appends every
message to the spool and acknowledges it at once, and fsyncs in groups.

It is started by the stream reader (mqtt.py) with the reader's options as JSON on stdin, and
reports through `<spool>/status.json` (written atomically): `received` (messages in the spool
file), `durable` (fsynced: what Spark may read), `last_message` (a wall-clock time), or `error`.
It stops on SIGTERM, or when the process that started it is gone; either way it fsyncs and
disconnects without cleaning the session, so the broker keeps queueing for it.

What survives what (docs/streaming.md): an acknowledged message is in the spool file, so a kill
of rivc, Spark or this process loses nothing; a machine crash can lose acknowledged messages of
the last 20 ms that were not yet fsynced (and never read by Spark).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..spool import Spool, spooled
from .source import CONNECT_TIMEOUT_S, FSYNC_EVERY_S, STATUS
from .spec import MqttSourceConfig


class Receiver:
    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = MqttSourceConfig.model_validate(json.loads(options["config"]))
        self.client_id = options["client_id"]
        self.password = options.get("password") or None
        self.path = Path(options["spool"])
        self.spool = Spool(self.path)
        self.lock = threading.Lock()
        self.last_message = 0.0
        self.unsynced = False
        self.stopping = threading.Event()
        self.awaiting_release: set[int] = set()  # QoS 2: PUBREC sent, PUBREL not yet seen
        self.failure: str | None = None  # why the stream stops (a refusal)
        self.lost: str | None = None  # why the last connection ended
        self.handling = threading.Lock()  # held while one read's messages are spooled and acked
        self.parent = os.getppid()
        self.v5 = self.cfg.protocol_version == "5"

    def status(self, **extra: Any) -> None:
        data = {
            "received": self.spool.next,
            "durable": self.spool.durable,
            "last_message": self.last_message,
            "pid": os.getpid(),
            **extra,
        }
        tmp = self.path / f".{STATUS}.tmp"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path / STATUS)

    def connect(self) -> Wire:
        """CONNECT and SUBSCRIBE over a plain or TLS socket, in MQTT 5 or 3.1.1
        (`protocol_version`). MQTT 5 lets the client say how many messages it takes in flight
        (Receive Maximum, `max_inflight`): the broker then sends a burst at once instead of 20
        at a time, so its queue never overflows while we run. A broker's refusal is Refused."""
        import socket

        cfg = self.cfg
        url = urlparse(cfg.url)
        tls = url.scheme == "mqtts"
        where = f"MQTT broker {cfg.url}"
        host, port = url.hostname or "localhost", url.port or (8883 if tls else 1883)
        try:
            sock = socket.create_connection((host, port), timeout=cfg.connect_timeout_s)
            if tls:
                context = ssl.create_default_context(cafile=cfg.ca_file)
                sock = context.wrap_socket(sock, server_hostname=host)
            wire = Wire(sock, cfg.connect_timeout_s)
            flags = 0 if cfg.clean_session is False else 0x02
            payload = _utf8(self.client_id)
            will = cfg.last_will
            if will is not None:
                flags |= 0x04 | will.qos << 3 | (0x20 if will.retain else 0)
                message = will.message.encode()
                payload += (_varint(0) if self.v5 else b"") + _utf8(will.topic)
                payload += len(message).to_bytes(2, "big") + message
            if cfg.username:
                flags |= 0x80
                payload += _utf8(cfg.username)
                if self.password is not None:
                    flags |= 0x40
                    payload += _utf8(self.password)
            header = _utf8("MQTT") + bytes([5 if self.v5 else 4, flags])
            header += cfg.keepalive_s.to_bytes(2, "big")
            if self.v5:
                props = bytes([0x21]) + cfg.max_inflight.to_bytes(2, "big")
                if not cfg.clean_session:  # the session outlives the connection
                    props += bytes([0x11]) + (0xFFFFFFFF).to_bytes(4, "big")
                header += _varint(len(props)) + props
            wire.send(0x10, header + payload)
            kind, body = wire.packet()
            if kind != 0x20 or len(body) < 2:
                raise ConnectionError("no CONNACK")
            if body[1]:
                refused = (_REFUSED if self.v5 else _REFUSED_311).get(body[1], hex(body[1]))
                raise Refused(f"{where}: connection refused ({refused})")
            filters = b"".join(_utf8(t) + bytes([cfg.qos]) for t in cfg.topics)
            wire.send(0x82, (1).to_bytes(2, "big") + (_varint(0) if self.v5 else b"") + filters)
            while True:  # messages queued for this session may come before the SUBACK
                kind, body = wire.packet()
                if kind == 0x90:  # SUBACK: id, (MQTT 5: properties,) a code per filter
                    at = 2
                    if self.v5:
                        size, at = _read_varint(body, at)
                        at += size
                    if any(code >= 0x80 for code in body[at:]):
                        raise Refused(f"{where}: subscription refused")
                    break
                self.handle(wire, kind, body)
        except Refused:
            raise
        except OSError as exc:  # the socket's, and no CONNACK: named with the broker
            raise ConnectionError(f"{where}: {exc}") from None
        return wire

    def handle(self, wire: Wire, kind: int, body: bytes) -> None:
        self.handle_all(wire, [(kind, body)])

    def handle_all(self, wire: Wire, packets: list[tuple[int, bytes]]) -> None:
        """Spool the PUBLISH packets of one read together, hand them to the OS, then send
        their acknowledgements together: one write and one send for many messages."""
        acks = bytearray()
        now = time.time()
        records = []
        for kind, body in packets:
            ptype = kind & 0xF0
            if ptype == 0x30:
                qos = (kind >> 1) & 3
                n = int.from_bytes(body[:2], "big")
                topic = bytes(body[2 : 2 + n]).decode("utf-8", "replace")
                at = 2 + n
                pid = 0
                if qos:
                    pid = int.from_bytes(body[at : at + 2], "big")
                    at += 2
                if self.v5:
                    size, at = _read_varint(body, at)  # PUBLISH properties
                    at += size
                if qos == 2 and pid in self.awaiting_release:
                    acks += bytes([0x50, 2]) + pid.to_bytes(2, "big")  # a resent PUBLISH
                    continue
                records.append({**spooled(bytes(body[at:])), "t": topic, "q": qos, "r": now})
                if qos == 1:
                    acks += bytes([0x40, 2]) + pid.to_bytes(2, "big")  # PUBACK
                elif qos == 2:
                    self.awaiting_release.add(pid)
                    acks += bytes([0x50, 2]) + pid.to_bytes(2, "big")  # PUBREC
            elif ptype == 0x60:  # PUBREL
                pid = int.from_bytes(body[:2], "big")
                self.awaiting_release.discard(pid)
                acks += bytes([0x70, 2]) + pid.to_bytes(2, "big")  # PUBCOMP
        if self.stopping.is_set():
            return  # neither spooled nor acknowledged: the broker sends them again
        if records:
            with self.lock:
                for record in records:
                    self.spool.append(record)
                self.spool.flush()  # in the OS: a kill of any process keeps them
                self.unsynced = True
                self.last_message = now
        if acks:
            wire.sendall(bytes(acks))

    def sync(self) -> None:
        """fsync outside the lock (on a duplicate descriptor, which a rotation cannot close),
        so that receiving never waits for the disk; then report."""
        with self.lock:
            unsynced, self.unsynced = self.unsynced, False
            upto = self.spool.next
            fd = os.dup(self.spool.fileno()) if unsynced else -1
        if fd >= 0:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        with self.lock:
            self.spool.durable = max(self.spool.durable, upto)
            self.status()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is rivc's to handle
        try:
            wire: Wire | None = self.connect()
        except ConnectionError as exc:  # the first connection: a wrong URL, credentials, ...
            self.status(error=str(exc))
            return 2
        self.status()
        while wire is not None:
            lost = self.follow(wire)
            wire = self.reconnect(lost) if lost else None
        with self.lock:
            self.spool.close()
            self.status(**({"error": self.failure} if self.failure else {}))
        return 2 if self.failure else 0

    def follow(self, wire: Wire) -> str | None:
        """Receive on `wire`, fsync and ping until stopped (None, after a DISCONNECT: the
        broker keeps the session and sends no last will) or the connection is lost (why)."""
        self.lost = None
        reader = threading.Thread(target=self.receive, args=(wire,), daemon=True)
        reader.start()
        ping_every = self.cfg.keepalive_s / 2
        pinged = time.monotonic()
        while not self.stopping.wait(FSYNC_EVERY_S) and reader.is_alive():
            self.sync()
            if os.getppid() != self.parent:  # the reader's process is gone
                break
            if time.monotonic() - pinged > ping_every:
                with contextlib.suppress(OSError):  # a lost connection is the reader's to see
                    wire.sendall(bytes([0xC0, 0]))  # PINGREQ
                pinged = time.monotonic()
        if self.lost is not None and not self.stopping.is_set():
            wire.close()
            reader.join(5)
            self.sync()
            return self.lost
        with self.handling:  # a read being handled finishes: its acknowledgements go out
            self.stopping.set()
        with contextlib.suppress(OSError):  # every acknowledgement was sent before this
            wire.sendall(bytes([0xE0, 0]))  # DISCONNECT (the broker keeps the session)
        wire.close()
        reader.join(5)
        return None

    def reconnect(self, lost: str) -> Wire | None:
        """Connect again after a lost connection, waiting retry_initial_ms, then each wait
        retry_multiplier times the last, up to retry_max_ms; None when stopped, or when the
        broker refuses the client (self.failure says why: the stream stops)."""
        delay = self.cfg.retry_initial_ms / 1000
        while True:
            with self.lock:
                self.status(reconnecting=lost)
            if self.stopping.wait(delay) or os.getppid() != self.parent:
                return None
            try:
                wire = self.connect()
            except Refused as exc:
                self.failure = str(exc)
                return None
            except ConnectionError as exc:
                lost = str(exc)
                delay = min(delay * self.cfg.retry_multiplier, self.cfg.retry_max_ms / 1000)
                continue
            with self.lock:
                self.status()
            return wire

    def receive(self, wire: Wire) -> None:
        """Read packets as they come, handling all those of one socket read together; a lost
        connection is noted in self.lost."""
        try:
            while not self.stopping.is_set():
                packets = wire.packets()
                if packets is None:
                    self.lost = f"MQTT broker {self.cfg.url} closed the connection"
                    break
                with self.handling:
                    self.handle_all(wire, packets)
        except OSError as exc:
            if not self.stopping.is_set():
                self.lost = f"MQTT broker {self.cfg.url}: {exc}"


class Refused(ConnectionError):
    """The broker answered and said no (credentials, protocol, subscription): connecting again
    would not help."""


_REFUSED = {
    0x01: "the broker speaks MQTT 3.1.1 only: set protocol_version: 3.1.1",
    0x84: "unsupported protocol version: the broker lacks MQTT 5: set protocol_version: 3.1.1",
    0x85: "client id rejected",
    0x86: "bad user name or password",
    0x87: "not authorized",
    0x88: "server unavailable",
    0x89: "server busy",
    0x8C: "bad authentication method",
}


_REFUSED_311 = {
    0x01: "unacceptable protocol version",
    0x02: "client id rejected",
    0x03: "server unavailable",
    0x04: "bad user name or password",
    0x05: "not authorized",
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    """A variable byte integer at `at`: (its value, the offset after it)."""
    value, mult = 0, 1
    while True:
        byte = data[at]
        at += 1
        value += (byte & 0x7F) * mult
        mult *= 128
        if not byte & 0x80:
            return value, at


def _utf8(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


class Wire:
    """MQTT's framing over a socket: a type byte, a variable-length size, the body."""

    def __init__(self, sock: Any, timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.sock = sock
        self.timeout = timeout  # for a packet during the handshake
        self.buffer = bytearray()
        self.ready: collections.deque[tuple[int, bytes]] = collections.deque()
        self.send_lock = threading.Lock()

    def send(self, kind: int, body: bytes) -> None:
        self.sendall(bytes([kind]) + _varint(len(body)) + body)

    def sendall(self, data: bytes) -> None:
        with self.send_lock:
            self.sock.sendall(data)

    def _parse(self) -> list[tuple[int, bytes]]:
        out, at, buf = [], 0, self.buffer
        while True:
            if len(buf) - at < 2:
                break
            size, mult, i = 0, 1, at + 1
            while True:
                if i >= len(buf):
                    size = -1
                    break
                byte = buf[i]
                size += (byte & 0x7F) * mult
                mult *= 128
                i += 1
                if not byte & 0x80:
                    break
            if size < 0 or len(buf) - i < size:
                break
            out.append((buf[at], bytes(buf[i : i + size])))
            at = i + size
        del buf[:at]
        return out

    def _fill(self) -> bool:
        """Read from the socket into `ready`; False when the broker closed the connection."""
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            return False
        self.buffer += chunk
        self.ready.extend(self._parse())
        return True

    def packets(self) -> list[tuple[int, bytes]] | None:
        """The whole packets of the next read (at least one); None when the broker closed."""
        self.sock.settimeout(None)
        while not self.ready:
            if not self._fill():
                return None
        out = list(self.ready)
        self.ready.clear()
        return out

    def packet(self) -> tuple[int, bytes]:
        """The next packet, during the handshake (with a time limit)."""
        self.sock.settimeout(self.timeout)
        while not self.ready:
            if not self._fill():
                raise ConnectionError("the broker closed the connection")
        return self.ready.popleft()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def main() -> int:
    return Receiver(json.loads(sys.stdin.read())).run()


if __name__ == "__main__":
    sys.exit(main())
