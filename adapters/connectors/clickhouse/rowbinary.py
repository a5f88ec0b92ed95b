"""Arrow record batches as ClickHouse's RowBinary, each value exact or refused by column.

Binary, not text: ClickHouse 18's float parser misreads about one double in four by an ulp (and
reads subnormals as 0), so a float travels as its eight bytes. Each column becomes the bytes of
its cells at once (a fixed-width column is a view of its Arrow buffer; a string is its varint
length and bytes; Nullable puts a flag byte first), the columns are joined row by row, and the
rows are the joined array's data buffer as it is. Only arrays are encoded value by value.

ClickHouse's types, as the sink creates them from the batch's Arrow types (clickhouse_type):
integers and floats of the same width, Bool as UInt8, Decimal(p, s) (stored in 4, 8 or 16
bytes by p), String for text and bytes, Date (days 1970-01-01 to 2105-12-31), DateTime('UTC')
(whole seconds 1970 to 2105; DateTime64(6, 'UTC') on servers from 20.1) and Array of those.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError

if TYPE_CHECKING:
    import pyarrow as pa

DAY_MAX = dt.date(2105, 12, 31)  # the last day ClickHouse's Date and DateTime read back as such
SECONDS_MAX = 4_291_747_199  # 2105-12-31 23:59:59 UTC
_FIXED = {
    "Int8": "<b",
    "Int16": "<h",
    "Int32": "<i",
    "Int64": "<q",
    "UInt8": "<B",
    "UInt16": "<H",
    "UInt32": "<I",
    "UInt64": "<Q",
    "Float32": "<f",
    "Float64": "<d",
}
_DECIMAL = re.compile(r"^Decimal\((\d+),\s*(\d+)\)$")
_VARINT = [bytes([n]) if n < 128 else bytes([n & 0x7F | 0x80, n >> 7]) for n in range(16_384)]


def clickhouse_type(t: pa.DataType, micros: bool) -> str | None:
    """The ClickHouse type that holds an Arrow type's values exactly (None: none here).
    `micros`: the server has DateTime64."""
    import pyarrow as pa

    simple: list[tuple[Callable[[pa.DataType], bool], str]] = [
        (pa.types.is_boolean, "UInt8"),
        (pa.types.is_int8, "Int8"),
        (pa.types.is_int16, "Int16"),
        (pa.types.is_int32, "Int32"),
        (pa.types.is_int64, "Int64"),
        (pa.types.is_uint8, "UInt8"),
        (pa.types.is_uint16, "UInt16"),
        (pa.types.is_uint32, "UInt32"),
        (pa.types.is_uint64, "UInt64"),
        (pa.types.is_float32, "Float32"),
        (pa.types.is_float64, "Float64"),
        (pa.types.is_string, "String"),
        (pa.types.is_large_string, "String"),
        (pa.types.is_binary, "String"),
        (pa.types.is_large_binary, "String"),
        (pa.types.is_date32, "Date"),
    ]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_decimal128(t):
        return f"Decimal({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return "DateTime64(6, 'UTC')" if micros else "DateTime('UTC')"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_type
        if pa.types.is_temporal(item):
            return None  # an array's values are encoded one by one: numbers, text, arrays
        inner = clickhouse_type(item, micros)
        if inner is None:
            return None
        return f"Array({inner if inner.startswith('Array(') else f'Nullable({inner})'})"
    return None


def bare(kind: str) -> str:
    """A ClickHouse type without Nullable() around it."""
    kind = kind.replace(" ", "")
    return kind[9:-1] if kind.startswith("Nullable(") else kind


def encode(batch: pa.RecordBatch, kinds: dict[str, str], tail: list[pa.Array]) -> bytes:
    """The batch's rows as RowBinary: the columns `kinds` names (in its order, each of its
    ClickHouse type), then the `tail` columns (fixed-width, no nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cells = [cell_bytes(batch.column(n), n, k) for n, k in kinds.items()]
    cells += [fixed(a) for a in tail]
    rows = pc.binary_join_element_wise(*cells, pa.scalar(b"", pa.large_binary()))
    if isinstance(rows, pa.ChunkedArray):
        rows = rows.combine_chunks()
    offsets = rows.buffers()[1]
    import numpy as np

    at = np.frombuffer(offsets, dtype=np.int64)[rows.offset : rows.offset + len(rows) + 1]
    return bytes(memoryview(rows.buffers()[2])[int(at[0]) : int(at[-1])])


def cell_bytes(col: pa.Array, name: str, kind: str) -> pa.Array:
    """Each cell of one column in RowBinary (a large_binary array without nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    nullable = kind.replace(" ", "").startswith("Nullable(")
    if col.null_count and not nullable:
        raise ConnectorError(
            f"column {name!r} holds NULL; the table's column is {kind}, which "
            "cannot hold one"
            + (": coalesce it to array() in the model" if kind.startswith("Array(") else "")
        )
    values = value_bytes(col, name, bare(kind))
    if not nullable:
        return values
    flags = pc.if_else(pc.is_null(col), b"\x01", b"\x00").cast(pa.large_binary())
    empty = pa.scalar(b"", pa.large_binary())
    return pc.binary_join_element_wise(flags, pc.fill_null(values, empty), empty)


def value_bytes(col: pa.Array, name: str, kind: str) -> pa.Array:
    """The values of a column in RowBinary (null where the column is)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_boolean(t):
        return fixed(pc.cast(col, pa.uint8()))
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return fixed(col)
    if pa.types.is_decimal128(t):
        width = decimal_width(kind)
        whole = fixed(col)  # the 16 bytes of Arrow's two's complement, little-endian
        return whole if width == 16 else pc.binary_slice(whole, 0, width)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        return text_bytes(pc.cast(col, pa.large_binary()))
    if pa.types.is_large_binary(t):
        return text_bytes(col)
    if pa.types.is_date32(t):
        days = pc.cast(col, pa.int32())
        bad = pc.fill_null(
            pc.or_(pc.less(days, 0), pc.greater(days, (DAY_MAX - _EPOCH).days)), False
        )
        if pc.any(bad).as_py():
            first = col.filter(bad)[0].as_py()
            raise ConnectorError(
                f"column {name!r} holds {first}; a ClickHouse Date holds 1970-01-01 to 2105-12-31"
            )
        return fixed(pc.cast(days, pa.uint16()))
    if pa.types.is_timestamp(t):
        return timestamp_bytes(col, name, kind)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = kind[len("Array(") : -1]
        put = item_writer(item)
        try:
            out = [None if v is None else put(v) for v in col.to_pylist()]
        except ConnectorError as exc:
            raise ConnectorError(f"column {name!r}: {exc}") from None
        return pa.array(out, pa.large_binary())
    raise ConnectorError(f"column {name!r} of type {t} cannot be written")


_EPOCH = dt.date(1970, 1, 1)


def fixed(col: pa.Array) -> pa.Array:
    """A fixed-width column's cells: views of its values buffer, nulls kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    width = col.type.byte_width
    view = pa.Array.from_buffers(
        pa.binary(width), len(col), [col.buffers()[0], col.buffers()[1]], offset=col.offset
    )
    return pc.cast(view, pa.large_binary())


def text_bytes(col: pa.Array) -> pa.Array:
    """A String cell: the varint of its length, then its bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.binary_length(col).to_pylist()
    prefix = pa.array(
        [None if n is None else _VARINT[n] if n < 16_384 else varint(n) for n in lengths],
        pa.large_binary(),
    )
    return pc.binary_join_element_wise(prefix, col, pa.scalar(b"", pa.large_binary()))


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decimal_width(kind: str) -> int:
    found = _DECIMAL.match(kind.replace(" ", ""))
    precision = int(found.group(1)) if found else 38
    return 4 if precision <= 9 else 8 if precision <= 18 else 16


def timestamp_bytes(col: pa.Array, name: str, kind: str) -> pa.Array:
    """Seconds as UInt32 (DateTime) or microseconds as Int64 (DateTime64(6)), UTC (a timestamp
    without time zone as its wall time); out of range or a fraction of a second refused."""
    import pyarrow as pa
    import pyarrow.compute as pc

    micros = pc.cast(pc.cast(col, pa.timestamp(col.type.unit)), pa.timestamp("us"))  # exact
    values = pc.cast(micros, pa.int64())
    seconds = pc.divide(values, 10**6)  # integer division: whole seconds
    outside = pc.or_(pc.less(values, 0), pc.greater(values, (SECONDS_MAX + 1) * 10**6 - 1))
    checks = [(outside, "a ClickHouse DateTime holds 1970-01-01 00:00:00 to 2105-12-31 23:59:59")]
    wide = kind.startswith("DateTime64")
    if not wide:
        checks.append(
            (
                pc.not_equal(values, pc.multiply(seconds, 10**6)),
                "it has a fraction of a second, and this server's DateTime holds whole seconds "
                "(DateTime64 came in ClickHouse 20.1); truncate it in the model "
                "(date_trunc('second', ...))",
            )
        )
    for mask, why in checks:
        mask = pc.fill_null(mask, False)
        if pc.any(mask).as_py():
            first = micros.filter(mask)[0].as_py()
            raise ConnectorError(f"column {name!r} holds {first}: {why}")
    return fixed(values) if wide else fixed(pc.cast(seconds, pa.uint32()))


def item_writer(kind: str) -> Callable[[Any], bytes]:
    """An Array(kind) value's bytes, from its Python list: the count, then each item."""
    nullable = kind.startswith("Nullable(")
    inner = bare(kind)
    if inner.startswith("Array("):
        one = item_writer(inner[len("Array(") : -1])
    elif inner in _FIXED:
        pack = struct.Struct(_FIXED[inner]).pack
        one = (lambda v: pack(int(v))) if inner == "UInt8" else pack
    elif inner == "String":
        one = _string
    else:  # Decimal(p, s)
        scale = int(_DECIMAL.match(inner).group(2))  # type: ignore[union-attr]
        width = decimal_width(inner)

        def one(v: Decimal) -> bytes:
            return int(v.scaleb(scale)).to_bytes(width, "little", signed=True)

    def put(values: list[Any]) -> bytes:
        n = len(values)
        out = [_VARINT[n] if n < 16_384 else varint(n)]
        for v in values:
            if nullable:
                out.append(b"\x01" if v is None else b"\x00")
            elif v is None:
                raise ConnectorError(f"an array holds a NULL array, which {kind} cannot hold")
            if v is not None:
                out.append(one(v))
        return b"".join(out)

    return put


def _string(v: str | bytes) -> bytes:
    raw = v.encode() if isinstance(v, str) else v
    n = len(raw)
    return (_VARINT[n] if n < 16_384 else varint(n)) + raw
