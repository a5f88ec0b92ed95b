"""dbt's Jinja surface beyond ref/source/var/config: macros with `return()`, packages as
namespaces (`dbt_utils.star(...)`), `adapter.dispatch` with dbt's search order and the
`spark__`/`default__` prefixes, `{% test %}` blocks, `{% do %}`, and the context objects macros
use (`adapter`, `exceptions`, `modules`, `log`, `execute`, `flags`, ...). docs/dbt.md lists them.

As dbt does, every `{% macro %}` (or `{% test %}`) block of a file is its own template, so that
a macro always calls other macros through the namespace that holds them, and `return()` ends
the macro that called it with its value (a list, a dict, a string).
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
import pytz
import yaml

from ..errors import RenderError, SourceLocation
from ..rendering.relations import Column, Relation
from ..sql import quote
from . import crossdb

SPARK_PREFIXES = ("spark__", "default__")  # what adapter.dispatch looks for, in order
_BLOCK = re.compile(
    r"(\{%-?\s*)(macro|test)(\s+)(\w+)(\s*\(.*?\)\s*-?%\})(.*?)(\{%-?\s*)end\2(\s*-?%\})", re.S
)
_MATERIALIZATION = re.compile(
    r"\{%-?\s*materialization\b.*?\{%-?\s*endmaterialization\s*-?%\}", re.S
)


class MacroReturn(Exception):  # noqa: N818 (dbt's name: it is how a macro returns, not an error)
    def __init__(self, value: Any) -> None:
        self.value = value


def return_(value: Any = None) -> None:
    raise MacroReturn(value)


class Macro:
    """A macro as templates call it: its value, or what it `return()`ed. Each call is told to
    `on_call` with the hash of the macro's text (a node's `uses`, for state:modified.macros)."""

    def __init__(
        self,
        name: str,
        package: str,
        body: Callable[..., Any],
        text: str = "",
        on_call: Callable[[str, str], None] = lambda key, digest: None,
    ) -> None:
        self.name, self.package, self._body = name, package, body
        self.digest = digest(text.lstrip("\n"))  # not where it is in its file
        self.on_call = on_call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.on_call(f"macro:{self.package}.{self.name}", self.digest)
        try:
            return self._body(*args, **kwargs)
        except MacroReturn as done:
            return done.value

    def __repr__(self) -> str:
        return f"<macro {self.package}.{self.name}>"


def macro_blocks(path: str, text: str) -> Iterator[tuple[str, str]]:
    """(name, template text) of each macro block of a file, `{% test x %}` as macro `test_x`;
    the text keeps its line numbers. Materializations are dbt's own business and left out."""
    text = _MATERIALIZATION.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for m in _BLOCK.finditer(text):
        name = m.group(4) if m.group(2) == "macro" else f"test_{m.group(4)}"
        header = f"{m.group(1)}macro{m.group(3)}{name}{m.group(5)}"
        block = f"{header}{m.group(6)}{m.group(7)}endmacro{m.group(8)}"
        yield name, "\n" * text.count("\n", 0, m.start()) + block


class Namespace:
    """A package's macros as `package.macro`; a missing one is a clear error."""

    # the sandbox lets a template reach a macro of a leading underscore through it (dbt_utils'
    # `_is_relation`), as dbt's dict namespaces do; nothing else of a leading underscore
    macro_namespace = True

    def __init__(self, name: str, macros: dict[str, Any]) -> None:
        self._name, self._macros = name, macros

    def has_macro(self, name: str) -> bool:
        return name in self._macros

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._macros[name]
        except KeyError:
            from ..errors import did_you_mean

            raise RenderError(
                f"{self._name}.{name}: no such macro in {self._name!r}"
                f"{did_you_mean(name, self._macros)}"
            ) from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._macros.get(name, default)


class DbtNamespace(Namespace):
    """`dbt.<name>`: a `spark__`/`default__` implementation in the root project wins (dbt
    dispatches its own macros), else rivc's Spark one (compiler/dbt/crossdb.py)."""

    def __init__(self, root: dict[str, Any]) -> None:
        super().__init__("dbt", dict(crossdb.MACROS))
        self._root = root

    def has_macro(self, name: str) -> bool:
        return any(p + name in self._root for p in SPARK_PREFIXES) or super().has_macro(name)

    def __getattr__(self, name: str) -> Any:
        for prefix in SPARK_PREFIXES:
            if prefix + name in self._root:
                return self._root[prefix + name]
        return super().__getattr__(name)


