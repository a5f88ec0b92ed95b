"""The binary log as one of the server's replicas receives it (docs/cdc.md), decoded by rivc.

rivc asks the server for its log from binlog coordinates (or, on MariaDB, from GTIDs) with
COM_BINLOG_DUMP in its non-blocking form: the server sends every event up to its log's end and
stops. The request and the events go over a pymysql connection's own socket (its private
`_write_bytes` and `_rfile`, as replication clients on pymysql do). Of the events, mysql-cdc reads table maps, row images, commits, GTIDs and statements.
A table map is parsed once per distinct shape (a transaction of one row repeats its table's map
each time), into one reader per column; a row event of the one table asked for is decoded in
one loop over its images. Row events of other tables are skipped undecoded.

Values are those the server's own client (pymysql) gives for the same column, read from the
log's encoding: integers (signed: the snapshot's columns say which are unsigned), exact
decimals, strings in their column's charset (bytes for binary ones), dates, datetimes and
timestamps (naive, UTC), times as signed timedeltas (a negative one with a fraction included),
enum labels, bits as their bytes. A type mysql-cdc does not read, or an event it cannot read
past (a compressed one), is refused by name.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

from rivc.compiler.errors import ConnectorError

# event types (MySQL's and MariaDB's log_event.h)
QUERY, ROTATE, XID, TABLE_MAP, GTID, MARIADB_GTID = 2, 4, 16, 19, 33, 162
ROW_EVENTS = {23: "c", 24: "u", 25: "d", 30: "c", 31: "u", 32: "d"}  # v1 and v2 row events
UNREADABLE = {
    39: "a partial JSON update (binlog_row_value_options)",
    40: "a compressed transaction (binlog_transaction_compression)",
    165: "a compressed statement (log_bin_compress)",
    166: "a compressed row event (log_bin_compress)",
    167: "a compressed row event (log_bin_compress)",
    168: "a compressed row event (log_bin_compress)",
    169: "a compressed row event (log_bin_compress)",
    170: "a compressed row event (log_bin_compress)",
    171: "a compressed row event (log_bin_compress)",
}

# the events the stream yields: (kind, end position in the file, timestamp, what): a
# RowsEvent, None, a GTID, or a statement's (database, text)
ROWS, COMMIT, GTID_AT, STATEMENT = "rows", "commit", "gtid", "statement"
Event = tuple[str, int, int, Any]


class RowsEvent(NamedTuple):
    """A row event of the table asked for, decoded when `images` is called (a large
    transaction's are kept as they came until its commit)."""

    kind: int
    table: _TableMap
    body: bytes

    @property
    def op(self) -> str:
        return ROW_EVENTS[self.kind]

    @property
    def names(self) -> tuple[str, ...]:
        return self.table.names

    def images(self) -> list[tuple[list[Any] | None, list[Any] | None]]:
        """(before, after) of each row, in the table's column order."""
        return self.table.rows(self.kind, self.body)


_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
HEAD = struct.Struct("<IBIIIH")  # timestamp, type, server id, size, end position, flags
_EPOCH = datetime(1970, 1, 1)


class BinlogDump:
    """A server's binlog events as it sends them (raw packets), from `start` (file, offset) or,
    on MariaDB, from the GTID position `gtid`, to its end now; `file` is the file it begins
    in, `trailer` the bytes of checksum each event ends with."""

    def __init__(
        self, db: Any, server_id: int, start: tuple[str, int] | None, gtid: str | None
    ) -> None:
        self.db = db
        self.file = start[0] if start else ""
        with db.cursor() as cur:
            cur.execute("SELECT @@global.binlog_checksum")
            checksum = str(cur.fetchone()[0]).upper() not in ("NONE", "0", "")
            if checksum:  # the server sends events with their CRC32, which the stream drops
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = 4")  # GTID events, not BEGIN queries
            # rivc stops reading while it writes a large transaction's pieces: the server
            # waits for it instead of dropping the connection after a minute
            cur.execute("SET SESSION net_write_timeout = 3600")
            if start is None:  # MariaDB from a GTID position
                cur.execute("SET @slave_connect_state = %s", (gtid,))
                cur.execute("SET @slave_gtid_strict_mode = 1")
                cur.execute("SET @slave_gtid_ignore_duplicates = 0")
        self.trailer = 4 if checksum else 0
        name, pos = start if start else ("", 4)
        # COM_BINLOG_DUMP, BINLOG_DUMP_NON_BLOCK: the server stops at its log's end
        body = b"\x12" + struct.pack("<IHI", pos, 1, server_id) + name.encode()
        db._write_bytes(struct.pack("<I", len(body))[:3] + b"\x00" + body)
        db._next_seq_id = 1

    def __iter__(self) -> Iterator[bytes]:
        import pymysql

        read = self.db._rfile.read
        while True:
            head = read(4)
            if len(head) < 4:
                raise pymysql.err.OperationalError(2013, "Lost connection to the server")
            size = head[0] | head[1] << 8 | head[2] << 16
            data = read(size)
            while size == 0xFFFFFF:  # an event of 16 MB or more comes in several packets
                head = read(4)
                size = head[0] | head[1] << 8 | head[2] << 16
                data += read(size)
            first = data[0]
            if first == 0xFE and len(data) < 9:  # the log's end (non-blocking)
                return
            if first == 0xFF:
                pymysql.err.raise_mysql_exception(data)
            yield data


class Packets(Protocol):
    """Binlog events as the server sends them: a BinlogDump, or a shared read's part of one
    (sharedread.py)."""

    file: str
    trailer: int

    def __iter__(self) -> Iterator[bytes]: ...


class BinlogStream:
    """The events of `packets`; `file` is the binlog file being read. Only the row events of
    `table` (schema, name) are decoded; what cannot be read is refused under `label`."""

    def __init__(self, packets: Packets, table: tuple[str, str], label: str) -> None:
        self.packets, self.want, self.label = packets, table, label
        self.file = packets.file
        self._maps: dict[bytes, _TableMap] = {}  # a table map's body: its parse
        self._ids: dict[int, _TableMap] = {}  # the table ids of the maps in force

    def __iter__(self) -> Iterator[Event]:
        try:
            yield from self._events()
        except ConnectorError as e:
            raise ConnectorError(f"{self.label}: {e.message}") from None

    def _events(self) -> Iterator[Event]:
        trailer, want = self.packets.trailer, self.want
        unpack_head = HEAD.unpack_from
        for data in self.packets:
            when, kind, server, _, end, _ = unpack_head(data, 1)
            body = data[20 : len(data) - trailer]
            rows = ROW_EVENTS.get(kind)
            if rows is not None:
                table = self._ids.get(int.from_bytes(body[:6], "little"))
                if table is not None and table.name == want:
                    yield ROWS, end, when, RowsEvent(kind, table, body)
            elif kind == TABLE_MAP:
                table = self._maps.get(body)
                if table is None:
                    table = self._maps[body] = _TableMap(body, self.label)
                self._ids[table.id] = table
            elif kind == XID:
                yield COMMIT, end, when, None
            elif kind == QUERY:
                yield STATEMENT, end, when, query_of(body)
            elif kind == MARIADB_GTID:
                seq, domain = _U64.unpack_from(body)[0], _U32.unpack_from(body, 8)[0]
                yield GTID_AT, end, when, f"{domain}-{server}-{seq}"
            elif kind == GTID:
                sid, gno = body[1:17].hex(), struct.unpack_from("<q", body, 17)[0]
                uuid = f"{sid[:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:]}"
                yield GTID_AT, end, when, f"{uuid}:{gno}"
            elif kind == ROTATE:
                self.file = body[8:].decode()
            elif kind in UNREADABLE:
                raise ConnectorError(
                    f"the binlog holds {UNREADABLE[kind]}, which mysql-cdc cannot read: turn "
                    "the setting off on the server"
                )


def query_of(body: bytes) -> tuple[str, str]:
    """A query event's database and statement."""
    schema_len = body[8]
    status_len = _U16.unpack_from(body, 11)[0]
    at = 13 + status_len
    return body[at : at + schema_len].decode(errors="replace"), body[at + schema_len + 1 :].decode(
        errors="replace"
    )


def _lenenc(data: bytes, at: int) -> tuple[int, int]:
    first = data[at]
    if first < 0xFB:
        return first, at + 1
    if first == 0xFC:
        return _U16.unpack_from(data, at + 1)[0], at + 3
    if first == 0xFD:
        return int.from_bytes(data[at + 1 : at + 4], "little"), at + 4
    return _U64.unpack_from(data, at + 1)[0], at + 9


# column types (MySQL's field_types.h)
_TINY, _SHORT, _LONG, _FLOAT, _DOUBLE, _TIMESTAMP, _LONGLONG, _INT24 = 1, 2, 3, 4, 5, 7, 8, 9
_DATE, _TIME, _DATETIME, _YEAR, _VARCHAR, _BIT = 10, 11, 12, 13, 15, 16
_TIMESTAMP2, _DATETIME2, _TIME2, _JSON, _NEWDECIMAL, _ENUM, _SET = 17, 18, 19, 245, 246, 247, 248
_BLOB, _VAR_STRING, _STRING, _GEOMETRY = 252, 253, 254, 255
_META = {
    _FLOAT: 1,
    _DOUBLE: 1,
    _VARCHAR: 2,
    _VAR_STRING: 2,
    _STRING: 2,
    _NEWDECIMAL: 2,
    _BLOB: 1,
    _GEOMETRY: 1,
    _JSON: 1,
    _BIT: 2,
    _TIMESTAMP2: 1,
    _DATETIME2: 1,
    _TIME2: 1,
    _ENUM: 2,
    _SET: 2,
}
_CHARACTER = (_STRING, _VAR_STRING, _VARCHAR, _BLOB)

Reader = Callable[[bytes, int], tuple[Any, int]]


class _TableMap:
    """A table map event: the table's id and name, its columns' names and one reader per
    column for its row images."""

    def __init__(self, body: bytes, label: str) -> None:
        self.id, self.label = int.from_bytes(body[:6], "little"), label
        at = 8
        schema = body[at + 1 : at + 1 + body[at]].decode()
        at += 2 + body[at]
        table = body[at + 1 : at + 1 + body[at]].decode()
        at += 2 + body[at]
        self.name = (schema, table)
        count, at = _lenenc(body, at)
        types = list(body[at : at + count])
        at += count
        size, at = _lenenc(body, at)
        meta_end, metas = at + size, []
        for t in types:
            n = _META.get(t, 0)
            metas.append(body[at : at + n])
            at += n
        at = meta_end + (count + 7) // 8  # past the nullability bitmap
        for i, (t, m) in enumerate(zip(types, metas, strict=True)):
            if t == _STRING and m[0] in (_ENUM, _SET):  # an enum or set, its real type first
                types[i] = m[0]
        names: list[str] = [f"column {i + 1}" for i in range(count)]
        charsets: list[int] = []
        labels: list[list[str]] = []
        character = [i for i, t in enumerate(types) if t in _CHARACTER]
        while at < len(body):  # the optional metadata (binlog_row_metadata = FULL)
            field = body[at]
            length, at = _lenenc(body, at + 1)
            value, at = body[at : at + length], at + length
            if field == 4:  # the columns' names
                names, p = [], 0
                while p < len(value):
                    n, p = _lenenc(value, p)
                    names.append(value[p : p + n].decode())
                    p += n
            elif field == 2:  # the character columns' default charset, and the exceptions
                default, p = _lenenc(value, 0)
                charsets = [default] * len(character)
                while p < len(value):
                    index, p = _lenenc(value, p)
                    charsets[index], p = _lenenc(value, p)
            elif field == 3:  # each character column's charset
                p = 0
                while p < len(value):
                    c, p = _lenenc(value, p)
                    charsets.append(c)
            elif field == 6:  # each enum column's labels
                p = 0
                while p < len(value):
                    n, p = _lenenc(value, p)
                    found = []
                    for _ in range(n):
                        k, p = _lenenc(value, p)
                        found.append(value[p : p + k].decode())
                        p += k
                    labels.append(found)
        charset = dict(zip(character, charsets, strict=False))
        enums = iter(labels)
        self.names = tuple(names)
        self.readers = [
            _reader(t, m, names[i], charset.get(i), next(enums, []) if t == _ENUM else [])
            for i, (t, m) in enumerate(zip(types, metas, strict=True))
        ]

    def rows(self, kind: int, body: bytes) -> list[tuple[list[Any] | None, list[Any] | None]]:
        """A row event's images, (before, after) each, in the table's column order."""
        try:
            return self._rows(kind, body)
        except ConnectorError as e:
            raise ConnectorError(f"{self.label}: {e.message}") from None

    def _rows(self, kind: int, body: bytes) -> list[tuple[list[Any] | None, list[Any] | None]]:
        at = 8
        if kind >= 30:  # v2: extra data, its length counting itself
            at += _U16.unpack_from(body, at)[0]
        count, at = _lenenc(body, at)
        width = (count + 7) // 8
        if body[at : at + width] != b"\xff" * (count // 8) + (
            bytes([(1 << count % 8) - 1]) if count % 8 else b""
        ):
            raise ConnectorError(
                f"table {'.'.join(self.name)}: a row event in the binlog lacks columns "
                "(binlog_row_image is not FULL for it)"
            )
        at += width * (2 if kind in (24, 31) else 1)
        end, readers = len(body), self.readers
        images: list[list[Any]] = []
        while at < end:
            nulls = int.from_bytes(body[at : at + width], "little")
            at += width
            row: list[Any] = []
            if nulls:
                for i, read in enumerate(readers):
                    if nulls >> i & 1:
                        row.append(None)
                    else:
                        value, at = read(body, at)
                        row.append(value)
            else:
                for read in readers:
                    value, at = read(body, at)
                    row.append(value)
            images.append(row)
        if kind in (24, 31):
            return list(zip(images[::2], images[1::2], strict=True))
        if kind in (25, 32):
            return [(image, None) for image in images]
        return [(None, image) for image in images]


def _fixed(fmt: str) -> Reader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)
    return lambda b, at: (unpack(b, at)[0], at + size)


