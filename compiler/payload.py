"""How a message's bytes hold a row: the `payload:` block of every message source and sink (mqtt,
nats, rabbitmq, kafka), checked at compile against the table's declared columns.

- `json` (the default): a JSON object whose fields are the columns;
- `text`: the payload as one string column (valid UTF-8);
- `raw`: the payload as one binary column, unchanged;
- `avro`: Avro's binary encoding of a record (`schema_file`, an .avsc in the project, or
  `avro_schema` inline), optionally in Confluent's wire format (`confluent_id`: a zero byte and
  the four-byte schema id before it; a source refuses another id);
- `protobuf`: a Protocol Buffers message (`message`, its full name, from `descriptor_file`, a
  FileDescriptorSet as `protoc --include_imports --descriptor_set_out` writes it).

The run's half (decoding a stream, encoding a batch) is rivc.adapters.plane.payloads. A payload
that does not decode is refused by name with where it came from, never a row of NULLs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from .loading.specbase import Spec

Format = Literal["json", "text", "raw", "avro", "protobuf"]


class Payload(Spec):
    format: Format = "json"
    schema_file: str | None = None  # avro: an .avsc file, relative to the project
    avro_schema: dict[str, Any] | None = None  # avro: the schema inline
    confluent_id: int | None = Field(None, ge=0, lt=2**31)  # avro: Confluent's wire format
    descriptor_file: str | None = None  # protobuf: a FileDescriptorSet, relative to the project
    message: str | None = None  # protobuf: the message's full name (package.Name)

    @model_validator(mode="after")
    def _keys(self) -> Payload:
        avro = (self.schema_file, self.avro_schema, self.confluent_id)
        proto = (self.descriptor_file, self.message)
        if self.format == "avro":
            if (self.schema_file is None) == (self.avro_schema is None):
                raise ValueError("format avro takes schema_file or avro_schema (one of them)")
        elif any(v is not None for v in avro):
            raise ValueError("schema_file, avro_schema and confluent_id are for format avro")
        if self.format == "protobuf":
            if self.descriptor_file is None or not self.message:
                raise ValueError("format protobuf takes descriptor_file and message")
        elif any(v is not None for v in proto):
            raise ValueError("descriptor_file and message are for format protobuf")
        return self

    def schema_text(self, root: Path) -> str:
        """The Avro schema as JSON text (read from the project, or the inline one)."""
        if self.avro_schema is not None:
            return json.dumps(self.avro_schema)
        assert self.schema_file is not None
        return _read(root, self.schema_file).decode()

    def descriptor(self, root: Path) -> bytes:
        assert self.descriptor_file is not None
        return _read(root, self.descriptor_file)


def _read(root: Path, rel: str) -> bytes:
    path = root / rel
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {rel}: {exc.strerror or exc}") from None


def check(payload: Payload, columns: Mapping[str, str], root: Path) -> None:
    """The declared columns (metadata columns left out) fit the format; ValueError names why."""
    names = list(columns)
    if payload.format in ("text", "raw"):
        kind = "string" if payload.format == "text" else "binary"
        if len(names) != 1 or columns[names[0]].lower() != kind:
            raise ValueError(
                f"format {payload.format} lands the payload as one {kind} column: declare "
                f"exactly one (columns: {{body: {kind}}})"
            )
    elif payload.format == "avro":
        try:
            schema = json.loads(payload.schema_text(root))
        except json.JSONDecodeError as exc:
            raise ValueError(f"the Avro schema is not JSON: {exc}") from None
        fields = avro_fields(schema)
        missing = [n for n in names if n not in fields]
        if missing:
            raise ValueError(
                f"column {missing[0]!r} is not a field of the Avro record "
                f"(fields: {', '.join(fields)})"
            )
    elif payload.format == "protobuf":
        payload.descriptor(root)  # the fields are checked when the descriptor is loaded (run)


def avro_fields(schema: Any) -> list[str]:
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        raise ValueError("the Avro schema is not a record")
    fields = schema.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields):
        raise ValueError("the Avro record has no list of fields")
    return [str(f.get("name")) for f in fields]


class Carries(Spec):
    """A message connector's config: the format of its messages' payloads."""

    payload: Payload = Payload()


class MessageSource(Carries):
    """A message source's config: its payloads, and whether each row gets the message's own
    columns (topic, sequence, id, time: the connector's entry names them)."""

    metadata_columns: bool = False
