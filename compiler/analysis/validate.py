"""sqlglot validation: parse models and source queries, resolve columns, and the SQL lint facts."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.optimizer.qualify_columns import qualify_columns, validate_qualify_columns
from sqlglot.optimizer.qualify_tables import qualify_tables
from sqlglot.optimizer.scope import Scope, build_scope
from sqlglot.schema import MappingSchema

from ..errors import ShapeError, SourceLocation, SqlError, did_you_mean

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # no "falling back to Command" chatter


def position(sql: str, node: exp.Expr) -> tuple[int | None, int | None]:
    """1-based line and column where `node` starts in `sql`, from the parser's token metadata."""
    for n in node.walk():
        start = n.meta.get("start") if n.meta else None
        if start is not None:
            line = sql.count("\n", 0, start) + 1
            return line, start - (sql.rfind("\n", 0, start) + 1) + 1
    return None, None


def parse_error(exc: ParseError | TokenError, path: Path, line_offset: int = 0) -> SqlError:
    if isinstance(exc, ParseError) and exc.errors:
        first = exc.errors[0]
        return SqlError(
            first["description"], SourceLocation(path, first["line"] + line_offset, first["col"])
        )
    m = re.search(r"Line (\d+), Col: (\d+)", str(exc))
    line = int(m.group(1)) + line_offset if m else None
    return SqlError(
        str(exc).splitlines()[0], SourceLocation(path, line, int(m.group(2)) if m else None)
    )


def too_deep(path: Path, line: int | None = None) -> SqlError:
    return SqlError(
        "the query nests expressions or subqueries too deeply for rivc's SQL parser: "
        "split it, e.g. into CTEs or models",
        SourceLocation(path, line),
    )


def parse_query(sql: str, path: Path, dialect: str, what: str, line_offset: int = 0) -> exp.Query:
    """Exactly one query statement, or SqlError at its position."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as exc:
        raise parse_error(exc, path, line_offset) from None
    except RecursionError:
        raise too_deep(path, 1 + line_offset) from None
    if not statements:
        raise SqlError(f"{what} is empty", SourceLocation(path, 1 + line_offset))
    if len(statements) > 1:
        line, col = position(sql, statements[1])
        raise ShapeError(
            f"{what} must be one statement, found {len(statements)}",
            SourceLocation(path, (line or 1) + line_offset, col),
        )
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise ShapeError(
            f"{what} must be a SELECT, found {tree.key.upper()}",
            SourceLocation(path, 1 + line_offset, 1),
        )
    return tree


_WRITES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Command,
    exp.TruncateTable,
    exp.Lock,
)


def check_read_only(tree: exp.Query, sql: str, path: Path, line_offset: int = 0) -> None:
    """A source query may only read: no DML or DDL anywhere, no row locks (FOR UPDATE)."""
    for node in tree.walk():
        if isinstance(node, _WRITES) or (isinstance(node, exp.Select) and node.args.get("locks")):
            what = (
                "a row lock (FOR UPDATE/SHARE)"
                if isinstance(node, exp.Select | exp.Lock)
                else (node.key.upper())
            )
            line, col = position(sql, node)
            raise ShapeError(
                f"a source query must be a read-only SELECT; found {what}",
                SourceLocation(path, (line or 1) + line_offset, col),
            )


def has_star(tree: exp.Query) -> bool:
    """True when the query's output list contains * or t.*."""
    return any(
        isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star) for e in tree.selects
    )


def output_columns(tree: exp.Query) -> list[str] | None:
    """Output column names when they can be read without a schema (no star), else None."""
    if has_star(tree):
        return None
    names = tree.named_selects
    return names if all(names) else None


def resolve_columns(
    tree: exp.Query, sql: str, path: Path, schema: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, str], Scope]:
    """Qualify every column against `schema` (relation -> columns).

    Returns the output columns with their type where a column passes through unchanged from
    a relation in `schema` (through CTEs and subqueries) or is a CAST, else "UNKNOWN"; and the
    qualified query's root scope (for its lineage).
    """
    ms = MappingSchema({k: dict(v) for k, v in schema.items()}, dialect="spark", normalize=False)
    try:
        qualified = qualify_tables(tree, dialect="spark")  # in place: the tree is ours to change
        qualified = qualify_columns(
            qualified, ms, expand_alias_refs=True, expand_stars=True, dialect="spark"
        )
        validate_qualify_columns(qualified)
    except OptimizeError as exc:
        raise _column_error(str(exc), tree, sql, path, schema) from None
    root = build_scope(qualified)
    assert root is not None  # a query has a scope
    return {sel.alias_or_name: _type_of(sel, root, schema, 0) for sel in qualified.selects}, root


SAME_TYPE = (exp.Max, exp.Min, exp.AnyValue, exp.First, exp.Last)


