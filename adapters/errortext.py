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
