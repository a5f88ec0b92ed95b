"""Payload formats through real brokers: Avro (with Confluent's wire format) and Protocol Buffers
from the nats sink to the nats source, Avro from the rabbitmq sink to the rabbitmq source, text
and raw bytes published by a bare MQTT client; every value read back with deltalake (and the
protobuf messages with the protobuf library itself) equal to what was sent. A payload that
does not decode stops the run naming the source table and where the message came from, and
lands nothing: never a row of NULLs."""

from __future__ import annotations

import json
import math
import time
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from deltalake import DeltaTable
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from rivc_nats import URL as NATS
from rivc_nats import create_stream, js

from rivc_testing import rivc, write_files

pytestmark = pytest.mark.integration

AMQP = "amqp://guest@127.0.0.1:5672/%2F"


def table(root: Path, rel: str) -> list[dict[str, Any]]:
    rows = DeltaTable(str(root / rel)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def same(value: Any) -> Any:
    """NaN equal to itself, for comparing rows."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: same(v) for k, v in value.items()}
    if isinstance(value, list):
        return [same(v) for v in value]
    return value


EDGES = """{{ config(materialized='table') }}
select * from values
  (1, cast(9223372036854775807 as bigint), cast('NaN' as double),
   cast('99999999999999999999.999999999999999999' as decimal(38,18)),
   'comma, "quote", żółw 🐢', X'00FF10', date'0001-01-01', timestamp'2026-03-29 01:30:00.000001',
   array(1, null, 3), true, named_struct('x', 1, 'y', 'a')),
  (2, cast(-9223372036854775808 as bigint), cast('-Infinity' as double),
   cast('-0.000000000000000001' as decimal(38,18)), '', X'', date'9999-12-31',
   timestamp'1970-01-01 00:00:00', array(), false, named_struct('x', null, 'y', '')),
  (3, null, null, null, null, null, null, null, null, null, null)
  as t(id, big, dbl, dec, txt, bin, d, ts, ints, flag, obj)
"""
COLUMNS = (
    "{id: int, big: bigint, dbl: double, dec: 'decimal(38,18)', txt: string, bin: binary, "
    "d: date, ts: timestamp, ints: 'array<int>', flag: boolean, obj: 'struct<x:int,y:string>'}"
)


def maybe(kind: Any) -> list[Any]:
    return ["null", kind]


AVRO = {
    "type": "record",
    "name": "Edge",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "big", "type": maybe("long")},
        {"name": "dbl", "type": maybe("double")},
        {
            "name": "dec",
            "type": maybe(
                {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 18}
            ),
        },
        {"name": "txt", "type": maybe("string")},
        {"name": "bin", "type": maybe("bytes")},
        {"name": "d", "type": maybe({"type": "int", "logicalType": "date"})},
        {"name": "ts", "type": maybe({"type": "long", "logicalType": "timestamp-micros"})},
        {"name": "ints", "type": maybe({"type": "array", "items": maybe("int")})},
        {"name": "flag", "type": maybe("boolean")},
        {
            "name": "obj",
            "type": maybe(
                {
                    "type": "record",
                    "name": "Obj",
                    "fields": [
                        {"name": "x", "type": maybe("int")},
                        {"name": "y", "type": maybe("string")},
                    ],
                }
            ),
        },
    ],
}


def test_avro_through_nats_exact_in_confluents_wire_format_and_a_foreign_id_refused(
    spark, tmp_path, stream
):
    create_stream(stream, ["edges.>"], window_s=120)
    payload = "{format: avro, schema_file: schemas/edge.avsc, confluent_id: 7}"
    root = write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: av\n",
            "schemas/edge.avsc": json.dumps(AVRO),
            "models/edges.sql": EDGES,
            "sinks/bus.yml": f"""
sinks:
  - {{name: out, from: edges, connector: nats,
     config: {{url: "{NATS}", stream: {stream}, subject: edges.avro, payload: {payload}}}}}
  - {{name: landed, from: source:bus.edges, connector: delta, config: {{table_uri: out/landed}}}}
""",
            "sources/bus.yml": f"""
sources:
  - name: bus
    connector: nats
    tables:
      - name: edges
        config: {{url: "{NATS}", stream: {stream}, payload: {payload}}}
        columns: {COLUMNS}
""",
        },
    )
    done = rivc(root, "run", "-s", "edges+", "-s", "sink:out")
    assert done.exit_code == 0, done.output
    done = rivc(root, "run", "-s", "sink:landed")
    assert done.exit_code == 0, done.output
    sent = table(root, "warehouse/edges")
    got = table(root, "out/landed")
    assert same(got) == same(sent)
    assert got[0]["dec"] == Decimal("99999999999999999999.999999999999999999")
    assert got[0]["ts"] == datetime(2026, 3, 29, 1, 30, 0, 1, tzinfo=UTC)
    assert got[0]["bin"] == b"\x00\xff\x10" and got[1]["d"] == date(9999, 12, 31)

    # a message of another schema id: refused by name with its place, nothing landed
    js(lambda j: j.publish("edges.avro", b"\x00\x00\x00\x00\x08\x02"))
    refused = rivc(root, "run", "-s", "sink:landed")
    assert refused.exit_code != 0
    assert "source bus.edges: subject edges.avro seq 4: " in refused.output, refused.output
    assert "written with schema id 8, this table reads 7" in refused.output
    assert len(table(root, "out/landed")) == 3


def reading_descriptor() -> bytes:
    """plant.Reading: the descriptor set `protoc --include_imports --descriptor_set_out` would
    write for it, built with the protobuf library (no protoc here)."""
    files = descriptor_pb2.FileDescriptorSet()
    timestamp_pb2.DESCRIPTOR.CopyToProto(files.file.add())
    f = files.file.add(name="plant.proto", package="plant", syntax="proto3")
    f.dependency.append("google/protobuf/timestamp.proto")
    level = f.enum_type.add(name="Level")
    level.value.add(name="LOW", number=0)
    level.value.add(name="HIGH", number=1)
    msg = f.message_type.add(name="Reading")
    position = msg.nested_type.add(name="Position")
    T = descriptor_pb2.FieldDescriptorProto
    position.field.add(name="lat", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    position.field.add(name="lon", number=2, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    for name, number, kind, label, type_name in (
        ("id", 1, T.TYPE_INT32, T.LABEL_OPTIONAL, None),
        ("device", 2, T.TYPE_STRING, T.LABEL_OPTIONAL, None),
        ("seq", 3, T.TYPE_INT64, T.LABEL_OPTIONAL, None),
        ("temp", 4, T.TYPE_DOUBLE, T.LABEL_OPTIONAL, None),
        ("at", 5, T.TYPE_MESSAGE, T.LABEL_OPTIONAL, ".google.protobuf.Timestamp"),
        ("tags", 6, T.TYPE_STRING, T.LABEL_REPEATED, None),
        ("level", 7, T.TYPE_ENUM, T.LABEL_OPTIONAL, ".plant.Level"),
        ("pos", 8, T.TYPE_MESSAGE, T.LABEL_OPTIONAL, ".plant.Reading.Position"),
    ):
        field = msg.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
    return files.SerializeToString()


READINGS = """{{ config(materialized='table') }}
select * from values
  (1, 'plant/1 żółw', cast(9223372036854775807 as bigint), -0.5d,
   timestamp'2026-11-29 10:00:00.123456', array('a', ''), 'HIGH', named_struct('lat', 52.1d, 'lon', -0.0d)),
  (2, '', cast(-1 as bigint), 1e300d, timestamp'1970-01-01 00:00:00', array(), 'LOW', null)
  as t(id, device, seq, temp, at, tags, level, pos)
"""


def test_protobuf_through_nats_exact_and_readable_by_the_protobuf_library(spark, tmp_path, stream):
    create_stream(stream, ["plant.>"], window_s=120)
    payload = "{format: protobuf, descriptor_file: schemas/plant.desc, message: plant.Reading}"
    root = write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: pb\n",
            "models/readings.sql": READINGS,
            "sinks/bus.yml": f"""
sinks:
  - {{name: out, from: readings, connector: nats,
     config: {{url: "{NATS}", stream: {stream}, subject: plant.readings, payload: {payload}}}}}
  - {{name: landed, from: source:bus.readings, connector: delta, config: {{table_uri: out/landed}}}}
""",
            "sources/bus.yml": f"""
sources:
  - name: bus
    connector: nats
    tables:
      - name: readings
        config: {{url: "{NATS}", stream: {stream}, payload: {payload}}}
        columns: {{id: int, device: string, seq: bigint, temp: double, at: timestamp,
                   tags: 'array<string>', level: string, pos: 'struct<lat:double,lon:double>'}}
""",
        },
    )
    (root / "schemas").mkdir()
    (root / "schemas/plant.desc").write_bytes(reading_descriptor())
    done = rivc(root, "run", "-s", "readings+", "-s", "sink:out")
    assert done.exit_code == 0, done.output

    # the protobuf library reads what the sink published
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(reading_descriptor()).file:
        pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("plant.Reading"))

    async def fetch(j: Any) -> list[bytes]:
        sub = await j.subscribe("plant.>", stream=stream, ordered_consumer=True)
        out = [(await sub.next_msg(timeout=5)).data for _ in range(2)]
        await sub.unsubscribe()
        return out

    sent = sorted((cls.FromString(data) for data in js(fetch)), key=lambda m: m.id)
    assert sent[0].device == "plant/1 żółw" and sent[0].seq == 9223372036854775807
    assert sent[0].at.ToDatetime() == datetime(2026, 11, 29, 10, 0, 0, 123456)
    assert list(sent[0].tags) == ["a", ""] and sent[0].level == 1 and sent[0].pos.lat == 52.1
    assert not sent[1].HasField("pos") and sent[1].temp == 1e300

    done = rivc(root, "run", "-s", "sink:landed")
    assert done.exit_code == 0, done.output
    assert table(root, "out/landed") == table(root, "warehouse/readings")


def test_avro_inline_through_rabbitmq(spark, tmp_path, queue, monkeypatch):
    monkeypatch.setenv("MQ_PASSWORD", "guest")
    payload = json.dumps({"format": "avro", "avro_schema": AVRO})
    root = write_files(
        tmp_path / "q",
        {
            "rivc_project.yml": "name: mqav\n",
            "models/edges.sql": EDGES,
            "sinks/mq.yml": f"""
sinks:
  - {{name: out, from: edges, connector: rabbitmq,
     config: {{url: "{AMQP}", password_env: MQ_PASSWORD, routing_key: {queue}, queue: {queue},
              payload: {payload}}}}}
  - {{name: landed, from: source:mq.edges, connector: delta, config: {{table_uri: out/landed}}}}
""",
            "sources/mq.yml": f"""
sources:
  - name: mq
    connector: rabbitmq
    tables:
      - name: edges
        config: {{url: "{AMQP}", password_env: MQ_PASSWORD, queue: {queue}, payload: {payload}}}
        columns: {COLUMNS}
""",
        },
    )
    done = rivc(root, "run", "-s", "edges+", "-s", "sink:out")
    assert done.exit_code == 0, done.output
    done = rivc(root, "run", "-s", "sink:landed")
    assert done.exit_code == 0, done.output
    assert same(table(root, "out/landed")) == same(table(root, "warehouse/edges"))


def test_text_and_raw_payloads_exact_and_a_bad_one_refused_by_name(spark, tmp_path):
    topic = f"rivc-test/{uuid.uuid4().hex[:8]}"
    tables = {"texts": ("text", "string"), "blobs": ("raw", "binary"), "objs": ("json", None)}
    lines = []
    for name, (fmt, kind) in tables.items():
        columns = f"{{body: {kind}}}" if kind else "{n: int}"
        lines.append(
            f"      - name: {name}\n"
            f'        config: {{url: "mqtt://127.0.0.1:1883", topics: ["{topic}/{name}"], qos: 1,'
            f" client_id: rivc-{name}-{topic[-8:]}, drain_ms: 500, payload: {{format: {fmt}}}}}\n"
            f"        columns: {columns}\n"
        )
    root = write_files(
        tmp_path / "m",
        {
            "rivc_project.yml": "name: pl\n",
            "sources/iot.yml": "sources:\n  - name: iot\n    connector: mqtt\n    tables:\n"
            + "".join(lines),
            "sinks/lake.yml": "sinks:\n"
            + "".join(
                f"  - {{name: {n}, from: source:iot.{n}, connector: delta,"
                f" config: {{table_uri: out/{n}}}}}\n"
                for n in tables
            ),
        },
    )
    first = rivc(root, "run")  # the sessions begin: the broker queues from now on
    assert first.exit_code == 0, first.output

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4().hex[:8]}")
    client.connect("127.0.0.1", 1883)
    client.loop_start()
    texts = ["żółw 🐢", "", "line\nbreak\r\n", "\u0000nul"]
    blobs = [b"\x00\xff\xfe", b"", bytes(range(256)), "żółw".encode()]
    for body in texts:
        client.publish(f"{topic}/texts", body.encode(), qos=1).wait_for_publish(5)
    for blob in blobs:
        client.publish(f"{topic}/blobs", blob, qos=1).wait_for_publish(5)
    for body in (b'{"n": 1}', b"not json", b'{"n": 2}'):
        client.publish(f"{topic}/objs", body, qos=1).wait_for_publish(5)
    time.sleep(0.5)
    refused = rivc(root, "run")
    assert refused.exit_code != 0
    assert f"source iot.objs: topic {topic}/objs: the payload is not a JSON object" in (
        refused.output
    ), refused.output
    got = {n: DeltaTable(str(root / "out" / n)).to_pyarrow_table() for n in ("texts", "blobs")}
    assert sorted(got["texts"].column("body").to_pylist()) == sorted(texts)
    assert sorted(got["blobs"].column("body").to_pylist()) == sorted(blobs)
    assert (
        not (root / "out/objs/_delta_log").exists()
        or DeltaTable(str(root / "out/objs")).to_pyarrow_table().num_rows == 0
    )  # never a row of NULLs

    client.publish(f"{topic}/texts", b"\xff\xfe not utf-8", qos=1).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()
    time.sleep(0.5)
    refused = rivc(root, "run", "-s", "sink:texts")
    assert refused.exit_code != 0
    assert f"source iot.texts: topic {topic}/texts: the payload is not UTF-8 text" in (
        refused.output
    ), refused.output
    assert DeltaTable(str(root / "out/texts")).to_pyarrow_table().num_rows == len(texts)
