"""The one type mapping of relational sources: a database column -> the type rivc delivers.

Every reader (PostgreSQL COPY, Spark JDBC for PostgreSQL and MySQL/MariaDB) asks this module how
to select a column and what it becomes; docs/types.md is its table in prose. A column whose
values a JDBC or CSV transport could change travels as the database's own text and is converted
by rivc exactly (`kind`), or the value is refused by name.

Conversion kinds (text -> delivered type):
    native     no conversion: the transport carries the value exactly
    text       the database's text is the value (string)
    decimal    exact: a value with more digits than the decimal holds, or NaN/Infinity, is refused
    round      a declared decimal(p,s): rounded half-even to s digits; too many digits refused
    timestamp  `YYYY-MM-DD HH:MM:SS[.ffffff]` in UTC; infinity, BC or zero dates refused
    date       `YYYY-MM-DD`; infinity, BC or zero dates refused
    cast       a declared scalar type: converted, and a value the type cannot read is refused
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .sql import quote

Kind = Literal["native", "text", "decimal", "round", "timestamp", "date", "cast"]

DEFAULT_NUMERIC = (38, 18)  # unconstrained numeric: decimal(38,18)
MAX_PRECISION = 38

# Types a user may declare for a relational column in `columns:` (Spark SQL names).
_DECLARABLE = re.compile(
    r"^(string|double|float|bigint|int|smallint|tinyint|boolean|date|timestamp"
    r"|decimal\(\s*(\d+)\s*,\s*(\d+)\s*\))$"
)


def declared_type(text: str) -> str:
    """A declared column type in canonical form; ValueError names what is allowed."""
    m = _DECLARABLE.match(text.strip().lower())
    if not m:
        raise ValueError(
            f"type {text!r} cannot be declared for a database column: use string, double, "
            "float, bigint, int, smallint, tinyint, boolean, date, timestamp or decimal(p,s)"
        )
    if m.group(2) is not None:
        p, s = int(m.group(2)), int(m.group(3))
        if not 1 <= p <= MAX_PRECISION or s > p:
            raise ValueError(f"decimal({p},{s}): precision is 1..38 and scale at most precision")
        return f"decimal({p},{s})"
    return m.group(1)


def decimal_args(spark_type: str) -> tuple[int, int]:
    p, s = spark_type[len("decimal(") : -1].split(",")
    return int(p), int(s)


@dataclass(frozen=True, slots=True)
class DbColumn:
    """A column as the database describes it (from a `LIMIT 0` probe)."""

    name: str
    type: str  # lower case, without modifiers: numeric, int4, timestamptz / decimal, bit, set
    precision: int | None = None  # numeric/decimal precision, bit length
    scale: int | None = None
    unsigned: bool = False
    array: bool = False  # PostgreSQL arrays: `type` is the element type
    binary: bool = False  # MySQL: a byte string (binary charset)


@dataclass(frozen=True, slots=True)
class Delivery:
    """How one column is selected, carried and delivered."""

    name: str
    db_type: str  # as the database names it, for messages
    spark: str  # the delivered Spark SQL type
    expr: str  # the select expression on the database side
    kind: Kind
    copy: bool = True  # the PostgreSQL COPY reader can carry it
    # a database expression, selected beside the column: the value's text where the value
    # cannot be delivered (its expr then gives NULL), else NULL
    check: str = ""

    @property
    def copy_expr(self) -> str:
        """The select expression for COPY. For numerics and times COPY's text is the cast's
        text, and the cast would only cost the server time; for others they differ (inet's
        cast adds /128, bool's says true where COPY says t), so the cast stays."""
        if self.kind in ("decimal", "date", "timestamp"):
            return self.expr.removesuffix("::text")
        return self.expr

    @property
    def transport(self) -> str:
        """The Spark type the value travels as: its own when native, else text."""
        return self.spark if self.kind == "native" else "string"


def _decimal(precision: int | None, scale: int | None) -> str:
    """The decimal that holds every value of numeric(precision, scale). PostgreSQL 15 allows a
    negative scale (numeric(5,-2) rounds to hundreds: up to 9999900, seven whole digits) and a
    scale above the precision (numeric(2,5): up to 0.00099); Spark's decimals allow neither."""
    if precision is None or precision <= 0:
        p, s = DEFAULT_NUMERIC
    else:
        s = scale or 0
        p = precision - s if s < 0 else max(precision, s)
        s = max(s, 0)
        p, s = min(p, MAX_PRECISION), min(s, MAX_PRECISION)  # a value past 38 digits: refused
    return f"decimal({p},{s})"


def _described(col: DbColumn) -> str:
    if col.precision and col.type in ("numeric", "decimal"):
        return f"{col.type}({col.precision},{col.scale or 0})"
    if col.precision and col.type == "bit":
        return f"bit({col.precision})"
    return col.type + ("[]" if col.array else "") + (" unsigned" if col.unsigned else "")


# PostgreSQL: type name -> (Spark type, kind) for values carried natively
_PG_NATIVE = {
    "bool": "boolean",
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "float4": "float",
    "float8": "double",
    "text": "string",
    "varchar": "string",
    "bpchar": "string",
    "name": "string",
    "char": "string",
}
_PG_ARRAYS = {"bool", "int2", "int4", "int8", "float4", "float8", "text", "varchar"}


def postgres(col: DbColumn, declared: str | None, q: str) -> Delivery:
    """The delivery of a PostgreSQL column (`declared`: the user's type from `columns:`; `q`:
    its name as the database quotes it)."""
    described = _described(col)
    if declared is not None:
        utc = col.type == "timestamptz" and not col.array
        return _declared(
            col.name,
            described,
            declared,
            f"({q} AT TIME ZONE 'UTC')::text" if utc else f"{q}::text",
        )
    if col.array:
        if col.type in _PG_ARRAYS:
            # Spark's arrays have one dimension and start at 1; JDBC would flatten the bounds of
            # `[0:1]={7,8}` away and turn a nested array into Java object names
            bad = f"COALESCE(array_ndims({q}), 1) <> 1 OR COALESCE(array_lower({q}, 1), 1) <> 1"
            return Delivery(
                col.name,
                described,
                f"array<{_PG_NATIVE[col.type]}>",
                f"CASE WHEN {bad} THEN NULL ELSE {q} END",
                "native",
                copy=False,
                check=f"CASE WHEN {bad} THEN {q}::text END",
            )
        return Delivery(col.name, described, "string", f"{q}::text", "text")
    t = col.type
    if t in _PG_NATIVE:
        return Delivery(col.name, described, _PG_NATIVE[t], q, "native")
    if t == "numeric":
        return Delivery(
            col.name, described, _decimal(col.precision, col.scale), f"{q}::text", "decimal"
        )
    if t == "money":  # ±92233720368547758.07
        return Delivery(col.name, described, "decimal(19,2)", f"{q}::numeric::text", "decimal")
    if t == "date":
        return Delivery(col.name, described, "date", f"{q}::text", "date")
    if t == "timestamp":
        return Delivery(col.name, described, "timestamp", f"{q}::text", "timestamp")
    if t == "timestamptz":
        expr = f"({q} AT TIME ZONE 'UTC')::text"
        return Delivery(col.name, described, "timestamp", expr, "timestamp")
    if t == "bit" and col.precision == 1:
        return Delivery(col.name, described, "boolean", f"({q} = B'1')", "native")
    if t == "bytea":
        return Delivery(col.name, described, "binary", q, "native", copy=False)
    # interval (ISO 8601 under the session's intervalstyle), time, timetz, uuid, json, jsonb,
    # inet, cidr, macaddr, xml, bit(n), varbit, enums, domains, ranges: the database's text
    return Delivery(col.name, described, "string", f"{q}::text", "text")


# MySQL/MariaDB (FIELD_TYPE codes as pymysql names them, lower case)
_MY_INTEGERS = {
    # type: (signed, unsigned)
    "tiny": ("tinyint", "smallint"),
    "short": ("smallint", "int"),
    "int24": ("int", "int"),
    "long": ("int", "bigint"),
    "longlong": ("bigint", "decimal(20,0)"),
}
_MY_STRINGS = {
    "varchar",
    "var_string",
    "string",
    "tiny_blob",
    "medium_blob",
    "long_blob",
    "blob",
    "json",
}


def mysql(col: DbColumn, declared: str | None, q: str) -> Delivery:
    """The delivery of a MySQL/MariaDB column, always read through JDBC (`q`: its name as the
    database quotes it)."""
    described = _described(col)
    if declared is not None:
        return _declared(col.name, described, declared, f"CAST({q} AS CHAR)")
    t = col.type
    if t in _MY_INTEGERS:
        spark = _MY_INTEGERS[t][1 if col.unsigned else 0]
        return Delivery(col.name, described, spark, q, "native", copy=False)
    if t in ("float", "double"):
        return Delivery(col.name, described, t, q, "native", copy=False)
    if t == "year":
        return Delivery(col.name, described, "int", f"({q} + 0)", "native", copy=False)
    if t in ("decimal", "newdecimal"):
        spark = _decimal(col.precision, col.scale)
        return Delivery(col.name, described, spark, f"CAST({q} AS CHAR)", "decimal", copy=False)
    if t in ("date", "newdate"):
        return Delivery(col.name, described, "date", f"CAST({q} AS CHAR)", "date", copy=False)
    if t in ("datetime", "timestamp"):
        expr = f"CAST({q} AS CHAR)"
        return Delivery(col.name, described, "timestamp", expr, "timestamp", copy=False)
    if t == "time":  # a duration of up to ±838:59:59: ISO 8601, e.g. -PT838H59M59.5S
        expr = (
            f"CASE WHEN {q} IS NULL THEN NULL ELSE CONCAT(IF({q} < TIME '00:00:00', '-', ''), "
            f"'PT', HOUR({q}), 'H', MINUTE({q}), 'M', SECOND({q}), "
            f"IF(MICROSECOND({q}) > 0, CONCAT('.', TRIM(TRAILING '0' FROM "
            f"LPAD(MICROSECOND({q}), 6, '0'))), ''), 'S') END"
        )
        return Delivery(col.name, described, "string", expr, "text", copy=False)
    if t == "bit":
        if col.precision == 1:
            return Delivery(col.name, described, "boolean", f"({q} = 1)", "native", copy=False)
        expr = f"LPAD(BIN({q}), {col.precision or 1}, '0')"
        return Delivery(col.name, described, "string", expr, "text", copy=False)
    if t == "string" and not col.binary:
        # CHAR(n): Spark would pad it back to n characters; MySQL itself strips the padding
        return Delivery(col.name, described, "string", f"CAST({q} AS CHAR)", "text", copy=False)
    if t in ("enum", "set"):
        return Delivery(col.name, described, "string", f"CAST({q} AS CHAR)", "text", copy=False)
    if t in _MY_STRINGS:
        spark = "binary" if col.binary else "string"
        return Delivery(col.name, described, spark, q, "native", copy=False)
    raise ValueError(
        f"column {col.name} has type {described}, which rivc cannot deliver: "
        "convert it in the source's query:"
    )


def _declared(name: str, described: str, declared: str, as_text: str) -> Delivery:
    spark = declared_type(declared)
    if spark == "string":
        return Delivery(name, described, spark, as_text, "text")
    if spark.startswith("decimal"):
        return Delivery(name, described, spark, as_text, "round")
    if spark in ("date", "timestamp"):
        return Delivery(name, described, spark, as_text, spark)  # type: ignore[arg-type]
    return Delivery(name, described, spark, as_text, "cast")


_NUMBER = re.compile(r"[+-]?0*([0-9]*)(?:[.]([0-9]*?)0*)?")


def suggestion(d: Delivery, value: str) -> str:
    """The narrowest declarable type that holds a refused value exactly: a decimal(38,s) with
    room for its digits, else string (which holds every value as the database's text)."""
    m = _NUMBER.fullmatch(value)
    if d.kind not in ("decimal", "round") or not m or not value.strip("+-."):
        return "string"
    whole, s = len(m.group(1)), decimal_args(d.spark)[1]
    frac = len(m.group(2) or "") if d.kind == "decimal" else s  # a declared scale rounds
    scale = min(max(frac, s), MAX_PRECISION - whole)
    return f"decimal({MAX_PRECISION},{scale})" if scale >= frac else "string"


def refusal(label: str, d: Delivery, value: str, advice: str | None = None) -> str:
    """The one line that refuses a value (the same words from every reader)."""
    shown = value if len(value) <= 80 or value == _PLACEHOLDER else value[:77] + "..."
    why = {
        "decimal": f"does not fit {d.spark} exactly",
        "round": f"does not fit {d.spark}",
        "timestamp": "is not a timestamp Spark and Delta can hold",
        "date": "is not a date Spark and Delta can hold",
        "cast": f"cannot be read as {d.spark}",
    }.get(d.kind, f"cannot be delivered as {d.spark}")
    if d.spark.startswith("array<"):
        why = f"has more than one dimension or does not start at 1, which {d.spark} cannot hold"
    return (
        f"{label}: column {d.name} ({d.db_type}) value '{shown}' {why}: declare the column's "
        f"type in columns: (e.g. {d.name}: {advice or suggestion(d, value)}) or cast it in query:"
    )


# --------------------------------------------------------------------------- Spark SQL


def _spark_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_PLACEHOLDER = "\x00"


_ADVICE = "\x01"


def _suggestion_sql(d: Delivery, col: str) -> str:
    """suggestion() in Spark SQL, for a value refused inside Spark."""
    if d.kind not in ("decimal", "round"):
        return "'string'"
    s = decimal_args(d.spark)[1]
    whole = f"length(regexp_extract({col}, '^[+-]?0*([0-9]*)', 1))"
    frac = f"length(regexp_extract({col}, '[.]([0-9]*?)0*$', 1))" if d.kind == "decimal" else s
    scale = f"least(greatest({frac}, {s}), {MAX_PRECISION} - {whole})"
    return (
        f"CASE WHEN {col} RLIKE '^[+-]?[0-9]*([.][0-9]*)?$' AND {col} RLIKE '[0-9]' "
        f"AND {scale} >= {frac} THEN concat('decimal({MAX_PRECISION},', {scale}, ')') "
        "ELSE 'string' END"
    )


def _refuse_sql(label: str, d: Delivery, col: str, value: str | None = None) -> str:
    """raise_error with refusal()'s words; `value`: the column holding the value's text."""
    value = value or col
    text = refusal(label, d, _PLACEHOLDER, _ADVICE)
    before, rest = text.split(_PLACEHOLDER)
    middle, after = rest.split(_ADVICE)
    # rivc's error inside Spark's, found there by the runtime as any rivc error raised in a task
    prefix = "rivc.compiler.errors.ConnectorError: " + before
    shown = f"CASE WHEN length({value}) > 80 THEN concat(substr({value}, 1, 77), '...') ELSE {value} END"
    return (
        f"raise_error(concat({_spark_string(prefix)}, {shown}, {_spark_string(middle)}, "
        f"{_suggestion_sql(d, value)}, {_spark_string(after)}))"
    )


TIMESTAMP_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?$"
DATE_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def exact_decimal_pattern(p: int, s: int) -> str:
    """A decimal's text that decimal(p,s) holds exactly (trailing zeros are no change)."""
    frac = f"([.][0-9]{{0,{s}}}0*)?" if s else "([.]0*)?"
    return f"^-?0*[0-9]{{0,{p - s}}}{frac}$"


def check_name(d: Delivery) -> str:
    """The name under which a delivery's check travels beside its column."""
    return f"_rivc_check:{d.name}"


def spark_convert(label: str, d: Delivery) -> str:
    """A Spark SQL expression turning the transported column into the delivered value."""
    c = quote(d.name)
    if d.kind == "text":
        return c
    if d.kind == "native":
        if d.check:
            bad = quote(check_name(d))
            return (
                f"CASE WHEN {bad} IS NOT NULL THEN {_refuse_sql(label, d, c, bad)} "
                f"ELSE CAST({c} AS {d.spark}) END"
            )
        return f"CAST({c} AS {d.spark})"
    refuse = _refuse_sql(label, d, c)
    if d.kind == "decimal":
        p, s = decimal_args(d.spark)
        ok = f"{c} RLIKE {_spark_string(exact_decimal_pattern(p, s))}"
        value = f"CAST({c} AS {d.spark})"
    elif d.kind == "round":
        p, s = decimal_args(d.spark)
        # Spark rounds half up; half-even differs on exact ties whose kept digit is even:
        # there the value is truncated instead.
        if s:
            tie = f"^-?[0-9]*[.][0-9]{{{s}}}50*$"
            kept = f"regexp_extract({c}, '^(-?[0-9]*[.][0-9]{{{s}}})', 1)"
            last = f"regexp_extract({c}, '[.][0-9]{{{s - 1}}}([0-9])', 1)"
        else:
            tie = "^-?[0-9]*[.]50*$"
            kept = f"regexp_extract({c}, '^(-?[0-9]*)[.]', 1)"
            last = f"regexp_extract({c}, '([0-9])[.]', 1)"
        value = (
            f"CASE WHEN {c} RLIKE '{tie}' AND {last} IN ('0','2','4','6','8') "
            f"THEN try_cast({kept} AS {d.spark}) ELSE try_cast({c} AS {d.spark}) END"
        )
        ok = f"{c} RLIKE '^-?[0-9]*([.][0-9]*)?$' AND ({value}) IS NOT NULL"
    elif d.kind in ("timestamp", "date"):
        pattern = TIMESTAMP_TEXT if d.kind == "timestamp" else DATE_TEXT
        value = f"try_cast({c} AS {d.spark})"
        ok = f"{c} RLIKE '{pattern}' AND {c} >= '0001' AND {value} IS NOT NULL"
    else:  # cast
        value = f"try_cast({c} AS {d.spark})"
        ok = f"{value} IS NOT NULL"
    return f"CASE WHEN {c} IS NULL THEN NULL WHEN {ok} THEN {value} ELSE {refuse} END"


# --------------------------------------------------------------------------- what sinks hold

_INTERVAL = re.compile(r"\binterval\b")
_VOID = re.compile(r"\b(void|null)\b")
_MAP_KEY = re.compile(r"\bmap<\s*(\w+)")


def unwritable(holds: str | None, fmt: str | None, spark_type: str) -> str | None:
    """Why a sink that stores values in `holds` ("table": a Delta or Iceberg table; "files":
    files of `fmt`; None: it keeps no typed values) cannot hold a column of `spark_type`
    exactly, with the fix; None when it can. The table is in docs/types.md."""
    t = spark_type.strip().lower()
    tables = holds == "table"
    if holds not in ("table", "files"):
        return None
    if _INTERVAL.search(t):
        return (
            "no table or file format rivc writes has an interval type; cast it in the model, "
            "e.g. to bigint seconds or to string"
        )
    if _VOID.search(t) and (tables or fmt in ("parquet", "avro")):
        return "an untyped NULL column has no type to store; cast it, e.g. CAST(NULL AS string)"
    if fmt == "avro" and any(k != "string" for k in _MAP_KEY.findall(t)):
        return "Avro map keys are strings; cast the keys in the model, or use a Parquet sink"
    return None
