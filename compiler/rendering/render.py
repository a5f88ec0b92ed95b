"""Jinja rendering with dbt's meanings: ref, source, var, config, this, is_incremental, env_var."""

from __future__ import annotations

import ast
import json
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from ..dbt import crossdb, naming
from ..dbt import jinja as dbtjinja
from ..errors import GraphError, RenderError, RivcError, SourceLocation, did_you_mean
from ..loading.property_specs import ModelVersion, TestConfig
from ..loading.specs import IGNORED, ModelConfig
from ..loading.versions import Versions
from ..sql import quote
from . import sandbox
from .relations import Column, NeedColumns, Relation

CONFIG_KEYS = ModelConfig.keys()
TEST_CONFIG_KEYS = frozenset(f.alias or name for name, f in TestConfig.model_fields.items())
IGNORED_CONFIG = IGNORED


def source_relation(source: str, table: str) -> str:
    """The temp view name the runner registers for a source table."""
    return f"{source}__{table}"


@dataclass
class Rendered:
    """What rendering one template produced and recorded."""

    sql: str
    refs: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # "shop.orders"
    config: dict[str, tuple[Any, int | None]] = field(default_factory=dict)  # key -> (value, line)
    env_used: dict[str, str | None] = field(default_factory=dict)
    uses_is_incremental: bool = False
    # what else it read: "var:<name>" and "macro:<package>.<name>" -> a hash of the value/text
    uses: dict[str, str] = field(default_factory=dict)
    needs: str | None = None  # a model whose columns a macro asked for before they were known


@dataclass(frozen=True)
class RenderContext:
    """What every template may see; one per compile, shared by all worker processes."""

    models: frozenset[str]
    sources: frozenset[str]
    vars: Mapping[str, Any]
    env: Mapping[str, str]
    macros: tuple[tuple[str, str], ...]  # (path, text)
    target: Mapping[str, str] = field(default_factory=dict)  # `target.name`, as in dbt
    project: str = "project"  # the root project's name: its macros' namespace
    packages: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # name -> macro files
    dispatch: tuple[tuple[str, tuple[str, ...]], ...] = ()  # dbt_project.yml's dispatch:
    source_seeds: Mapping[str, str] = field(default_factory=dict)  # dbt source -> seed
    # relation -> columns known before models render: seeds', sources' (rendering/relations.py)
    columns: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    seeds: dbtjinja.Seeds = ()  # seeds run_query may read at compile
    graph: Mapping[str, Any] = field(default_factory=dict)  # dbt's `graph` (nodes/models.py)
    # dbt's versioned models: name -> its versions (loading/versions.py)
    versions: Mapping[str, Versions] = field(default_factory=dict)
    # the project's relations under dbt's names, for information_schema.tables at compile
    listing: dbtjinja.Listing = ()