def _reader(kind: int, meta: bytes, name: str, charset: int | None, labels: list[str]) -> Reader:
    """The reader of one column's value in a row image: (value, where the next begins)."""
    if kind == _TINY:
        return _fixed("<b")
    if kind == _SHORT:
        return _fixed("<h")
    if kind == _LONG:
        return _fixed("<i")
    if kind == _LONGLONG:
        return _fixed("<q")
    if kind == _INT24:
        return lambda b, at: (int.from_bytes(b[at : at + 3], "little", signed=True), at + 3)
    if kind == _FLOAT:
        return _fixed("<f")
    if kind == _DOUBLE:
        return _fixed("<d")
    if kind == _YEAR:
        return lambda b, at: (b[at] + 1900 if b[at] else 0, at + 1)
    if kind in (_VARCHAR, _VAR_STRING, _STRING, _BLOB):
        if kind == _BLOB:
            prefix = meta[0]
        elif kind == _STRING:
            both = meta[0] << 8 | meta[1]
            length = (((both >> 4) & 0x300) ^ 0x300) + (both & 0xFF)
            prefix = 1 if length < 256 else 2
            if charset == 63:  # binary(n): the log drops the zero bytes the server pads it with
                return _padded(prefix, length)
        else:
            prefix = 1 if _U16.unpack_from(meta)[0] < 256 else 2
        return _text(prefix, _encoding(charset))
    if kind == _NEWDECIMAL:
        return _decimal(meta[0], meta[1])
    if kind == _ENUM:
        size, values = meta[1], ["", *labels]
        return lambda b, at: (values[int.from_bytes(b[at : at + size], "little")], at + size)
    if kind == _BIT:
        size = (meta[1] * 8 + meta[0] + 7) // 8
        return lambda b, at: (b[at : at + size], at + size)
    if kind == _DATE:
        return _date
    if kind == _DATETIME2:
        return _datetime2(meta[0])
    if kind == _TIMESTAMP2:
        return _timestamp2(meta[0])
    if kind == _TIME2:
        return _time2(meta[0])
    if kind == _TIMESTAMP:
        return lambda b, at: (_since_epoch(_U32.unpack_from(b, at)[0], 0), at + 4)
    if kind == _DATETIME:
        return _datetime
    if kind == _TIME:
        return _time
    what = {_JSON: "json", _SET: "set", _GEOMETRY: "geometry"}.get(kind, f"type {kind}")
    return _refuse(name, what)


