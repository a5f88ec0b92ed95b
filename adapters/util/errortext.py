"""The one module that reads error text.

- rivc's own errors raised inside Spark: a RivcError raised in a Python task, or a value refused
  by a `raise_error` in Spark SQL (compiler/dbtypes.py), reaches the driver wrapped in Spark's
  exception text. Both carry the marker `rivc.compiler.errors.<Class>: `, read back here.
- Spark's errors in a model's SQL, placed at the file's line and column.
- Database and network errors, classified (Rivet's categories) to decide retries, and reduced to
  the database's own words.
- Whether a sink write failure is worth another attempt.
"""

from __future__ import annotations

import re

_SPARK_TAIL = re.compile(r"(\s*SQLSTATE: \w+)?(;\s*line \d+,? pos \d+)?\s*$")


_RIVC_ERROR = re.compile(r"rivc\.compiler\.errors\.\w+: (?:error: )?([^\n]+)")


def rivc_error_inside(text: str) -> str | None:
    """The innermost rivc error in `text`, one line, or None (without the SQLSTATE Spark adds
    to a raise_error's text)."""
    inner = _RIVC_ERROR.findall(text)
    return _SPARK_TAIL.sub("", str(inner[-1])).strip()[:500] if inner else None


def python_error_inside(text: str) -> str | None:
    """The exception a Python task raised, from the traceback Spark wraps it in ("An exception
    was thrown from the Python worker"): `Class: message` of the last traceback, or None."""
    found, inside = None, False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            inside = True
        elif inside and line and not line[0].isspace():
            name, sep, message = line.partition(": ")
            if name.replace(".", "").replace("_", "").isalnum():
                found = f"{name.rsplit('.', 1)[-1]}: {message.strip()}" if sep else name
            inside = False
    return found[:500] if found else None


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
    return f"{path}:{line}:{col}: error: {spark_message(exc)}"


def spark_message(exc: BaseException) -> str:
    """A Spark error's own first line, without its SQLSTATE and position tail."""
    get = getattr(exc, "getMessage", None)
    text = str(get() if get is not None else exc).strip()
    return _SPARK_TAIL.sub("", text.splitlines()[0] if text else type(exc).__name__)


# --------------------------------------------------------------------------- databases

# Rivet's classification: (category, retried, extra delay in seconds, message patterns)
CATEGORIES: list[tuple[str, bool, float, re.Pattern[str]]] = [
    (
        "auth",
        False,
        0,
        re.compile(
            r"password authentication failed|authentication failed|access denied|permission denied"
            r"|role .* does not exist|no pg_hba\.conf entry|invalid credentials|28000|28P01|42501",
            re.I,
        ),
    ),
    (
        "deadlock",
        True,
        1,
        re.compile(r"deadlock|serialization failure|could not serialize|40001|40P01", re.I),
    ),
    (
        "capacity",
        True,
        15,
        re.compile(
            r"too many connections|the database system is (starting up|shutting down)"
            r"|server is starting|53300|57P03",
            re.I,
        ),
    ),
    (
        "timeout",
        True,
        0,
        re.compile(
            r"statement timeout|canceling statement|lock wait timeout|timed out|57014", re.I
        ),
    ),
    (
        "network",
        True,
        0,
        re.compile(
            r"connection (reset|refused|closed)|broken pipe|terminating connection|server closed"
            r"|gone away|lost connection|EOF|SSL|connection attempt failed|I/O error"
            r"|could not connect|Communications link failure|57P01|08006|08001|08003",
            re.I,
        ),
    ),
    (
        "permanent",
        False,
        0,
        re.compile(
            r"syntax error|does not exist|doesn't exist|unknown column|no such table|42P01|42703"
            r"|42601|1146|1054|1064",
            re.I,
        ),
    ),
]


_SQL_CAUSE = re.compile(r"(?:PSQLException|SQL[A-Za-z]*Exception|mariadb[\w.]*Exception): ([^\n]+)")
_CAUSE = re.compile(r"^\s*Caused by: [\w.$]+: ([^\n]+)", re.M)
_PY_CAUSE = re.compile(r"^\s*(?:psycopg|pymysql)[\w.]*: ([^\n]+)", re.M)  # from Python workers


_NO_DRIVER = re.compile(r"ClassNotFoundException: ([\w.]+)")
_JAVA_ERROR = re.compile(r"^: ([\w.$]+(?:Exception|Error)): ([^\n]+)", re.M)  # py4j's first cause


def root_cause(message: str) -> str:
    """The database's own words inside a Spark/py4j error (its stack traces would mislead)."""
    driver = _NO_DRIVER.search(message)
    if driver:
        return (
            f"JDBC driver {driver.group(1)} is not on Spark's classpath: install Debian's "
            "libpostgresql-jdbc-java / libmariadb-java, or add the driver's jar to spark.jars"
        )
    m = _SQL_CAUSE.search(message)
    if m:
        return m.group(1).strip()
    py = _PY_CAUSE.findall(message)
    if py:
        return str(py[-1]).strip()
    worker = python_error_inside(message)
    if worker:
        return worker
    causes = _CAUSE.findall(message)
    if causes:
        return str(causes[-1]).strip()
    java = _JAVA_ERROR.search(message)
    if java:
        return f"{java.group(1).rsplit('.', 1)[-1]}: {java.group(2).strip()}"
    lines = [line for line in message.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else message


def classify(message: str) -> str:
    message = root_cause(message)
    for category, _, _, pattern in CATEGORIES:
        if pattern.search(message):
            return category
    return "other"


def doctor_category(category: str, message: str) -> str:
    """`rivc doctor`'s words for a failed connection check."""
    if category == "auth":
        return f"auth error: {message}"
    if category in ("network", "capacity", "timeout"):
        return f"connectivity error: {message}"
    if "does not exist" in message or "Unknown database" in message:
        return f"not found: {message}"
    return f"other: {message}"


# --------------------------------------------------------------------------- sinks and Spark

_TRANSIENT = re.compile(
    r"timed? ?out|temporar|connection (reset|refused|aborted|closed)|unavailable|throttl|"
    r"slow ?down|too many requests|\b(429|500|502|503|504)\b|conflict|commit to .* failed|"
    r"deadlock|could not serialize",
    re.I,
)


def transient(exc: BaseException) -> bool:
    """Worth another attempt: I/O and network failures, timeouts, throttling, commit conflicts."""
    if isinstance(exc, OSError | TimeoutError | ConnectionError):
        return True
    return bool(_TRANSIENT.search(str(exc)))


def missing_data_source(exc: BaseException) -> bool:
    """Spark has no data source of that name (its jar is not on the classpath)."""
    condition = getattr(exc, "getCondition", lambda: None)()
    return condition == "DATA_SOURCE_NOT_FOUND" or "Failed to find data source" in str(exc)
