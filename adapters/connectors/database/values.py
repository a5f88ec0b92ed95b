"""Values as a database's text input, computed on Arrow arrays: bytes as hex, nested values
as JSON (the database sinks: postgres/sink.py, mysql/sink.py)."""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def hex_text(column: pa.Array, prefix: str, suffix: str = "") -> pa.Array:
    """Each value as `prefix`, two hex digits a byte, `suffix` (null stays null), computed on
    the whole buffer."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.cast(pa.large_binary())
    n = len(column)
    head, tail = np.frombuffer(prefix.encode(), np.uint8), np.frombuffer(suffix.encode(), np.uint8)
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset : column.offset + n + 1]
    raw = column.buffers()[2]
    data = np.frombuffer(raw, np.uint8) if raw is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]]
    spans = np.zeros(n + 1, np.int64)
    np.cumsum(2 * np.diff(offsets) + len(head) + len(tail), out=spans[1:])
    text = np.empty(int(spans[-1]), np.uint8)
    body = np.ones(len(text), bool)
    for i, byte in enumerate(head):
        text[spans[:-1] + i] = byte
        body[spans[:-1] + i] = False
    for i, byte in enumerate(tail):
        text[spans[1:] - len(tail) + i] = byte
        body[spans[1:] - len(tail) + i] = False
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    pairs = np.empty(2 * len(data), np.uint8)
    pairs[0::2], pairs[1::2] = digits[data >> 4], digits[data & 15]
    text[body] = pairs
    strings = pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer(spans.tobytes()), pa.py_buffer(text.tobytes())]
    )
    return pc.if_else(column.is_valid(), strings, pa.scalar(None, pa.large_string()))


def float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def json_text(column: pa.Array) -> pa.Array:
    """A nested column as JSON text, value by value (null stays null)."""
    import pyarrow as pa

    t = column.type
    return pa.array([None if v is None else _json(v, t) for v in column.to_pylist()], pa.string())


def _json(value: Any, t: pa.DataType) -> str:
    """Spark's to_json shapes, by the Arrow type: maps and structs as objects, decimals as
    numbers of their exact text, times as ISO text, bytes as base64, non-finite floats as
    strings (JSON has no such numbers)."""
    import pyarrow as pa

    if value is None:
        return "null"
    if pa.types.is_struct(t):
        fields = (t.field(i) for i in range(t.num_fields))
        return (
            "{"
            + ",".join(f"{json.dumps(f.name)}:{_json(value[f.name], f.type)}" for f in fields)
            + "}"
        )
    if pa.types.is_map(t):
        pairs = (f"{json.dumps(str(k))}:{_json(v, t.item_type)}" for k, v in value)
        return "{" + ",".join(pairs) + "}"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "[" + ",".join(_json(v, t.value_type) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'"{float_text(value)}"'
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return json.dumps(value.isoformat())
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    return json.dumps(value)
