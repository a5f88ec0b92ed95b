"""The file formats the `files` sink writes with pyarrow and fastavro: Parquet, Avro, CSV and
JSON lines or arrays, each value as it is (floats' non-finite values, times in UTC)."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError

from .spec import FilesSinkConfig

if TYPE_CHECKING:
    pass


def pa_schema(fields: list[Any]) -> Any:
    import pyarrow as pa

    return pa.schema(fields)


def open_writer(out: Any, config: FilesSinkConfig, schema: Any, record_name: str) -> Any:
    if config.format == "parquet":
        return _ParquetFile(out, config, schema)
    if config.format == "avro":
        return _AvroFile(out, config, schema, record_name)
    return _TextFile(out, config, schema)


AVRO_CODECS = {
    None: "null",
    "none": "null",
    "snappy": "snappy",
    "zstd": "zstandard",
    "deflate": "deflate",
}


def avro_schema(schema: Any, name: str, namespace: str) -> dict[str, Any]:
    """An Avro record schema for an Arrow schema; every field nullable, as Spark's columns are."""
    import pyarrow as pa

    counter = iter(range(1_000_000))

    def avro(t: Any) -> Any:
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_integer(t):
            return "long" if t.bit_width == 64 else "int"
        if pa.types.is_float32(t):
            return "float"
        if pa.types.is_floating(t):
            return "double"
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "string"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return "bytes"
        if pa.types.is_date(t):
            return {"type": "int", "logicalType": "date"}
        if pa.types.is_timestamp(t):
            return {"type": "long", "logicalType": "timestamp-micros"}
        if pa.types.is_decimal(t):
            return {
                "type": "bytes",
                "logicalType": "decimal",
                "precision": t.precision,
                "scale": t.scale,
            }
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return {"type": "array", "items": ["null", avro(t.value_type)]}
        if pa.types.is_struct(t):
            return record([t.field(i) for i in range(t.num_fields)], f"{name}_{next(counter)}")
        if pa.types.is_map(t):
            return {"type": "map", "values": ["null", avro(t.item_type)]}
        raise ConnectorError(f"no Avro type for the Arrow type {t}")

    def record(fields: list[Any], record_name: str) -> dict[str, Any]:
        return {
            "type": "record",
            "name": record_name,
            "fields": [
                {"name": f.name, "type": ["null", avro(f.type)], "default": None} for f in fields
            ],
        }

    return {**record(list(schema), name), "namespace": namespace}


class _AvroFile:
    def __init__(self, out: Any, config: FilesSinkConfig, schema: Any, name: str) -> None:
        import fastavro
        from fastavro.write import Writer

        self.fh = out
        parsed = fastavro.parse_schema(avro_schema(schema, name, config.avro_namespace))
        self.out = Writer(
            self.fh,
            parsed,
            codec=AVRO_CODECS[config.compression],
            compression_level=config.compression_level,
        )

    def write(self, batch: Any) -> None:
        if batch is not None:
            for row in batch.to_pylist():
                self.out.write(row)
            self.out.flush()

    def size(self) -> int:
        return int(self.fh.tell())

    def close(self) -> None:
        self.out.flush()
        self.fh.close()


class _ParquetFile:
    def __init__(self, out: Any, config: FilesSinkConfig, schema: Any) -> None:
        import pyarrow.parquet as pq

        self.raw, self.row_group = out, config.row_group_size
        options = config.parquet
        self.out = pq.ParquetWriter(
            out,
            schema,
            compression=config.compression or "snappy",
            compression_level=config.compression_level,
            write_statistics=options.enable_statistics,
            data_page_size=options.data_page_size,
            dictionary_pagesize_limit=options.dictionary_page_size,
        )

    def write(self, batch: Any) -> None:
        if batch is not None:
            self.out.write_batch(batch, row_group_size=self.row_group)

    def size(self) -> int:
        return int(self.raw.tell())

    def close(self) -> None:
        self.out.close()
        self.raw.close()


