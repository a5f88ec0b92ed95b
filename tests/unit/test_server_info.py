"""The warm server's record: read back across rivc versions, and which profiles may use it."""

from __future__ import annotations

import json

from rivc.adapters.spark import server
from rivc.compiler.loading.specs import SparkSpec


def test_an_earlier_record_is_still_read_so_stop_finds_the_server(tmp_path):
    where = tmp_path / ".rivc/server"
    where.mkdir(parents=True)
    old = {"pid": 123, "port": 4567, "token": "t", "fingerprint": "f", "started_at": 1.0}
    (where / "server.json").write_text(json.dumps(old))
    s = server.read(tmp_path)
    assert s is not None and (s.pid, s.port, s.token) == (123, 4567, "t")
    assert s.url == "sc://localhost:4567/;token=t"
    (where / "server.json").write_text("{not json")
    assert server.read(tmp_path) is None


def test_only_a_local_spark_uses_the_warm_server(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert server.local(SparkSpec())
    assert server.local(SparkSpec(master="local[2]"))
    assert not server.local(SparkSpec(master="spark://head:7077"))
    assert not server.local(SparkSpec(remote="sc://spark.internal:15002"))
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    assert not server.local(SparkSpec())


def test_the_fingerprint_follows_the_spark_settings_and_credentials(monkeypatch):
    base = server.fingerprint(SparkSpec())
    assert server.fingerprint(SparkSpec()) == base
    assert server.fingerprint(SparkSpec(conf={"spark.sql.shuffle.partitions": "3"})) != base
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "another")
    assert server.fingerprint(SparkSpec()) != base


def test_a_port_is_the_servers_only_while_a_process_of_its_group_listens_there():
    """What tells a server that lost its port to another program from one that listens: a
    listener on 127.0.0.1 (IPv4 or IPv6) is its own only when a process of its group holds it."""
    import os
    import socket

    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")):
        with socket.socket(family) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            assert server._listens(os.getpgrp(), port) == server.NOBODY  # bound, not listening
            sock.listen()
            assert server._listens(os.getpgrp(), port) == server.SERVER
            assert server._listens(1, port) == server.OTHER  # init's group holds no socket here
        assert server._listens(os.getpgrp(), port) == server.NOBODY
