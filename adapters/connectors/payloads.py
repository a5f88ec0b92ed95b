"""The run's half of rivc.compiler.payload (shared by the message connectors): a message stream's payloads decoded into the declared
columns, and a batch's rows encoded as payloads, in the format the `payload:` block names.

A message source's raw stream holds the payload as bytes (`payload binary`) beside its own
columns; `decode` turns it into the declared columns. JSON and text are decoded by Spark; Avro
(fastavro) and Protocol Buffers (protobuf) in Python on the executors, with the schema or the
descriptor read here and shipped with the function (an executor need not see the project).
A payload that does not decode stops the batch with the source table, where the message came
from and why: nothing is acknowledged, so nothing is lost, and no row of NULLs is landed.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rivc.compiler.errors import ConnectorError
from rivc.compiler.payload import MessageSource, Payload
from rivc.compiler.sql import literal, quote

from ..plane.base import JSON_OPTIONS, SourceContext
from .files.formats import json_objects

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

PLACE = "_rivc_place"  # where a message came from, for the refusal of one that does not decode
CORRUPT = "_rivc_corrupt"  # from_json's column for a payload that is not the declared object
CONTENT_TYPES = {
    "json": "application/json",
    "text": "text/plain; charset=utf-8",
    "raw": "application/octet-stream",
    "avro": "application/avro",
    "protobuf": "application/x-protobuf",
}


M = TypeVar("M", bound=MessageSource)


def decode_stream(
    raw: DataFrame, ctx: SourceContext[M], metadata: Mapping[str, str], place: str
) -> DataFrame:
    """A message source's stream as its table's columns: `metadata` (its columns -> their SQL
    expressions over `raw`) added when the table asks for them."""
    cfg = ctx.config
    extra = metadata if cfg.metadata_columns else None
    return decode(raw, cfg.payload, ctx.root, ctx.name, ctx.columns, extra, place)


def decode(
    raw: DataFrame,
    payload: Payload,
    root: Path,
    name: str,
    columns: Mapping[str, str],
    metadata: Mapping[str, str] | None,
    place: str,
) -> DataFrame:
    """The stream `raw` (a binary `payload` column and the source's own) as the declared
    `columns`, then each metadata column (name -> its SQL expression over `raw`) when the source
    adds them. `place` is an SQL expression naming where a message came from (a topic, a
    sequence), for the refusal of one that does not decode; `name` is the source table."""
    meta = dict(metadata or {})
    declared = {k: v for k, v in columns.items() if k not in meta}
    kept = [f"{expr} AS {quote(n)}" for n, expr in meta.items()]
    staged = raw.selectExpr("payload", f"CAST({place} AS STRING) AS {PLACE}", *kept)
    fmt = payload.format
    if fmt in ("avro", "protobuf"):
        decoder = _avro_decoder(payload, root) if fmt == "avro" else _proto_decoder(payload, root)
        schema = _arrow_schema(raw, {**declared, **{n: columns[n] for n in meta}})
        return staged.mapInArrow(_decode_task(decoder, schema, name, list(declared)), schema)
    names = [quote(n) for n in meta]

    def refused(why: str) -> str:
        text = literal(f"source {name}: ")
        return f"raise_error(concat({text}, coalesce({PLACE}, '?'), {literal(why)}))"

    if fmt in ("text", "raw"):
        (column,) = declared
        value = "CAST(payload AS STRING)" if fmt == "text" else "payload"
        bad = "payload IS NULL" + (" OR NOT is_valid_utf8(payload)" if fmt == "text" else "")
        why = ": the payload is not UTF-8 text" if fmt == "text" else ": no payload"
        return staged.selectExpr(f"IF({bad}, {refused(why)}, {value}) AS {quote(column)}", *names)
    ddl = ", ".join(f"{quote(k)} {v}" for k, v in [*declared.items(), (CORRUPT, "string")])
    options = {**JSON_OPTIONS, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    opts = "map(" + ", ".join(f"{literal(k)}, {literal(v)}" for k, v in options.items()) + ")"
    parsed = staged.selectExpr(
        f"from_json(CAST(payload AS STRING), {literal(ddl)}, {opts}) AS data", PLACE, *names
    )
    why = ": the payload is not a JSON object of the table's columns (not JSON, or a value of another type)"
    checked = parsed.selectExpr(
        f"IF(data IS NULL OR data.{CORRUPT} IS NOT NULL, {refused(why)}, data) AS data",
        *names,
    )
    return checked.selectExpr(*(f"data.{quote(k)} AS {quote(k)}" for k in declared), *names)


def _arrow_schema(df: DataFrame, columns: Mapping[str, str]) -> Any:
    """The Spark types of `columns` (name -> Spark SQL type), as the struct mapInArrow yields."""
    return df.selectExpr(*(f"CAST(NULL AS {t}) AS {quote(n)}" for n, t in columns.items())).schema


Decoder = Callable[[bytes], dict[str, Any]]


def _decode_task(
    make: Callable[[], Decoder], struct: Any, name: str, declared: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function: each payload decoded into the declared columns (metadata columns
    passed through); a payload that does not decode stops the task, named."""

    def go(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(struct, timezone="UTC")
        decode_one = make()
        for batch in batches:
            payloads = batch.column("payload").to_pylist()
            places = batch.column(PLACE).to_pylist()
            rows = []
            for payload, where in zip(payloads, places, strict=True):
                try:
                    if payload is None:
                        raise ValueError("no payload")
                    rows.append(decode_one(payload))
                except Exception as exc:  # noqa: BLE001  (the decoder's own errors, named)
                    raise ConnectorError(f"source {name}: {where}: {_why(exc)}") from None
            arrays = []
            for field in schema:
                if field.name in declared:
                    values = [row.get(field.name) for row in rows]
                    try:
                        arrays.append(pa.array(values, type=field.type))
                    except (pa.ArrowException, TypeError, ValueError) as exc:
                        raise ConnectorError(
                            f"source {name}: column {field.name} ({field.type}): {_why(exc)}"
                        ) from None
                else:
                    arrays.append(batch.column(field.name).cast(field.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return go


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ---------------------------------------------------------------------- avro


CONFLUENT_MAGIC = 0


def _avro_decoder(payload: Payload, root: Path) -> Callable[[], Decoder]:
    text, wire = payload.schema_text(root), payload.confluent_id

    def make() -> Decoder:
        from fastavro import parse_schema, schemaless_reader

        schema = parse_schema(json.loads(text))

        def decode(data: bytes) -> dict[str, Any]:
            if wire is not None:
                if len(data) < 5 or data[0] != CONFLUENT_MAGIC:
                    raise ValueError("not in Confluent's wire format (no magic byte 0)")
                found = int.from_bytes(data[1:5], "big")
                if found != wire:
                    raise ValueError(f"written with schema id {found}, this table reads {wire}")
                data = data[5:]
            buf = io.BytesIO(data)
            row = schemaless_reader(buf, schema, None)
            if buf.tell() != len(data):
                raise ValueError(f"{len(data) - buf.tell()} bytes after the record")
            assert isinstance(row, dict)  # the schema is a record (checked at compile)
            return row

        return decode

    return make


def _avro_encoder(payload: Payload, root: Path) -> Callable[[], Callable[[dict[str, Any]], bytes]]:
    text, wire = payload.schema_text(root), payload.confluent_id

    def make() -> Callable[[dict[str, Any]], bytes]:
        from fastavro import parse_schema, schemaless_writer

        schema = parse_schema(json.loads(text))
        head = b"" if wire is None else bytes([CONFLUENT_MAGIC]) + wire.to_bytes(4, "big")

        def encode(row: dict[str, Any]) -> bytes:
            buf = io.BytesIO()
            buf.write(head)
            schemaless_writer(buf, schema, row, strict_allow_default=True)
            return buf.getvalue()

        return encode

    return make


# ---------------------------------------------------------------------- protobuf


def _message_class(descriptor: bytes, message: str) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor)
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    try:
        found = pool.FindMessageTypeByName(message)
    except KeyError:
        raise ValueError(f"message {message!r} is not in the descriptor set") from None
    return message_factory.GetMessageClass(found)


def _proto_decoder(payload: Payload, root: Path) -> Callable[[], Decoder]:
    descriptor, message = payload.descriptor(root), payload.message
    assert message is not None
    _message_class(descriptor, message)  # refused here, by name, before Spark runs it

    def make() -> Decoder:
        cls = _message_class(descriptor, message)

        def decode(data: bytes) -> dict[str, Any]:
            msg = cls.FromString(data)
            return _from_message(msg)

        return decode

    return make


TIMESTAMP = "google.protobuf.Timestamp"


def _from_message(msg: Any) -> dict[str, Any]:
    """A message as a row: nested messages as structs, repeated fields as arrays, maps as maps,
    enums by name, google.protobuf.Timestamp as a timestamp; a field with presence that is not
    set is NULL."""
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        kind = field.message_type
        if kind is not None and kind.GetOptions().map_entry:
            value_field = kind.fields_by_name["value"]
            out[field.name] = [(k, _scalar(value_field, v)) for k, v in value.items()]
        elif field.is_repeated:
            out[field.name] = [_scalar(field, v) for v in value]
        elif field.has_presence and not msg.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _scalar(field, value)
    return out


def _scalar(field: Any, value: Any) -> Any:
    kind = field.message_type
    if kind is not None:
        if kind.full_name == TIMESTAMP:
            return value.ToDatetime(tzinfo=UTC)
        return _from_message(value)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    return value


def _proto_encoder(payload: Payload, root: Path) -> Callable[[], Callable[[dict[str, Any]], bytes]]:
    descriptor, message = payload.descriptor(root), payload.message
    assert message is not None
    _message_class(descriptor, message)

    def make() -> Callable[[dict[str, Any]], bytes]:
        cls = _message_class(descriptor, message)

        def encode(row: dict[str, Any]) -> bytes:
            msg = cls()
            _fill(msg, row)
            data: bytes = msg.SerializeToString()
            return data

        return encode

    return make


def _fill(msg: Any, row: Mapping[str, Any]) -> None:
    fields = msg.DESCRIPTOR.fields_by_name
    unknown = [k for k in row if k not in fields]
    if unknown:
        raise ValueError(f"column {unknown[0]!r} is not a field of {msg.DESCRIPTOR.full_name}")
    for name, value in row.items():
        if value is None:
            continue
        field = fields[name]
        kind = field.message_type
        target = getattr(msg, name)
        if kind is not None and kind.GetOptions().map_entry:
            items = value.items() if isinstance(value, Mapping) else value
            value_kind = kind.fields_by_name["value"].message_type
            for k, v in items:
                if value_kind is not None:
                    _fill(target[k], v)
                else:
                    target[k] = v
        elif field.is_repeated:
            for v in value:
                if kind is not None:
                    _set_message(target.add(), kind, v)
                else:
                    target.append(_enum(field, v))
        elif kind is not None:
            _set_message(target, kind, value)
        else:
            setattr(msg, name, _enum(field, value))


def _enum(field: Any, value: Any) -> Any:
    """An enum's value given by its name, as _scalar reads it."""
    if field.enum_type is not None and isinstance(value, str):
        known = field.enum_type.values_by_name.get(value)
        if known is None:
            raise ValueError(f"{value!r} is not a value of {field.enum_type.full_name}")
        return known.number
    return value


def _set_message(target: Any, kind: Any, value: Any) -> None:
    if kind.full_name == TIMESTAMP:
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        target.FromDatetime(stamp.astimezone(UTC).replace(tzinfo=None))
    else:
        _fill(target, value)


# ---------------------------------------------------------------------- sinks


Encoder = Callable[["pa.RecordBatch"], list[bytes]]


def encoder(payload: Payload, root: Path, sink: str) -> Encoder:
    """A batch's rows as payloads in the sink's format (a picklable function: Spark's tasks call
    it); a row that cannot be one is refused naming the sink and why."""
    fmt = payload.format
    per_row = (
        _avro_encoder(payload, root)
        if fmt == "avro"
        else _proto_encoder(payload, root)
        if fmt == "protobuf"
        else None
    )
    return _Encoder(fmt, sink, per_row)


class _Encoder:
    def __init__(
        self, fmt: str, sink: str, per_row: Callable[[], Callable[[dict[str, Any]], bytes]] | None
    ) -> None:
        self.fmt, self.sink, self.per_row = fmt, sink, per_row
        self._encode: Callable[[dict[str, Any]], bytes] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"fmt": self.fmt, "sink": self.sink, "per_row": self.per_row, "_encode": None}

    def __call__(self, batch: pa.RecordBatch) -> list[bytes]:
        if self.fmt == "json":
            return [text.encode() for text in json_objects(batch)]
        if self.fmt in ("text", "raw"):
            if batch.num_columns != 1:
                raise ConnectorError(
                    f"sink {self.sink}: format {self.fmt} sends one column; the input has "
                    f"{batch.num_columns} ({', '.join(batch.schema.names)})"
                )
            values = batch.column(0).to_pylist()
            if any(v is None for v in values):
                raise ConnectorError(
                    f"sink {self.sink}: a NULL {batch.schema.names[0]}: no payload"
                )
            if self.fmt == "text":
                return [str(v).encode() for v in values]
            return [bytes(v) for v in values]
        if self._encode is None:
            assert self.per_row is not None
            self._encode = self.per_row()
        out = []
        for row in batch.to_pylist():
            try:
                out.append(self._encode(row))
            except Exception as exc:  # noqa: BLE001  (the encoder's own errors, named)
                raise ConnectorError(
                    f"sink {self.sink}: a row as {self.fmt}: {_why(exc)}"
                ) from None
        return out