class _TextFile:
    """CSV, JSON lines or one JSON array; gzip or zstd through Arrow's compressed streams.
    Nested values (structs, lists, maps) are written as JSON text in CSV."""

    def __init__(self, raw: Any, config: FilesSinkConfig, schema: Any) -> None:
        import pyarrow as pa

        self.columns = list(config.csv.columns) if config.format == "csv" else []
        if self.columns:
            schema = pa.schema([schema.field(n) for n in self.columns])
        self.config, self.names, self.rows = config, schema.names, 0
        self.raw = raw
        self.out = compressed(raw, config.compression, config.compression_level)
        self.arrow: Any = None  # Arrow's CSV writer, when the quote is Arrow's own
        self.nested = [f.name for f in schema if pa.types.is_nested(f.type)]
        # Text has no IEEE floats or raw bytes: NaN/Infinity/-Infinity as words (valid JSON as
        # strings; what Spark, PostgreSQL and Java read in CSV), bytes as hex (docs/types.md)
        self.floats = [f.name for f in schema if pa.types.is_floating(f.type)]
        self.binary = [
            f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
        ]
        csv_options = config.csv
        self.eol = "\r\n" if csv_options.line_ending == "crlf" else "\n"
        if config.format == "csv" and csv_options.quote == '"':
            import pyarrow.csv as pacsv

            as_text = {*self.nested, *self.floats, *self.binary}
            flat = pa.schema(
                [pa.field(f.name, pa.string()) if f.name in as_text else f for f in schema]
            )
            if csv_options.header:  # quoted only where needed, as the csv module does
                self._emit([self.names])
            options = pacsv.WriteOptions(
                include_header=False,
                delimiter=csv_options.delimiter,
                null_string=csv_options.null_value,
                quoting_style="all_valid" if csv_options.always_quote else "needed",
                eol=self.eol,
            )
            self.arrow = pacsv.CSVWriter(self.out, flat, write_options=options)
        elif config.format == "csv" and csv_options.header:
            self._emit([self.names])
        if config.format == "json":
            self.out.write(b"[")

    def write(self, batch: Any) -> None:
        if batch is None:
            return
        if self.columns:
            batch = batch.select(self.columns)
        if self.arrow is not None:  # C++ all the way; nested values become JSON text first
            import pyarrow as pa

            for name in self.nested:
                i = batch.schema.get_field_index(name)
                cells = [
                    None if v is None else json.dumps(v, default=_jsonable, ensure_ascii=False)
                    for v in batch.column(i).to_pylist()
                ]
                batch = batch.set_column(i, name, pa.array(cells, pa.string()))
            for name in self.floats:
                i = batch.schema.get_field_index(name)
                batch = batch.set_column(i, name, _float_text(batch.column(i)))
            for name in self.binary:
                i = batch.schema.get_field_index(name)
                cells = [None if v is None else v.hex() for v in batch.column(i).to_pylist()]
                batch = batch.set_column(i, name, pa.array(cells, pa.string()))
            self.arrow.write_batch(batch)
            return
        fmt = self.config.format
        if fmt == "csv":
            rows = batch.to_pylist()
            for r in rows:
                for name in self.floats:
                    value = r[name]
                    if value is not None and not math.isfinite(value):
                        r[name] = _NON_FINITE[str(value)]
            self._emit([[self._cell(r[n]) for n in self.names] for r in rows])
            return
        objects = json_objects(batch)
        text = "".join(
            ("" if fmt == "jsonl" or (self.rows == 0 and i == 0) else ",")
            + ("\n" if fmt == "json" else "")
            + o
            + ("\n" if fmt == "jsonl" else "")
            for i, o in enumerate(objects)
        )
        self.rows += len(objects)
        self.out.write(text.encode())

    def _cell(self, value: Any) -> Any:
        if value is None:
            return self.config.csv.null_value
        if isinstance(value, dict | list):
            return json.dumps(value, default=_jsonable, ensure_ascii=False)
        if isinstance(value, bytes):
            return value.hex()
        return value

    def _emit(self, rows: list[list[Any]]) -> None:
        buffer = io.StringIO()
        writer = csv.writer(
            buffer,
            delimiter=self.config.csv.delimiter,
            quotechar=self.config.csv.quote,
            lineterminator=self.eol,
            quoting=csv.QUOTE_ALL if self.config.csv.always_quote else csv.QUOTE_MINIMAL,
        )
        writer.writerows(rows)
        self.out.write(buffer.getvalue().encode())

    def size(self) -> int:
        return int(self.raw.tell())

    def close(self) -> None:
        if self.config.format == "json":
            self.out.write(b"\n]\n")
        if self.arrow is not None:
            self.arrow.close()
        self.out.close()


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def compressed(raw: Any, codec: str | None, level: int | None) -> Any:
    """A text file's stream, compressed whole: Arrow's gzip, zstd and LZ4 (frame) streams, or
    cramjam's for framed Snappy and for a chosen level."""
    import pyarrow as pa

    if codec in (None, "none"):
        return raw
    if codec in ("gzip", "zstd", "lz4") and level is None:
        return pa.CompressedOutputStream(raw, codec)
    return _Framed(raw, codec, level)


