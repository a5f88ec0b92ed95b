"""A relational source table's windows: what one run of it reads (its mode's predicate over
the table's query, its chunks), and the cursor it leaves to commit with the rows (`Cursor`,
encoded so a stored value decodes to the same literal)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rivc.compiler.dialects import dialect
from rivc.compiler.loading.specs import SourceTable

if TYPE_CHECKING:
    pass


def encode(value: Any) -> Any:
    """A cursor value for the state store (JSON), typed so it decodes to the same literal."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return {"timestamp": value.isoformat(sep=" ")}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "timestamp" in value:
            return datetime.fromisoformat(value["timestamp"])
        if "date" in value:
            return date.fromisoformat(value["date"])
        if "decimal" in value:
            return Decimal(value["decimal"])
        if "bytes" in value:
            return bytes.fromhex(value["bytes"])
    return value


@dataclass(frozen=True)
class Cursor:
    """Where an incremental table's extraction stands: the high-water mark, encoded (`encode`:
    typed JSON), and with a `unique_key` the keys of the rows at that value delivered already."""

    value: Any
    keys: tuple[tuple[Any, ...], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "keys": [list(k) for k in self.keys]}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Cursor | None:
        if data is None:
            return None
        return cls(data["value"], tuple(tuple(k) for k in data.get("keys", ())))


@dataclass(frozen=True)
class Window:
    """What one run of a source table reads, and the cursor state it leaves on commit."""

    predicate: str | None  # on the wrapped query; None: everything
    cursor: Cursor | None = None  # the position to commit with the window's rows
    chunks: list[tuple[int, str]] | None = None  # chunked: (chunk number, predicate)
    description: str = ""
    sparse: bool = False  # chunked: most windows are empty (fewer rows than 10% of the span)


def scalar(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row[0] if row else None


def plan_window(
    conn: Any,
    kind: str,
    base: str,
    table: SourceTable,
    stored: Cursor | None,
    now: datetime | None = None,
) -> Window:
    """The predicate of this run's extraction, from the mode and the stored cursor."""
    wrapped = f"({base}) AS _rivc"

    def lit(value: Any) -> str:  # a bound or stored value as a literal of the source's dialect
        return dialect(kind).literal(value)

    if table.mode == "incremental":
        col = dialect(kind).quote(table.cursor_column or "")
        hwm = scalar(conn, f"SELECT MAX({col}) FROM {wrapped}")
        if hwm is None:
            return Window("1 = 0", None, description="incremental: the table is empty")
        last = decode(stored.value) if stored else None
        keys = stored.keys if stored else ()
        if table.unique_key:
            # [last, hwm], minus the rows at `last` whose keys an earlier run delivered: rows that
            # share the boundary value are neither lost nor delivered twice.
            low = f"{col} >= {lit(last)} AND " if last is not None else ""
            seen = ""
            if last is not None and keys:
                names = [dialect(kind).quote(k) for k in table.unique_key]
                key = names[0] if len(names) == 1 else f"({', '.join(names)})"
                values = ", ".join(
                    lit(decode(k[0]))
                    if len(names) == 1
                    else "(" + ", ".join(lit(decode(v)) for v in k) + ")"
                    for k in keys
                )
                seen = f" AND NOT ({col} = {lit(last)} AND {key} IN ({values}))"
            return Window(
                f"{low}{col} <= {lit(hwm)}{seen}",
                # compared as stored: a time-zone-aware high-water mark never equals the naive
                # decoded one, and ties would be delivered again
                Cursor(encode(hwm), keys if stored and encode(hwm) == stored.value else ()),
                description=f"incremental {col} in [{last}, {hwm}]",
            )
        # No key to deduplicate by: [last, hwm) — every row of one cursor value is read in the
        # same run; the newest value waits for a newer one.
        if stored and encode(hwm) == stored.value:
            return Window("1 = 0", None, description=f"incremental: nothing below {hwm}")
        low = f"{col} >= {lit(last)} AND " if last is not None else ""
        return Window(
            f"{low}{col} < {lit(hwm)}",
            Cursor(encode(hwm)),
            description=f"incremental {col} in [{last}, {hwm})",
        )
    if table.mode == "time_window":
        col = dialect(kind).quote(table.time_column or "")
        cutoff = (now or datetime.now(UTC)).replace(tzinfo=None) - timedelta(
            days=table.days_window or 0
        )
        return Window(f"{col} >= {lit(cutoff)}", description=f"time window {col} >= {cutoff}")
    if table.mode == "chunked":
        col = dialect(kind).quote(table.chunk_column or "")
        with conn.cursor() as cur:
            cur.execute(f"SELECT MIN({col}), MAX({col}), COUNT(*) FROM {wrapped}")
            lo, hi, count = cur.fetchone()
        if lo is None:
            return Window("1 = 0", chunks=[], description="chunked: the table is empty")
        # Windows are aligned to multiples of chunk_size, so chunk k is the same range in every
        # run: a resumed run knows which windows an earlier one already delivered.
        size = table.chunk_size
        chunks = [
            (k, f"{col} >= {k * size} AND {col} < {(k + 1) * size}")
            for k in range(int(lo) // size, int(hi) // size + 1)
        ]
        span = int(hi) - int(lo) + 1
        note = f"chunked {col} [{lo}, {hi}] in {len(chunks)} chunks of {size}"
        sparse = bool(count) and count / span < 0.1
        if sparse:
            note += f"; sparse key range: {count} rows over a span of {span}"
        return Window(None, chunks=chunks, description=note, sparse=sparse)
    return Window(None, description="full")