def _refuse(name: str, what: str) -> Reader:
    def read(b: bytes, at: int) -> tuple[Any, int]:
        raise ConnectorError(
            f"column {name} holds a {what} value in the binlog, which mysql-cdc does not read"
        )

    return read


def _encoding(charset: int | None) -> str | None:
    """Python's codec for a collation id; None for binary (bytes are kept)."""
    from pymysql.charset import charset_by_id

    if charset == 63:
        return None
    if charset is None:
        return "utf8"
    try:
        found = str(charset_by_id(charset).encoding)
    except KeyError:
        return "utf8"
    try:
        "".encode(found)
    except LookupError:
        return None
    return found


def _text(prefix: int, encoding: str | None) -> Reader:
    def read(b: bytes, at: int) -> tuple[Any, int]:
        n = int.from_bytes(b[at : at + prefix], "little")
        at += prefix
        raw = b[at : at + n]
        if encoding is None:
            return raw, at + n
        return (raw.decode("ascii") if raw.isascii() else raw.decode(encoding)), at + n

    if prefix == 1 and encoding == "utf8":

        def read1(b: bytes, at: int) -> tuple[Any, int]:
            n = b[at] + at + 1
            return b[at + 1 : n].decode("utf8"), n

        return read1
    return read


def _padded(prefix: int, length: int) -> Reader:
    def read(b: bytes, at: int) -> tuple[Any, int]:
        n = int.from_bytes(b[at : at + prefix], "little")
        at += prefix
        return b[at : at + n].ljust(length, b"\x00"), at + n

    return read


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal(precision: int, scale: int) -> Reader:
    """MySQL's binary decimal: groups of nine digits in four bytes (a shorter group first and
    last), read here as one big-endian number; its first bit is flipped for the sign, and a
    negative value has every bit inverted."""
    whole, whole_rest = divmod(precision - scale, 9)
    part, part_rest = divmod(scale, 9)
    widths = (
        [(_DIG2BYTES[whole_rest], 10**whole_rest)] * bool(whole_rest)
        + [(4, 10**9)] * (whole + part)
        + [(_DIG2BYTES[part_rest], 10**part_rest)] * bool(part_rest)
    )
    size = sum(w for w, _ in widths)
    top = 1 << (8 * size - 1)
    groups, shift = [], 8 * size  # each group: where it sits in the number, its digits' base
    for width, base in widths:
        shift -= 8 * width
        groups.append((shift, (1 << 8 * width) - 1, base))
    tail = f"E-{scale}"

    def read(b: bytes, at: int) -> tuple[Any, int]:
        v = int.from_bytes(b[at : at + size], "big")
        negative = v < top
        v = top - 1 - v if negative else v - top
        number = 0
        for place, mask, base in groups:
            number = number * base + (v >> place & mask)
        return Decimal(f"{'-' if negative else ''}{number}{tail}"), at + size

    return read


