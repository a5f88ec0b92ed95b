"""The MQTT spool: sequence numbers survive restarts, commits drop whole segments, a torn last
line is cut off, and a spool behind the checkpoint is reseeded."""

from __future__ import annotations

import pytest

from rivc.adapters.connectors import mqtt
from rivc.adapters.connectors.mqtt import Spool


def _fill(spool: Spool, start: int, end: int) -> None:
    for i in range(start, end):
        spool.append({"p": f'{{"i": {i}}}', "t": "t", "q": 1, "r": 0.0})
    spool.sync()


def test_offsets_survive_a_restart_and_commit_drops_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(mqtt, "SEGMENT_MESSAGES", 10)
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
    again.commit(25)  # everything committed: only a fresh, empty segment is left
    assert [(p.name, p.stat().st_size) for p in tmp_path.iterdir()] == [
        ("0000000000000025.jsonl", 0)
    ]
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
