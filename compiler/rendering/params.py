"""`${name}` parameters: typed from their project default, inserted as SQL literals built by sqlglot."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from ..errors import RenderError, did_you_mean
from ..sql import SqlWriter, literal

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def resolve_params(defaults: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """Project defaults with `--param name=value` strings converted to each default's type."""
    values = dict(defaults)
    for name, text in overrides.items():
        if name not in defaults:
            raise RenderError(
                f"--param {name}: no such parameter in rivc_project.yml params"
                f"{did_you_mean(name, defaults)}"
            )
        values[name] = convert(name, text, defaults[name])
    return values


def convert(name: str, text: str, default: Any) -> Any:
    """Convert a command-line string to the type of the parameter's default."""
    try:
        if isinstance(default, bool):
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return lowered in ("true", "1", "yes")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, dt.datetime):
            return dt.datetime.fromisoformat(text)
        if isinstance(default, dt.date):
            return dt.date.fromisoformat(text)
    except ValueError:
        raise RenderError(
            f"--param {name}={text!r}: expected {type(default).__name__}, "
            f"like the default {default!r}"
        ) from None
    return text


def placeholders(sql: str) -> list[tuple[str, int, int]]:
    """(name, line, col) of every `${name}` in `sql`."""
    out = []
    for m in PLACEHOLDER.finditer(sql):
        line = sql.count("\n", 0, m.start()) + 1
        col = m.start() - (sql.rfind("\n", 0, m.start()) + 1) + 1
        out.append((m.group(1), line, col))
    return out


def bind(
    sql: str, params: Mapping[str, Any], dialect: SqlWriter
) -> tuple[str, list[tuple[str, int, int]]]:
    """Replace bound placeholders with literals; return the SQL and the unbound ones."""
    if "${" not in sql:
        return sql, []
    unbound = [p for p in placeholders(sql) if params.get(p[0]) is None]

    def sub(m: re.Match[str]) -> str:
        value = params.get(m.group(1))
        return m.group(0) if value is None else literal(value, dialect)

    return PLACEHOLDER.sub(sub, sql), unbound