class _Framed:
    """What CompressedOutputStream does, for the codecs and levels it lacks."""

    def __init__(self, raw: Any, codec: str, level: int | None) -> None:
        import cramjam

        module = {"gzip": cramjam.gzip, "zstd": cramjam.zstd, "snappy": cramjam.snappy}[codec]
        self.raw = raw
        self.compressor = module.Compressor(level) if level is not None else module.Compressor()

    def write(self, data: bytes) -> int:
        self.compressor.compress(data)
        self.raw.write(bytes(self.compressor.flush()))
        return len(data)

    def close(self) -> None:
        self.raw.write(bytes(self.compressor.finish()))
        self.raw.close()


def _float_text(values: Any) -> Any:
    """Floats as text, the non-finite ones as NaN, Infinity and -Infinity."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = values.cast(pa.string())
    for arrow_word, word in _NON_FINITE.items():
        text = pc.if_else(pc.equal(text, arrow_word), word, text)
    return text


def json_objects(batch: Any) -> list[str]:
    """Each row of an Arrow record batch as the JSON object a jsonl file holds (docs/types.md):
    decimals as their exact text, times ISO 8601, bytes as hex, NaN and ±Infinity as words,
    maps as objects."""
    schema = batch.schema
    maps = "map<" in str(schema)
    out = []
    for row in batch.to_pylist():
        text = None if maps else _strict(row)
        if text is None:  # a map, or a non-finite float at the top or nested
            plain = {f.name: _plain(row[f.name], f.type) for f in schema}
            text = json.dumps(plain, default=_jsonable, ensure_ascii=False)
        out.append(text)
    return out


def _strict(row: dict[str, Any]) -> str | None:
    """The row's JSON; None when it holds a non-finite float."""
    try:
        return json.dumps(row, default=_jsonable, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return None


def _plain(value: Any, t: Any) -> Any:
    """A value as JSON holds it, by its Arrow type."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_floating(t):
        return value if math.isfinite(value) else _NON_FINITE[str(value)]
    if pa.types.is_struct(t):
        return {
            t.field(i).name: _plain(value[t.field(i).name], t.field(i).type)
            for i in range(t.num_fields)
        }
    if pa.types.is_map(t):
        return {
            k if isinstance(k, str) else str(_jsonable(k)): _plain(v, t.item_type) for k, v in value
        }
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_plain(v, t.value_type) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Decimal):
        return format(value, "f")  # its exact digits at the column's scale, never 1E-18
    return str(value)