class _State:
    """The model being rendered; the functions the templates call record into it."""

    def __init__(self, ctx: RenderContext) -> None:
        self.ctx = ctx
        self.name = ""
        self.incremental = False
        self.out = Rendered("")
        self.line: int | None = None  # set by the fast path, which has no traceback to read
        self.testing = False  # a generic test's macro: config() takes test configs
        self.known: Mapping[str, Mapping[str, str]] = {}  # models' columns, for a second render

    def ref(self, name: str, *rest: str, v: Any = None, version: Any = None) -> Relation:
        if rest:
            raise RenderError(f"ref() takes one model name, got {(name, *rest)!r}")
        name = self._version(name, v if v is not None else version)
        if name not in self.ctx.models:
            raise GraphError(f"ref({name!r}): no such model{did_you_mean(name, self.ctx.models)}")
        if name not in self.out.refs:
            self.out.refs.append(name)
        return Relation(name, "ref")

    def _version(self, name: str, wanted: Any) -> str:
        """The model a versioned model's name (and version) is: the latest without one."""
        versions = self.ctx.versions.get(name)
        if versions is None:
            if wanted is not None:
                raise GraphError(f"ref({name!r}, v={wanted!r}): model {name!r} has no versions")
            return name
        if wanted is None:
            return versions.latest
        key = ModelVersion(v=wanted).key
        if key not in versions.models:
            raise GraphError(
                f"ref({name!r}, v={wanted!r}): model {name!r} has versions "
                f"{', '.join(versions.models)}"
            )
        return versions.models[key]

    def source(self, source: str, table: str) -> Relation:
        fqn = f"{source}.{table}"
        if fqn not in self.ctx.sources and fqn in self.ctx.source_seeds:
            return self.ref(self.ctx.source_seeds[fqn])  # a dbt source loaded by a seed
        if fqn not in self.ctx.sources:
            raise GraphError(
                f"source({source!r}, {table!r}): no such source table"
                f"{did_you_mean(fqn, self.ctx.sources)}"
            )
        if fqn not in self.out.sources:
            self.out.sources.append(fqn)
        return Relation(source_relation(source, table), "source")

    def listed(self) -> None:
        """The template read information_schema.tables: what it was told is one of its inputs
        (the driver checks it against every node's final name)."""
        self.out.uses[LISTING] = listing_digest(self.ctx.listing)

    def relation(
        self, database: Any = None, schema: Any = None, identifier: Any = None, **_: Any
    ) -> Relation:
        """`api.Relation.create`: the project's node of that dbt name read as a ref() (its
        dependency recorded), else a relation of that name."""
        for where, alias, _kind, name in self.ctx.listing:
            if (where, alias) == (schema, identifier):
                ref = self.ref(name)
                return Relation(name, "ref", ref.sql, where, alias)
        name = str(identifier)
        sql = quote(name) if schema is None else f"{quote(str(schema))}.{quote(name)}"
        return Relation(name, "table", sql, "default" if schema is None else str(schema))

    def columns_of(self, relation: Any) -> list[Column]:
        """`adapter.get_columns_in_relation`: a seed's or source's columns, or a model's once
        compile resolved them (a model asking first is rendered again: NeedColumns)."""
        name = relation.name if isinstance(relation, Relation) else str(relation).strip("`")
        found = self.ctx.columns.get(name) or self.known.get(name)
        if found is not None:
            return [Column(c, t) for c, t in found.items()]
        if name in self.ctx.models and name != self.name:
            self.out.needs = name
            raise NeedColumns(f"adapter.get_columns_in_relation({name}): its columns are not known")
        raise RenderError(
            f"adapter.get_columns_in_relation({name}): its columns are not known at compile "
            "(a source without typed columns:, a Python model, or the model itself)"
        )

    def var(self, name: str, default: Any = ...) -> Any:
        if name in self.ctx.vars:
            value = self.ctx.vars[name]
        elif default is ...:
            raise RenderError(
                f"var({name!r}) is not defined in rivc_project.yml vars or --vars"
                f"{did_you_mean(name, self.ctx.vars)}"
            )
        else:
            value = default
        text = json.dumps(value, sort_keys=True, default=str)
        self.out.uses[f"var:{name}"] = dbtjinja.digest(text)
        return value

    def used(self, key: str, digest: str) -> None:
        self.out.uses[key] = digest

    def env_var(self, name: str, default: Any = ...) -> Any:
        refused = sandbox.secret_elsewhere(name)
        if refused is not None:
            raise RenderError(refused)
        value = self.ctx.env.get(name)
        self.out.env_used[name] = value
        if value is not None:
            return value
        if default is ...:
            raise RenderError(f"env_var({name!r}): environment variable not set and no default")
        return default

    def config(self, **kwargs: Any) -> str:
        if self.testing:  # config(fail_calc=...) in a {% test %} block
            for key, value in kwargs.items():
                if key not in TEST_CONFIG_KEYS:
                    raise RenderError(
                        f"config(): unknown test config {key!r}{did_you_mean(key, TEST_CONFIG_KEYS)}"
                    )
                self.out.config[key] = (value, self.line)
            return ""
        for key, value in kwargs.items():
            if key in IGNORED_CONFIG:
                continue  # dbt's warehouse placement (schema, alias, grants, ...): docs/dbt.md
            if key not in CONFIG_KEYS:
                raise RenderError(f"config(): unknown key {key!r}{did_you_mean(key, CONFIG_KEYS)}")
            self.out.config[key] = (value, self.line)
        return ""

    def config_get(self, key: str, default: Any = None) -> Any:
        """`config.get(key)` in a macro: what the model's config() set so far, else `default`."""
        given = self.out.config.get(key)
        return default if given is None else given[0]

    def is_incremental(self) -> bool:
        self.out.uses_is_incremental = True
        return self.incremental

    @property
    def this(self) -> str:
        return quote(self.name)


class _Config:
    """`config`: called in a model (`config(materialized='table')`), read in a macro
    (`config.get('where')`)."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def __call__(self, **kwargs: Any) -> str:
        return self._state.config(**kwargs)

    def get(self, key: str, default: Any = None) -> Any:
        return self._state.config_get(key, default)

    def require(self, key: str) -> Any:
        value = self._state.config_get(key)
        if value is None:
            raise RenderError(f"config {key!r} is required")
        return value


class _This:
    """`this` in a model or a macro it calls: the model's own relation."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def __str__(self) -> str:
        return self._state.this

    @property
    def name(self) -> str:
        return self._state.name

    identifier = name