def _type_of(
    sel: exp.Expr, scope: Scope | None, schema: Mapping[str, Mapping[str, str]], depth: int
) -> str:
    """The Spark type of one output column: a column followed to the relation it comes from
    (a CTE's or subquery's own select list, down to a relation in `schema`), a CAST's type."""
    inner = sel.this if isinstance(sel, exp.Alias) else sel
    if isinstance(inner, exp.Cast):
        return re.sub(r"([,:])\s+", r"\1", inner.to.sql(dialect="spark").lower())
    if isinstance(inner, exp.Interval):
        return "interval"
    if isinstance(inner, exp.Count):
        return "bigint"
    if isinstance(inner, SAME_TYPE) and isinstance(inner.this, exp.Column):
        inner = inner.this  # max(x) has x's type
    if not isinstance(inner, exp.Column) or scope is None or depth > 50:
        return "UNKNOWN"
    source = scope.sources.get(inner.table)
    if isinstance(source, exp.Table):
        return schema.get(source.name, {}).get(inner.name, "UNKNOWN")
    if isinstance(source, Scope) and isinstance(source.expression, exp.Select):
        for inside in source.expression.selects:
            if inside.alias_or_name == inner.name:
                return _type_of(inside, source, schema, depth + 1)
    return "UNKNOWN"  # a union's column, a table function's, or one compile cannot follow


def _column_error(
    message: str, tree: exp.Query, sql: str, path: Path, schema: Mapping[str, Mapping[str, str]]
) -> SqlError:
    m = re.search(r"(?:Column '|Unknown column: )([^'\s]+)", message)
    if m:
        name = m.group(1).strip('`"')
        for col in tree.find_all(exp.Column):
            if col.name == name:
                line, c = position(sql, col)
                known = {c for cols in schema.values() for c in cols}
                return SqlError(
                    f"unknown column {name!r}{did_you_mean(name, known)}",
                    SourceLocation(path, line, c),
                )
    return SqlError(message.splitlines()[0], SourceLocation(path))


NONDETERMINISTIC = frozenset(
    {
        "rand",
        "random",
        "randn",
        "uuid",
        "now",
        "current_timestamp",
        "current_date",
        "localtimestamp",
        "unix_timestamp",
        "shuffle",
        "monotonically_increasing_id",
    }
)


def nondeterministic_in_filters(
    tree: exp.Query, sql: str
) -> list[tuple[str, int | None, int | None]]:
    """(function, line, col) of non-deterministic calls inside WHERE and HAVING clauses."""
    out = []
    for clause in (*tree.find_all(exp.Where), *tree.find_all(exp.Having)):
        for fn in clause.find_all(exp.Func):
            name = (fn.name if isinstance(fn, exp.Anonymous) else fn.sql_name()).lower()
            if name in NONDETERMINISTIC:
                out.append((name, *position(sql, fn)))
    return out


def unconditioned_joins(tree: exp.Query, sql: str) -> list[tuple[int | None, int | None]]:
    """Positions of joins without ON or USING (explicit CROSS JOIN or a comma join)."""
    out = []
    for join in tree.find_all(exp.Join):
        if join.args.get("on") or join.args.get("using"):
            continue
        if isinstance(join.this, exp.Unnest | exp.Lateral) or join.args.get("kind") == "SEMI":
            continue
        out.append(position(sql, join.this))
    return out


# the type names Spark SQL's parser knows (a cast's target); sqlglot reads more and maps them
SPARK_TYPES = frozenset(
    {
        "boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long",
        "float", "real", "double", "date", "timestamp", "timestamp_ntz", "timestamp_ltz",
        "string", "char", "character", "varchar", "binary", "decimal", "dec", "numeric",
        "interval", "array", "map", "struct", "void", "variant",
    }
)  # fmt: skip
SIZED = frozenset({"char", "character", "varchar"})
INSTEAD = {
    "text": "string",
    "nvarchar": "string",
    "nchar": "string",
    "clob": "string",
    "bool": "boolean",
    "datetime": "timestamp",
    "timestamptz": "timestamp",
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "float4": "float",
    "float8": "double",
    "number": "decimal",
    "bytea": "binary",
    "varbinary": "binary",
}


def spark_types(sql: str, dialect: str = "spark") -> list[tuple[int, int, str]]:
    """(line, column, message) of each cast whose target type Spark SQL does not parse —
    `cast(x as varchar)` without a length, `x::text` — which sqlglot reads and Spark refuses
    at run time. Read from the tokens: the tree no longer holds the type's own word."""
    from sqlglot import TokenType
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import TokenError

    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except TokenError:
        return []
    out = []
    casts: list[bool] = []  # for each open parenthesis: whether it is a cast's
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.L_PAREN:
            before = tokens[i - 1].text.lower() if i else ""
            casts.append(before in ("cast", "try_cast"))
            continue
        if tok.token_type == TokenType.R_PAREN:
            if casts:
                casts.pop()
            continue
        # a literal's suffix (1L, 2.5d) comes as a `::` of no text of its own: not a cast
        typed = (tok.token_type == TokenType.DCOLON and sql[tok.start : tok.end + 1] == "::") or (
            tok.token_type == TokenType.ALIAS and bool(casts) and casts[-1]
        )
        if not typed or i + 1 >= len(tokens):
            continue
        word, sized = tokens[i + 1], i + 2 < len(tokens) and tokens[i + 2].text == "("
        name = word.text.lower()
        message = None
        if name in SIZED and not sized:
            message = f"{name} needs a length in Spark SQL: {name}(n), or string"
        elif name not in SPARK_TYPES and word.token_type != TokenType.VAR:
            hint = INSTEAD.get(name)
            message = f"Spark SQL has no type {word.text}" + (f": use {hint}" if hint else "")
        elif name in INSTEAD:
            message = f"Spark SQL has no type {word.text}: use {INSTEAD[name]}"
        if message:
            start = word.start
            line = sql.count("\n", 0, start) + 1
            out.append((line, start - (sql.rfind("\n", 0, start) + 1) + 1, message))
    return out
