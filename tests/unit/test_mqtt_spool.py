"""The MQTT spool: sequence numbers survive restarts, commits drop whole segments, a torn last
line is cut off, and a spool behind the checkpoint is reseeded."""

from __future__ import annotations

import pytest

from rivc.adapters.connectors import spool as spools
from rivc.adapters.connectors.spool import Spool


def _fill(spool: Spool, start: int, end: int) -> None:
    for i in range(start, end):
        spool.append({"p": f'{{"i": {i}}}', "t": "t", "q": 1, "r": 0.0})
    spool.sync()


def test_offsets_survive_a_restart_and_commit_drops_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(spools, "SEGMENT_MESSAGES", 10)
    spool = Spool(tmp_path)
    _fill(spool, 0, 25)
    assert [r["p"] for r in spool.read(8, 12)] == [f'{{"i": {i}}}' for i in range(8, 12)]
    spool.close()

    again = Spool(tmp_path)
    assert (again.first, again.next) == (0, 25)
    again.commit(12)  # [0, 10) is entirely committed; [10, 20) is not
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "0000000000000010.jsonl",
        "0000000000000020.jsonl",
    ]
    assert [r["p"] for r in again.read(12, 25)][0] == '{"i": 12}'
    reader = Spool(tmp_path, writer=False)  # Spark's side: reads and commits, never appends
    reader.commit(25)  # everything committed: the writer's newest segment stays
    assert [p.name for p in tmp_path.iterdir()] == ["0000000000000020.jsonl"]
    assert reader.first_segment() == 20
    again.close()
    third = Spool(tmp_path)
    assert third.next == 25
    third.close()


def test_torn_line_is_cut_and_missing_messages_are_an_error(tmp_path):
    spool = Spool(tmp_path)
    _fill(spool, 0, 3)
    spool.close()
    with open(tmp_path / "0000000000000000.jsonl", "ab") as fh:
        fh.write(b'{"p": "half')  # a crash in the middle of a write
    again = Spool(tmp_path)
    assert again.next == 3
    with pytest.raises(RuntimeError, match="holds 3 of messages 0..4"):
        again.read(0, 5)
    again.close()


def test_reseed_when_the_checkpoint_is_ahead(tmp_path):
    spool = Spool(tmp_path)
    spool.reseed(40)
    _fill(spool, 40, 42)
    assert (spool.first, spool.next, len(spool.read(40, 42))) == (40, 42, 2)
    spool.close()


class _Sock:
    """A socket that returns prepared chunks and records what is sent."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.sent = list(chunks), b""

    def settimeout(self, _t: object) -> None: ...

    def recv(self, _n: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def sendall(self, data: bytes) -> None:
        self.sent += data


def test_the_receiver_spools_a_read_then_acknowledges_it(tmp_path):
    import json

    from rivc.adapters.connectors.mqtt.receiver import Receiver, Wire

    def publish(pid: int, payload: bytes, qos: int = 1) -> bytes:
        body = (3).to_bytes(2, "big") + b"a/b" + pid.to_bytes(2, "big") + b"\x00" + payload
        n = len(body)
        size = bytes([n]) if n < 128 else bytes([n % 128 | 0x80, n // 128])
        return bytes([0x30 | qos << 1]) + size + body

    big = publish(2, b"x" * 200)  # a remaining length of two bytes
    stream = publish(1, b'{"i": 1}') + big
    wire = Wire(_Sock([stream[:7], stream[7:150], stream[150:]]))
    config = {"url": "mqtt://127.0.0.1:1", "topics": ["a/+"], "client_id": "c"}
    receiver = Receiver(
        {"config": json.dumps(config), "client_id": "c", "spool": str(tmp_path / "s")}
    )
    while receiver.spool.next < 2:
        packets = wire.packets()
        assert packets is not None
        receiver.handle_all(wire, packets)
    assert [r["p"] for r in receiver.spool.read(0, 2)] == ['{"i": 1}', "x" * 200]
    assert wire.sock.sent == bytes([0x40, 2, 0, 1, 0x40, 2, 0, 2])  # PUBACK 1, PUBACK 2
    assert wire.packets() is None  # the broker closed the connection
    receiver.spool.close()