_FAST_IF = re.compile(
    r"\{%\s*if\s+is_incremental\(\)\s*%\}((?:(?!\{%).)*)"
    r"(?:\{%\s*else\s*%\}((?:(?!\{%).)*))?\{%\s*endif\s*%\}",
    re.S,
)
_FAST_CALL = re.compile(r"\{\{\s*([a-z_]+)\s*(\((?:[^{}()]|\([^{}()]*\))*\))?\s*\}\}")
_UNDEFINED = re.compile(r"'\w+' is undefined")
_RELATION_ARG = re.compile(r"\s*(ref|source)\(.*\)\s*$", re.S)
_FAST_FUNCS = frozenset({"ref", "source", "var", "config", "env_var", "is_incremental", "this"})


LISTING = "relations:information_schema"  # a Rendered.uses key: what the listing held


def listing_digest(listing: dbtjinja.Listing) -> str:
    return dbtjinja.digest(json.dumps(sorted(listing)))


class _Api:
    """dbt's `api`: `api.Relation.create(database=, schema=, identifier=, type=)`."""

    def __init__(self, state: _State) -> None:
        self.Relation = _RelationApi(state)


class _RelationApi:
    def __init__(self, state: _State) -> None:
        self.create = state.relation


class Renderer:
    """Renders models and tests; one per process, reused for every template."""

    def __init__(self, ctx: RenderContext) -> None:
        self.ctx = ctx
        self.state = _State(ctx)
        s = self.state
        self.common: dict[str, Any] = dict(
            ref=s.ref,
            source=s.source,
            var=s.var,
            env_var=s.env_var,
            config=_Config(s),
            is_incremental=s.is_incremental,
            this=_This(s),
            target=dict(ctx.target),
        )
        self.common.update(naming.builtins(ctx.target))  # generate_schema_name and its kin
        # every package's macros by name: the root project's, then each package's (dbt/jinja.py)
        self.namespaces: dict[str, dict[str, Any]] = {ctx.project: {}}
        self.namespaces.update({name: {} for name, _ in ctx.packages})
        self.common.update(
            dbtjinja.context(
                ctx.project,
                self.namespaces,
                dict(ctx.dispatch),
                s.columns_of,
                ctx.models,
                ctx.seeds,
                ctx.graph,
                ctx.listing,
                s.listed,
            )
        )
        self.common["api"] = _Api(s)
        # macros render as in dbt, an undefined name printing nothing (packages rely on it)
        for name, files in ((ctx.project, ctx.macros), *ctx.packages):
            env = self._environment(jinja2.Undefined)
            dbtjinja.load_package(env, name, files, self.namespaces[name], s.used)
            env.globals.update(self.namespaces[name])
        # models render strictly: a misspelt name is an error at its line
        self.env = self._environment(jinja2.StrictUndefined)
        assert isinstance(self.env.loader, dbtjinja.TextLoader)
        self.loader: dbtjinja.TextLoader = self.env.loader
        root = self.namespaces[ctx.project]
        self.env.globals.update(root)
        self.macro_names: set[str] = set(root)

    def _environment(self, undefined: type[jinja2.Undefined]) -> jinja2.Environment:
        env = sandbox.environment(
            loader=dbtjinja.TextLoader(),
            undefined=undefined,
            keep_trailing_newline=True,
            cache_size=0,
            extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"],
        )
        env.globals.update(crossdb.MACROS)  # dbt's global macros, unqualified
        env.globals.update(self.common)
        return env

    def macro(self, name: str) -> Any:
        """A macro by dbt's name: `pkg.name` in that package, `name` in the root project."""
        package, _, short = name.rpartition(".")
        return self.namespaces.get(package or self.ctx.project, {}).get(short)

    def render_args(self, name: str, args: Any) -> tuple[Any, Rendered]:
        """A test's arguments with the Jinja in their strings rendered, as dbt renders them
        (`expression: "d = {{ my_date() }}"`, `values: ["{{ var('x') }}"]`), at any depth;
        and what rendering them read (refs, sources). A rendered `true`/`false` or number stays
        the text dbt's YAML would have given it."""
        s = self.state
        s.name, s.incremental, s.out, s.line = name, False, Rendered(""), None

        def one(value: Any) -> Any:
            if isinstance(value, str) and ("{{" in value or "{%" in value):
                return self.env.from_string(value).render(this=s.this)
            if isinstance(value, dict):
                return {k: one(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [one(v) for v in value]
            return value

        try:
            return one(args), s.out
        except (jinja2.TemplateError, TypeError) as exc:
            raise RenderError(str(exc)) from exc

    def render_macro(self, name: str, macro: Any, kwargs: dict[str, Any]) -> Rendered:
        """A macro's output (a generic test's SQL), recording the refs and sources it uses. A
        string argument written as `ref('m')` or `source('s', 't')` is that relation, as dbt
        reads test arguments."""
        s = self.state
        s.name, s.incremental, s.out, s.line = name, False, Rendered(""), None
        s.testing = True
        try:
            given = {  # `ref('m')` as an argument is that Relation
                k: self.env.compile_expression(v.strip())()
                if isinstance(v, str) and _RELATION_ARG.match(v)
                else v
                for k, v in kwargs.items()
            }
            s.out.sql = str(macro(**given))
        except jinja2.TemplateError as exc:
            raise RenderError(str(exc)) from exc
        finally:
            s.testing = False
        return s.out

    def render(self, name: str, path: Path, text: str, incremental: bool = False) -> Rendered:
        """Render one template; errors carry the template's path and line."""
        s = self.state
        s.name, s.incremental, s.out, s.line = name, incremental, Rendered(""), None
        fast = self._render_fast(path, text)
        if fast is not None:
            s.out.sql = fast
            return s.out
        rel = path.as_posix()
        self.loader.texts[rel] = text
        try:
            template = self.env.get_template(rel)
        except jinja2.TemplateSyntaxError as exc:
            raise RenderError(
                exc.message or "syntax error", SourceLocation(path, exc.lineno)
            ) from exc
        finally:
            del self.loader.texts[rel]
        try:
            s.out.sql = template.render(this=s.this)
        except (jinja2.UndefinedError, jinja2.TemplateError, RivcError, TypeError) as exc:
            lines = [
                n for f, n in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename == rel
            ]
            loc = SourceLocation(path, lines[-1] if lines else None)
            message = exc.message if isinstance(exc, RivcError) else str(exc)
            if isinstance(exc, jinja2.UndefinedError) and _UNDEFINED.fullmatch(message):
                message += (
                    ": not a macro of this project, of a package in dbt_packages/ (rivc deps), "
                    "nor a name of dbt's that rivc has (docs/dbt.md)"
                )
            cls = type(exc) if isinstance(exc, RivcError) else RenderError
            raise cls(message, loc) from exc
        return s.out

    def _render_fast(self, path: Path, text: str) -> str | None:
        """Templates made only of simple calls with literal arguments skip Jinja entirely.

        So do `{% if is_incremental() %}...{% else %}...{% endif %}` blocks without nested tags,
        the one statement most models use; anything else goes through Jinja.
        """
        if "{#" in text:
            return None
        if "{%" in text:
            if "is_incremental" in self.macro_names:
                return None
            state = self.state

            def branch(m: re.Match[str]) -> str:
                state.out.uses_is_incremental = True
                return m.group(1) if state.incremental else (m.group(2) or "")

            text = _FAST_IF.sub(branch, text)
            if "{%" in text:
                self.state.out.uses_is_incremental = False
                return None
        parts: list[str] = []
        pos = 0
        for m in _FAST_CALL.finditer(text):
            func, args = m.group(1), m.group(2)
            if "{{" in text[pos : m.start()] or "}}" in text[pos : m.start()]:
                return None  # an expression the fast path does not know (`{{ pkg.macro() }}`)
            if (
                func not in _FAST_FUNCS
                or func in self.macro_names
                or (func == "this") != (not args)
            ):
                return None
            parsed = _literal_args(args) if args else ((), {})
            if parsed is None:
                return None
            self.state.line = text.count("\n", 0, m.start()) + 1
            try:
                value = (
                    self.state.this
                    if func == "this"
                    else getattr(self.state, func)(*parsed[0], **parsed[1])
                )
            except RivcError as exc:
                raise type(exc)(exc.message, SourceLocation(path, self.state.line)) from exc
            except TypeError:
                return None  # let Jinja produce its own message
            parts += [text[pos : m.start()], str(value)]
            pos = m.end()
        rest = text[pos:]
        if "{{" in rest or "}}" in rest:
            return None
        parts.append(rest)
        return "".join(parts)


def _literal_args(args: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    try:
        call = ast.parse(f"f{args}", mode="eval").body
        assert isinstance(call, ast.Call)
        pos = tuple(ast.literal_eval(a) for a in call.args)
        kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (SyntaxError, ValueError, AssertionError):
        return None
    if len(kw) != len(call.keywords):
        return None
    return pos, kw