class Adapter:
    """The `adapter` macros see: dispatch, quoting; no warehouse to ask at compile."""

    def __init__(
        self,
        root: str,
        namespaces: Mapping[str, dict[str, Any]],
        search_orders: Mapping[str, tuple[str, ...]],
        columns_of: Callable[[Any], list[Column]],
        names: frozenset[str],
    ) -> None:
        self.root, self.namespaces, self.search_orders = root, namespaces, search_orders
        self.columns_of, self.names = columns_of, names

    def type(self) -> str:
        return "spark"

    def dispatch(
        self, macro_name: str, macro_namespace: str | None = None, packages: Any = None
    ) -> Any:
        ns = macro_namespace or "dbt"
        order = self.search_orders.get(ns) or (self.root, ns)
        for package in order:
            macros = self.namespaces.get(package, {})
            for prefix in SPARK_PREFIXES:
                if prefix + macro_name in macros:
                    return macros[prefix + macro_name]
        if ns == "dbt" and macro_name in crossdb.MACROS:
            return crossdb.MACROS[macro_name]
        searched = ", ".join(f"{p}{macro_name}" for p in SPARK_PREFIXES)
        raise RenderError(
            f"adapter.dispatch: no macro {macro_name!r} in {', '.join(order)} (searched {searched})"
        )

    def quote(self, identifier: str) -> str:
        return quote(identifier)

    def _offline(self, what: str) -> Any:
        raise RenderError(
            f"adapter.{what}: rivc compiles without a warehouse to ask; not supported yet "
            "(docs/dbt.md)"
        )

    def get_columns_in_relation(self, relation: Any) -> list[Column]:
        return self.columns_of(relation)

    def get_relation(
        self, database: Any = None, schema: Any = None, identifier: Any = None
    ) -> Relation | None:
        """A model or seed of this project by name; None for any other (it does not exist)."""
        return Relation(str(identifier), "ref") if identifier in self.names else None

    def load_relation(self, relation: Any) -> Any:
        return relation

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self._offline("execute")


class Exceptions:
    def raise_compiler_error(self, message: str, node: Any = None) -> None:
        raise RenderError(str(message))

    def raise_not_implemented(self, message: str) -> None:
        raise RenderError(f"not implemented: {message}")

    def warn(self, message: str, node: Any = None) -> str:
        return ""


class Modules:
    """dbt's `modules`: the Python modules a template may use."""

    datetime = datetime
    re = re
    itertools = itertools
    pytz = pytz


class Flags:
    FULL_REFRESH = False
    STORE_FAILURES = False
    WHICH = "run"  # what rivc compiles is what runs


class Row(tuple[Any, ...]):
    """One row of a Table, as agate's: a tuple whose cells are also read by column name
    (`row.table_schema`, `row['table_name']`)."""

    names: tuple[str, ...] = ()

    def __new__(cls, names: tuple[str, ...], values: tuple[Any, ...]) -> Row:
        row = super().__new__(cls, values)
        row.names = names
        return row

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (self.names, tuple(self))

    def __getattr__(self, name: str) -> Any:
        try:
            return self[self.names.index(name)]
        except ValueError:
            raise AttributeError(name) from None

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.__getattr__(key)
        return super().__getitem__(key)


class Table:
    """What run_query returns, as far as macros use dbt's agate table: rows, columns, cells."""

    def __init__(self, names: list[str], rows: list[tuple[Any, ...]]) -> None:
        self.column_names = names
        self.rows = [Row(tuple(names), tuple(r)) for r in rows]
        self.columns = _Columns(_Column(name, [r[i] for r in rows]) for i, name in enumerate(names))

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return self.rows[i]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


class _Column:
    def __init__(self, name: str, values: list[Any]) -> None:
        self.name, self._values = name, values

    def values(self) -> tuple[Any, ...]:
        return tuple(self._values)


