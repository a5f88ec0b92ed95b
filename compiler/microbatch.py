"""dbt's microbatch strategy: the batches a run builds and each batch's query (docs/dbt.md).

A microbatch model (`incremental_strategy: microbatch`) names its `event_time` column, a
`batch_size` (hour, day, month or year), the time it `begin`s and a `lookback` (batches before
the current one built again, default 1). A run builds one batch per period: from `begin` when
the table is new or fully refreshed, else from the current period less `lookback`, up to the
period holding now (`--event-time-start`/`--event-time-end` choose the span instead). Each batch
reads its parents through its period: a parent (model, seed or snapshot) whose config names an
`event_time` is read only where that column falls in [start, end), the others whole, as dbt
filters `ref()`; and each batch replaces the rows of the table whose event_time falls in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import sqlglot
from sqlglot import exp

BatchSize = Literal["hour", "day", "month", "year"]
SIZES: tuple[BatchSize, ...] = ("hour", "day", "month", "year")
Window = tuple[datetime, datetime]  # [start, end), UTC


def floor(at: datetime, size: BatchSize) -> datetime:
    """The start of the period of `size` that holds `at`."""
    at = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    if size == "hour":
        return at.replace(minute=0, second=0, microsecond=0)
    if size == "day":
        return at.replace(hour=0, minute=0, second=0, microsecond=0)
    if size == "month":
        return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return at.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)


def step(at: datetime, size: BatchSize, n: int = 1) -> datetime:
    """`at` (a period's start) moved by `n` periods."""
    if size == "hour":
        return at + timedelta(hours=n)
    if size == "day":
        return at + timedelta(days=n)
    months = at.year * 12 + at.month - 1 + (n if size == "month" else 12 * n)
    return at.replace(year=months // 12, month=months % 12 + 1)


def as_time(value: object, what: str) -> datetime:
    """A `begin` or an --event-time-start/end: a date or a timestamp (ISO 8601), UTC unless
    it says otherwise."""
    if isinstance(value, datetime):
        found = value
    elif isinstance(value, date):
        found = datetime(value.year, value.month, value.day)
    else:
        try:
            found = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise ValueError(f"{what} {value!r} is not a date or a timestamp") from None
    return found.astimezone(UTC) if found.tzinfo else found.replace(tzinfo=UTC)


def windows(
    size: BatchSize,
    begin: datetime,
    lookback: int,
    whole: bool,
    now: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Window]:
    """The batches of one run, oldest first: from `begin` when the table is built `whole`,
    else from the period of `now` less `lookback` periods (never before `begin`), through the
    period holding `end` (default `now`); `start`/`end` given choose the span."""
    last = end or now
    if start is None:
        start = begin if whole else max(begin, step(floor(now, size), size, -lookback))
    at, out = floor(start, size), []
    limit = step(floor(last, size), size) if end is None or floor(end, size) != end else end
    while at < limit:
        nxt = step(at, size)
        out.append((at, nxt))
        at = nxt
    return out


def literal(at: datetime) -> str:
    return f"TIMESTAMP '{at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}'"


def filtered(sql: str, parents: Mapping[str, str], window: Window) -> str:
    """`sql` with each table it reads that is a key of `parents` (relation -> its event_time
    column) read through the window: `(SELECT * FROM p WHERE et >= start AND et < end) AS p`,
    under the alias the query gave it, so qualified columns still resolve. A CTE of the same
    name is the CTE, not the parent."""
    if not parents:
        return sql
    tree = sqlglot.parse_one(sql, read="spark")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    lo, hi = literal(window[0]), literal(window[1])
    for table in list(tree.find_all(exp.Table)):
        name = table.name
        if table.db or name not in parents or name in ctes:
            continue
        column = exp.column(parents[name]).sql("spark")
        inner = sqlglot.parse_one(
            f"SELECT * FROM {exp.to_identifier(name).sql('spark')} "
            f"WHERE {column} >= {lo} AND {column} < {hi}",
            read="spark",
        )
        table.replace(
            exp.Subquery(
                this=inner, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
            )
        )
    return tree.sql("spark")
