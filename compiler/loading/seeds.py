"""Seeds: CSV files under seeds/ that become tables in the warehouse (docs/seeds.md).

Compile reads each file with Python's csv module and infers every column's Spark type from all
its values, narrowest first, so a value is never changed on the way: integers (`int`, else
`bigint`, else `decimal(p,0)`), decimals at their scale (`1.10` is `decimal(3,2)`, never a
float), `double` only for exponent notation, `boolean` (true/false), `date`, `timestamp`, else
`string`. A number with a leading zero (`007`, a zip code) stays a string. An empty field is
NULL. `column_types` overrides the inference column by column.

The run reads the file with the same `read_csv` and casts each column to its type in Spark.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from ..errors import ProjectError, SourceLocation

_INT = re.compile(r"[+-]?(0|[1-9]\d*)")
_DECIMAL = re.compile(r"[+-]?(0|[1-9]\d*)?\.(\d+)")  # 1.10, .5, -0.25 (a digit after the point)
_DOUBLE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?"
)
_BOOLEAN = {"true", "false"}
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1
MAX_PRECISION = 38  # Spark's decimal


@dataclass(frozen=True, slots=True)
class SeedData:
    """A seed file as read: its header and each column's values (None for an empty field)."""

    header: tuple[str, ...]
    columns: tuple[tuple[str | None, ...], ...]

    @property
    def rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0


def read_csv(text: str, path: Path, delimiter: str = ",") -> SeedData:
    """The header and columns of a seed; a malformed file is one error at its line."""
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")), delimiter=delimiter, strict=True)
    try:
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise ProjectError(
                "a seed needs a header row naming its columns", SourceLocation(path, 1)
            )
        names = tuple(h.strip() for h in header)
        for i, name in enumerate(names):
            if not name:
                raise ProjectError(
                    f"column {i + 1} of the header has no name", SourceLocation(path, 1)
                )
            if name.lower() in (n.lower() for n in names[:i]):
                raise ProjectError(
                    f"column {name!r} appears twice in the header", SourceLocation(path, 1)
                )
        values: list[list[str | None]] = [[] for _ in names]
        for row in reader:
            if not row:
                continue  # a blank line
            if len(row) != len(names):
                raise ProjectError(
                    f"this row has {len(row)} fields, the header {len(names)}",
                    SourceLocation(path, reader.line_num),
                )
            for column, value in zip(values, row, strict=True):
                column.append(value if value != "" else None)
    except csv.Error as exc:
        raise ProjectError(
            f"not a valid CSV row: {exc}", SourceLocation(path, reader.line_num)
        ) from None
    return SeedData(names, tuple(tuple(c) for c in values))


def infer_type(values: tuple[str | None, ...]) -> str:
    """The narrowest Spark type that holds every value exactly."""
    given = [v for v in values if v is not None]
    if not given:
        return "string"
    if all(v.lower() in _BOOLEAN for v in given):
        return "boolean"
    if all(_INT.fullmatch(v) for v in given):
        ints = [int(v) for v in given]
        low, high = min(ints), max(ints)
        if -INT_MAX - 1 <= low and high <= INT_MAX:
            return "int"
        if -BIGINT_MAX - 1 <= low and high <= BIGINT_MAX:
            return "bigint"
        digits = max(len(v.lstrip("+-")) for v in given)
        return f"decimal({digits},0)" if digits <= MAX_PRECISION else "string"
    if all(_INT.fullmatch(v) or _DECIMAL.fullmatch(v) for v in given):
        whole, scale = 1, 0
        for v in given:
            head, _, tail = v.lstrip("+-").partition(".")
            whole, scale = max(whole, len(head.lstrip("0")) or 1), max(scale, len(tail))
        precision = whole + scale
        return f"decimal({precision},{scale})" if precision <= MAX_PRECISION else "string"
    if all(_INT.fullmatch(v) or _DECIMAL.fullmatch(v) or _DOUBLE.fullmatch(v) for v in given):
        # a value a double cannot hold (1e400 would become Infinity) keeps the column text
        return "double" if all(math.isfinite(float(v)) for v in given) else "string"
    if all(_DATE.fullmatch(v) and _valid_date(v) for v in given):
        return "date"
    if all((_DATE.fullmatch(v) and _valid_date(v)) or _valid_timestamp(v) for v in given):
        return "timestamp"
    return "string"


def _valid_date(value: str) -> bool:
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _valid_timestamp(value: str) -> bool:
    if not _TIMESTAMP.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def inferred(data: SeedData) -> dict[str, str]:
    """Each column's Spark type as its values say."""
    return {
        name: infer_type(values) for name, values in zip(data.header, data.columns, strict=True)
    }


def column_types(types: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """Each column's Spark type: `column_types` where given, else inferred."""
    given = {k.lower(): v for k, v in overrides.items()}
    return {name: given.get(name.lower()) or typ for name, typ in types.items()}
