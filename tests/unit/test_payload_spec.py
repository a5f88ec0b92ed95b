"""A message table's `payload:` block checked at compile against its declared columns, each
mistake at its line (compiler/payload.py); and the encoders' refusals without Spark."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner

from rivc.adapters.cli import main
from rivc.adapters.connectors.payloads import encoder
from rivc.compiler.errors import ConnectorError
from rivc.compiler.payload import Payload

RECORD = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}


def source(payload: str, columns: str) -> dict[str, str]:
    return {
        "sources/bus.yml": "sources:\n  - name: bus\n    connector: mqtt\n    tables:\n"
        "      - name: t\n"
        f'        config: {{url: "mqtt://127.0.0.1:1883", topics: [t], payload: {payload}}}\n'
        f"        columns: {columns}\n",
        "schemas/r.avsc": json.dumps(RECORD),
    }


CASES = {
    "text takes one string": (
        "{format: text}",
        "{a: string, b: string}",
        "format text lands the payload as one string column",
    ),
    "raw takes binary": ("{format: raw}", "{a: string}", "one binary column"),
    "avro names its schema": ("{format: avro}", "{n: int}", "takes schema_file or avro_schema"),
    "a column the record lacks": (
        "{format: avro, schema_file: schemas/r.avsc}",
        "{n: int, m: int}",
        "column 'm' is not a field of the Avro record (fields: n)",
    ),
    "a missing schema file": (
        "{format: avro, schema_file: schemas/gone.avsc}",
        "{n: int}",
        "cannot read schemas/gone.avsc",
    ),
    "protobuf keys on json": ("{message: a.B}", "{n: int}", "are for format protobuf"),
    "an unknown format": ("{format: xml}", "{n: int}", "format"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_payload_that_does_not_fit_its_columns_is_refused_at_its_line(make_project, case):
    payload, columns, reason = CASES[case]
    root = make_project(source(payload, columns))
    result = CliRunner().invoke(main, ["compile", "--project-dir", str(root)])
    assert result.exit_code == 2, result.output
    assert "sources/bus.yml:6:" in result.output and reason in result.output, result.output
    assert "Traceback" not in result.output


def test_good_payload_blocks_compile(make_project):
    for payload, columns in (
        ("{format: text}", "{body: string}"),
        ("{format: raw}", "{body: binary}"),
        ("{format: avro, schema_file: schemas/r.avsc, confluent_id: 3}", "{n: int}"),
        (f"{{format: avro, avro_schema: {json.dumps(RECORD)}}}", "{n: int}"),
    ):
        root = make_project(source(payload, columns))
        result = CliRunner().invoke(main, ["compile", "--project-dir", str(root)])
        assert result.exit_code == 0, (payload, result.output)


def test_the_encoders_refuse_what_they_cannot_send(tmp_path):
    batch = pa.RecordBatch.from_pydict({"a": ["x", None]})
    with pytest.raises(ConnectorError, match="sink s: a NULL a: no payload"):
        encoder(Payload(format="text"), tmp_path, "s")(batch)
    two = pa.RecordBatch.from_pydict({"a": ["x"], "b": ["y"]})
    with pytest.raises(ConnectorError, match="format text sends one column; the input has 2"):
        encoder(Payload(format="text"), tmp_path, "s")(two)
    avro = encoder(Payload(format="avro", avro_schema=RECORD, confluent_id=9), tmp_path, "s")
    assert avro(pa.RecordBatch.from_pydict({"n": [1]})) == [b"\x00\x00\x00\x00\x09\x02"]
    with pytest.raises(ConnectorError, match="sink s: a row as avro: "):
        avro(pa.RecordBatch.from_pydict({"n": ["not an int"]}))
    assert encoder(Payload(), tmp_path, "s")(two) == [b'{"a": "x", "b": "y"}']