def _fraction(fsp: int) -> tuple[int, int]:
    """The bytes of a fraction of `fsp` digits and the microseconds of its unit."""
    size = (fsp + 1) // 2
    return size, (0, 10_000, 100, 1)[size]


def _date(b: bytes, at: int) -> tuple[Any, int]:
    v = int.from_bytes(b[at : at + 3], "little")
    day, month, year = v & 31, v >> 5 & 15, v >> 9
    return (date(year, month, day) if year and month and day else None), at + 3


def _datetime2(fsp: int) -> Reader:
    size, unit = _fraction(fsp)

    def read(b: bytes, at: int) -> tuple[Any, int]:
        v = int.from_bytes(b[at : at + 5], "big") - 0x8000000000
        micros = int.from_bytes(b[at + 5 : at + 5 + size], "big") * unit if size else 0
        ym, day = v >> 22, v >> 17 & 31
        try:
            value = datetime(ym // 13, ym % 13, day, v >> 12 & 31, v >> 6 & 63, v & 63, micros)
        except ValueError:  # a zero date
            value = None
        return value, at + 5 + size

    return read


_SECONDS: dict[int, datetime] = {}  # recent timestamps' whole seconds: a row's often repeat


def _since_epoch(seconds: int, micros: int) -> datetime | None:
    if not seconds and not micros:
        return None  # the zero timestamp
    whole = _SECONDS.get(seconds)
    if whole is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        whole = _SECONDS[seconds] = _EPOCH + timedelta(0, seconds)
    return whole.replace(microsecond=micros) if micros else whole


def _timestamp2(fsp: int) -> Reader:
    size, unit = _fraction(fsp)

    def read(b: bytes, at: int) -> tuple[Any, int]:
        seconds = int.from_bytes(b[at : at + 4], "big")
        micros = int.from_bytes(b[at + 4 : at + 4 + size], "big") * unit if size else 0
        return _since_epoch(seconds, micros), at + 4 + size

    return read


def _time2(fsp: int) -> Reader:
    """A time: hours, minutes and seconds packed with the fraction into one number, offset by
    its top bit; a negative time is the negative number (its fraction included)."""
    size, unit = _fraction(fsp)
    width, shift = 3 + size, 8 * size
    offset = 1 << (8 * width - 1)

    def read(b: bytes, at: int) -> tuple[Any, int]:
        v = int.from_bytes(b[at : at + width], "big") - offset
        sign, v = (-1, -v) if v < 0 else (1, v)
        whole, fraction = v >> shift, v & ((1 << shift) - 1)
        hours, minutes, seconds = whole >> 12 & 1023, whole >> 6 & 63, whole & 63
        value = timedelta(
            hours=hours, minutes=minutes, seconds=seconds, microseconds=fraction * unit
        )
        return (value if sign > 0 else -value), at + width

    return read


def _datetime(b: bytes, at: int) -> tuple[Any, int]:
    v = _U64.unpack_from(b, at)[0]
    day, clock = divmod(v, 1_000_000)
    try:
        value = datetime(
            day // 10_000,
            day // 100 % 100,
            day % 100,
            clock // 10_000,
            clock // 100 % 100,
            clock % 100,
        )
    except ValueError:
        value = None
    return value, at + 8


def _time(b: bytes, at: int) -> tuple[Any, int]:
    v = int.from_bytes(b[at : at + 3], "little", signed=True)
    sign, v = (-1, -v) if v < 0 else (1, v)
    value = timedelta(hours=v // 10_000, minutes=v // 100 % 100, seconds=v % 100)
    return (value if sign > 0 else -value), at + 3