class _Columns(list[_Column]):
    """agate's columns: a sequence that is also a mapping by column name."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return next(c for c in self if c.name == key)
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return [c.name for c in self]

    def values(self) -> list[_Column]:
        return list(self)

    def items(self) -> list[tuple[str, _Column]]:
        return [(c.name, c) for c in self]


# (name, CSV path, delimiter, checksum, ((column, Spark type), ...))
Seeds = tuple[tuple[str, str, str, str, tuple[tuple[str, str], ...]], ...]
# the project's relations as information_schema.tables lists them: (schema, table name, table
# type, rivc's name of the node), from dbt's names (dbt/naming.py)
Listing = tuple[tuple[str, str, str, str], ...]
LISTED = "__rivc_information_schema_tables"  # the table information_schema.tables reads


def reads_listing(table: Any) -> bool:
    """Whether a table of a query is `[catalog.]information_schema.tables`."""
    return str(table.db).lower() == "information_schema" and table.name.lower() == "tables"


def run_query(
    sql: str,
    seeds: Seeds = (),
    listing: Listing = (),
    on_listing: Callable[[], None] = lambda: None,
) -> Table:
    """A query a macro runs while compiling (date spines, dbt_utils.get_column_values,
    get_relations_by_pattern): rivc compiles offline, so it runs only queries that read no table,
    seeds, or `information_schema.tables` (the project's relations under dbt's names:
    `listing`; `on_listing` is told), in DuckDB in this process (the Spark SQL translated by
    sqlglot; a seed read from its CSV with the types rivc inferred). One that reads any other
    table is an error."""
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        tree = sqlglot.parse_one(str(sql), read="spark")
    except (ParseError, TokenError) as exc:
        raise RenderError(f"run_query: not a Spark SQL query: {str(exc).splitlines()[0]}") from None
    listed = False
    for table in list(tree.find_all(sqlglot.exp.Table)):
        if reads_listing(table):
            table.replace(sqlglot.exp.to_table(LISTED).as_(table.alias_or_name))
            listed = True
    if listed:
        on_listing()
    ctes = {c.alias_or_name for c in tree.find_all(sqlglot.exp.CTE)}
    tables = [
        t.name for t in tree.find_all(sqlglot.exp.Table) if t.name not in ctes and t.name != LISTED
    ]
    files = {name: (path, delimiter, types) for name, path, delimiter, _, types in seeds}
    other = [t for t in tables if t not in files]
    if other:
        raise RenderError(
            f"run_query reads {other[0]!r} while compiling; rivc compiles offline, without a "
            "warehouse: only queries of seeds or of no table run (docs/dbt.md)"
        )
    try:
        import duckdb
    except ImportError:
        raise RenderError("run_query while compiling needs duckdb: pip install duckdb") from None
    try:
        with duckdb.connect(":memory:") as con:
            for name in dict.fromkeys(tables):
                path, delimiter, types = files[name]
                rel = con.read_csv(path, header=True, delimiter=delimiter, all_varchar=True)
                typed = ", ".join(
                    f"CAST({_duck(c)} AS {_duck_type(t)}) AS {_duck(c)}" for c, t in types
                )
                con.register(f"__csv_{name}", rel)
                con.execute(
                    f"CREATE TABLE {_duck(name)} AS SELECT {typed} FROM {_duck('__csv_' + name)}"
                )
                con.unregister(f"__csv_{name}")
            if listed:
                con.execute(
                    f"CREATE TABLE {LISTED} (table_catalog VARCHAR, table_schema VARCHAR, "
                    "table_name VARCHAR, table_type VARCHAR)"
                )
                rows = [(None, schema, name, kind) for schema, name, kind, _ in listing]
                if rows:
                    con.executemany(f"INSERT INTO {LISTED} VALUES (?, ?, ?, ?)", rows)
            # the query itself reaches no file, no extension and no setting (docs/security.md)
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            cursor = con.execute(tree.sql(dialect="duckdb"))
            names = [d[0] for d in cursor.description or ()]
            return Table(names, [tuple(r) for r in cursor.fetchall()])
    except duckdb.Error as exc:
        raise RenderError(f"run_query: {str(exc).splitlines()[0]}") from None


def _duck(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duck_type(spark: str) -> str:
    from sqlglot import exp

    return exp.DataType.build(spark, dialect="spark").sql(dialect="duckdb")


class Statements:
    """`{% call statement('name', fetch_result=True) %}...{% endcall %}` and load_result."""

    def __init__(self, seeds: Seeds, listing: Listing, on_listing: Callable[[], None]) -> None:
        self.results: dict[str, dict[str, Any]] = {}
        self.seeds, self.listing, self.on_listing = seeds, listing, on_listing

    def run_query(self, sql: str) -> Table:
        return run_query(sql, self.seeds, self.listing, self.on_listing)

    def statement(
        self,
        name: str | None = None,
        fetch_result: bool = False,
        auto_begin: bool = True,
        language: str = "sql",
        caller: Callable[[], str] | None = None,
    ) -> str:
        sql = caller() if caller is not None else ""
        table = self.run_query(sql)
        if name is not None:
            self.results[name] = {"data": table.rows, "table": table, "response": "OK"}
        return ""

    def load_result(self, name: str) -> dict[str, Any] | None:
        return self.results.get(name)


def context(
    root: str,
    namespaces: Mapping[str, dict[str, Any]],
    search_orders: Mapping[str, tuple[str, ...]],
    columns_of: Callable[[Any], list[Column]],
    names: frozenset[str],
    seeds: Seeds,
    graph: Mapping[str, Any],
    listing: Listing = (),
    on_listing: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """What every template and macro sees besides ref/source/var/config and its own macros."""
    now = datetime.datetime.now(datetime.UTC)
    statements = Statements(seeds, listing, on_listing)
    ctx: dict[str, Any] = {
        "return": return_,
        "adapter": (adapter := Adapter(root, namespaces, search_orders, columns_of, names)),
        "load_relation": adapter.load_relation,
        "exceptions": Exceptions(),
        "modules": Modules(),
        "log": lambda msg, info=False: "",
        "print": lambda msg: "",
        "execute": True,
        "flags": Flags(),
        "run_query": statements.run_query,
        "statement": statements.statement,
        "load_result": statements.load_result,
        "should_store_failures": lambda: False,
        "should_full_refresh": lambda: False,
        "zip": zip,
        "set": set,
        "tojson": lambda value, sort_keys=False: json.dumps(value, sort_keys=sort_keys),
        "fromjson": lambda text, default=None: json.loads(text) if text else default,
        "toyaml": lambda value: yaml.safe_dump(value),
        "fromyaml": lambda text, default=None: yaml.safe_load(text) if text else default,
        "local_md5": lambda text: hashlib.md5(str(text).encode()).hexdigest(),
        "run_started_at": now,
        "invocation_id": "rivc-compile",
        "graph": dict(graph) or {"nodes": {}, "sources": {}, "macros": {}},
        "dbt": DbtNamespace(dict(namespaces.get(root, {}))),
    }
    for name, macros in namespaces.items():
        if name != "dbt":
            ctx[name] = Namespace(name, macros)
    return ctx


def digest(text: str) -> str:
    """A short hash of a macro's text or a var's value, as a node's `uses` records it."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_package(
    env: jinja2.Environment,
    package: str,
    files: tuple[tuple[str, str], ...],
    into: dict[str, Any],
    on_call: Callable[[str, str], None] = lambda key, digest: None,
) -> None:
    """Every macro of a package's files, wrapped, into `into` (the package's namespace)."""
    loader = env.loader
    assert isinstance(loader, TextLoader)
    for path, text in files:
        for name, block in macro_blocks(path, text):
            key = f"{path}#{name}"
            loader.texts[key] = block
            try:
                template = env.get_template(key)
            except jinja2.TemplateSyntaxError as exc:
                raise RenderError(
                    exc.message or str(exc), SourceLocation(Path(path), exc.lineno)
                ) from exc
            # the macro looks names up in the environment's globals as they are when it runs
            # (a context copies them when made: macros loaded later would be missing)
            defined = template.new_context(env.globals, shared=True)
            for _ in template.root_render_func(defined):  # defines the macro, renders nothing
                pass
            # `_private` ones too
            into[name] = Macro(name, package, defined.vars[name], block, on_call)


class TextLoader(jinja2.BaseLoader):
    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Any]:
        if template not in self.texts:
            raise jinja2.TemplateNotFound(template)
        return self.texts[template], template.split("#", 1)[0], lambda: True
