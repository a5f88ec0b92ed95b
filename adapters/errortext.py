"""rivc's own errors raised inside Spark, found again in Spark's error text.

A RivcError raised in a Python task, or a value refused by a `raise_error` in Spark SQL
(compiler/dbtypes.py), reaches the driver wrapped in Spark's exception text. Both carry the
marker `rivc.compiler.errors.<Class>: `, and this is where it is read back.
"""

from __future__ import annotations

import re

_RIVC_ERROR = re.compile(r"rivc\.compiler\.errors\.\w+: (?:error: )?([^\n]+)")


def rivc_error_inside(text: str) -> str | None:
    """The innermost rivc error in `text`, one line, or None."""
    inner = _RIVC_ERROR.findall(text)
    return str(inner[-1]).strip()[:500] if inner else None


_SPARK_TAIL = re.compile(r"(\s*SQLSTATE: \w+)?(;\s*line \d+,? pos \d+)?\s*$")


def model_error(exc: BaseException, sql: str, path: str) -> str | None:
    """A Spark error in a model's or test's SQL as `path:line:col: error: message`, placed
    through the error's query context (an offset into `sql`, whose lines are the file's)."""
    get_contexts = getattr(exc, "getQueryContext", None)
    contexts = get_contexts() if get_contexts is not None else []
    context = contexts[0] if contexts else None
    if context is None or context.contextType().name != "SQL":
        return None
    start = context.startIndex()
    if not 0 <= start <= len(sql):
        return None
    line = sql.count("\n", 0, start) + 1
    col = start - (sql.rfind("\n", 0, start) + 1) + 1
    message = _SPARK_TAIL.sub("", str(exc.getMessage()).strip().splitlines()[0])  # type: ignore[attr-defined]
    return f"{path}:{line}:{col}: error: {message}"
