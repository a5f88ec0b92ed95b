"""dbt's cross-database macros (`dbt.date_trunc`, `dbt.type_string`, ...), written for Spark SQL.

dbt ships them in its global project and each adapter overrides some; rivc has one engine, so
each is one Python function returning Spark SQL. They are callable as `dbt.<name>(...)` and
unqualified, as in dbt; a project or package macro of the same name (or a `spark__`/`default__`
implementation found by `adapter.dispatch`) takes precedence where dbt's search order says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import RenderError


def _string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _unit(datepart: str) -> str:
    """A datepart as Spark's timestampadd/timestampdiff take it (an unquoted keyword)."""
    unit = str(datepart).strip().strip("'\"").upper()
    return {"WEEKDAY": "DAY", "DAYOFYEAR": "DAY"}.get(unit, unit)


def date_trunc(datepart: str, date: str) -> str:
    return f"date_trunc('{str(datepart).strip(chr(39))}', {date})"


def dateadd(datepart: str, interval: Any, from_date_or_timestamp: str) -> str:
    return f"timestampadd({_unit(datepart)}, {interval}, {from_date_or_timestamp})"


def datediff(first_date: str, second_date: str, datepart: str) -> str:
    """The datepart boundaries crossed from the first date to the second, as dbt's adapters
    count them (dbt-duckdb, Databricks; dbt-spark for year and day): '2020-12-31' to
    '2021-01-01' is one year. A week begins on Sunday, as dbt-duckdb's and dbt-spark's
    `datediff` have it. (dbt-spark's own hour, minute and second count whole elapsed units,
    and its month and quarter arithmetic is off at month ends; rivc counts boundaries for
    every part.)"""
    unit = _unit(datepart)
    first, second = (f"cast({d} as timestamp)" for d in (first_date, second_date))
    if unit == "WEEK":  # a Sunday-first week is the Monday-first week of the next day
        first, second = (f"timestampadd(DAY, 1, {d})" for d in (first, second))
    first, second = (f"date_trunc('{unit.lower()}', {d})" for d in (first, second))
    return f"timestampdiff({unit}, {first}, {second})"


def last_day(date: str, datepart: str) -> str:
    unit = _unit(datepart)
    if unit == "MONTH":
        return f"last_day({date})"
    start = f"date_trunc('{unit.lower()}', timestampadd({unit}, 1, {date}))"
    return f"date_sub(cast({start} as date), 1)"


def listagg(
    measure: str,
    delimiter_text: str = "','",
    order_by_clause: str | None = None,
    limit_num: int | None = None,
) -> str:
    if limit_num is not None:
        raise RenderError("dbt.listagg: limit_num is not supported on Spark")
    within = f" within group ({order_by_clause})" if order_by_clause else ""
    return f"listagg({measure}, {delimiter_text}){within}"


def split_part(string_text: str, delimiter_text: str, part_number: Any) -> str:
    return f"split_part({string_text}, {delimiter_text}, {part_number})"


def concat(fields: list[str]) -> str:
    return f"concat({', '.join(fields)})"


def escape_single_quotes(expression: str) -> str:
    return str(expression).replace("\\", "\\\\").replace("'", "\\'")


def string_literal(value: str) -> str:
    return _string(str(value))


MACROS: dict[str, Callable[..., Any]] = {
    "type_string": lambda: "string",
    "type_timestamp": lambda: "timestamp",
    "type_float": lambda: "double",
    "type_numeric": lambda: "decimal(28,6)",
    "type_bigint": lambda: "bigint",
    "type_int": lambda: "int",
    "type_boolean": lambda: "boolean",
    "cast": lambda field, type: f"cast({field} as {type})",
    "safe_cast": lambda field, type: f"try_cast({field} as {type})",
    "cast_bool_to_text": lambda field: f"cast({field} as string)",
    "concat": concat,
    "hash": lambda field: f"md5(cast({field} as string))",
    "date_trunc": date_trunc,
    "dateadd": dateadd,
    "datediff": datediff,
    "last_day": last_day,
    "date": lambda year, month, day: f"make_date({year}, {month}, {day})",
    "split_part": split_part,
    "listagg": listagg,
    "any_value": lambda expression: f"any_value({expression})",
    "bool_or": lambda expression: f"bool_or({expression})",
    "length": lambda expression: f"length({expression})",
    "position": lambda substring_text, string_text: f"position({substring_text} in {string_text})",
    "replace": lambda field, old_chars, new_chars: f"replace({field}, {old_chars}, {new_chars})",
    "right": lambda string_text, length_expression: f"right({string_text}, {length_expression})",
    "escape_single_quotes": escape_single_quotes,
    "string_literal": string_literal,
    "current_timestamp": lambda: "current_timestamp()",
    "current_timestamp_backcompat": lambda: "current_timestamp()",
    "current_timestamp_in_utc_backcompat": lambda: "current_timestamp()",
    "intersect": lambda: "intersect",
    "except": lambda: "except",
    "array_construct": lambda inputs=(), data_type=None: f"array({', '.join(map(str, inputs))})",
    "array_append": lambda array, new_element: f"array_append({array}, {new_element})",
    "array_concat": lambda array_1, array_2: f"concat({array_1}, {array_2})",
}
