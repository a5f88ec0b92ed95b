"""dbt's unit tests (`unit_tests:` in properties YAML): a model's query run over given rows in
place of each input it reads, its result compared with the expected rows (docs/dbt.md).

Compile renders the model (with the test's `overrides` of vars and `is_incremental`), puts each
given input in front of it as a CTE, and points the model's references to the real relation
(quoted, as `ref()` and `source()` write them) at that CTE: no table is touched. The rows of a dict or CSV input are typed by
the input's columns where compile knows them. The expected rows stay in the test's config: the
run casts them to the types of the model's result and compares both ways (EXCEPT ALL), so a
missing, extra or different row fails the test.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ..analysis import rules
from ..analysis.rules import Finding
from ..dag.graph import Node, node_id, ref_id
from ..errors import RivcError, SourceLocation, SqlError, did_you_mean
from ..loading.project import Located, Project
from ..loading.property_specs import UnitRows, UnitTestSpec
from ..loading.specs import NodeId
from ..rendering.render import RenderContext, Renderer, source_relation
from ..sql import literal, quote
from .common import content_hash
from .data_tests import REF_ARG, SOURCE_ARG


def unit_test_nodes(
    project: Project,
    ctx: RenderContext,
    renderer: Renderer,
    nodes: dict[NodeId, Node],
    findings: list[Finding],
) -> list[Node]:
    out = []
    for spec, where in project.unit_tests:
        if not spec.config.enabled:
            continue
        try:
            out.append(unit_test(project, ctx, renderer, nodes, spec, where))
        except SqlError as exc:
            findings.append(rules.syntax(exc))
        except RivcError as exc:
            findings.append(rules.from_error(exc))
    return out


def unit_test(
    project: Project,
    ctx: RenderContext,
    renderer: Renderer,
    nodes: dict[NodeId, Node],
    spec: UnitTestSpec,
    where: Located,
) -> Node:
    loc = where.location("name")
    model = project.models.get(spec.model)
    if model is None or node_id("model", spec.model) not in nodes:
        raise SqlError(f"unit test {spec.name}: no model {spec.model!r}", where.location("model"))
    given_vars = spec.overrides.vars or spec.overrides.env_vars
    if given_vars:  # the model rendered with the test's vars
        variables = {**ctx.vars, **spec.overrides.vars}
        env = {**ctx.env, **spec.overrides.env_vars}
        renderer = Renderer(dataclasses.replace(ctx, vars=variables, env=env))
    incremental = bool(spec.overrides.macros.get("is_incremental", False))
    try:
        rendered = renderer.render(spec.model, model.path, model.text, incremental)
    except RivcError as exc:
        raise type(exc)(f"unit test {spec.name}: {exc.message}", loc) from None
    try:
        tree = sqlglot.parse_one(rendered.sql, read="spark")
    except (ParseError, TokenError) as exc:
        raise SqlError(f"unit test {spec.name}: the model does not parse: {exc}", loc) from None
    read = {ref_id(r, project.seeds) for r in rendered.refs}
    read |= {node_id("source", s) for s in rendered.sources}
    ctes: list[exp.CTE] = []
    standing: dict[str, str] = {}  # relation -> the CTE given for it
    for i, given in enumerate(spec.given):
        at = where.location("given", i, "input")
        relation, nid = _input(project, ctx, spec.model, given.input or "", at)
        read.discard(nid)
        columns = nodes[nid].columns if nid in nodes else None
        sql = _rows_sql(_fixture(project, given, at), columns, at)
        standing[relation] = f"__unit_given_{i}"
        alias = exp.TableAlias(this=exp.to_identifier(standing[relation], quoted=True))
        ctes.append(exp.CTE(this=sqlglot.parse_one(sql, read="spark"), alias=alias))
    for table in list(tree.find_all(exp.Table)):
        ident = table.this
        if isinstance(ident, exp.Identifier) and ident.quoted and not table.db:
            cte = standing.get(ident.name)
            if cte is not None:  # the model's own CTE of the same name keeps its name
                if not table.alias:
                    table.set("alias", exp.TableAlias(this=exp.to_identifier(ident.name)))
                table.set("this", exp.to_identifier(cte, quoted=True))
    if read:
        missing = sorted(read)[0]
        raise SqlError(
            f"unit test {spec.name}: {spec.model} reads {missing}; give its rows under given:",
            loc,
        )
    with_ = tree.args.get("with_")
    if with_ is not None:
        with_.set("expressions", [*ctes, *with_.expressions])
    elif ctes:
        tree.set("with_", exp.With(expressions=ctes))
    at = where.location("expect")
    expect_rows, expect_sql = _expected(_fixture(project, spec.expect, at), at)
    return Node(
        id=node_id("test", spec.name),
        kind="test",
        name=spec.name,
        path=where.doc.path,
        depends_on=[],  # it reads no table: its model's inputs are its given rows
        tags=spec.config.tags,
        config={
            "severity": "error",
            "test": "unit",
            "model": spec.model,
            "expect_rows": expect_rows,
            "expect_sql": expect_sql,
        },
        description=spec.description,
        sql=tree.sql(dialect="spark") + "\n",
        checksum=content_hash(spec.model_dump(mode="json"), model.text),
        line=loc.line,
    )


def _input(
    project: Project, ctx: RenderContext, model: str, given: str, at: SourceLocation
) -> tuple[str, NodeId]:
    """The relation name the model's SQL reads for `given`, and the node it stands for."""
    if given.strip() == "this":
        return model, node_id("model", model)
    if m := REF_ARG.match(given):
        return m.group(1), ref_id(m.group(1), project.seeds)
    if m := SOURCE_ARG.match(given):
        fqn = f"{m.group(1)}.{m.group(2)}"
        seed = ctx.source_seeds.get(fqn) if fqn not in ctx.sources else None
        if seed is not None:
            return seed, node_id("seed", seed)
        return source_relation(m.group(1), m.group(2)), node_id("source", fqn)
    raise SqlError(f"input: ref('m'), source('s', 't') or this, got {given!r}", at)


def _fixture(project: Project, given: UnitRows, at: SourceLocation) -> UnitRows:
    """Rows given by `fixture: name`: tests/fixtures/name.csv (format csv) or name.sql (sql)."""
    if given.fixture is None:
        return given
    if given.format == "dict":
        raise SqlError("fixture: needs format: csv or sql (a dict fixture is not a file)", at)
    found = project.fixtures.get(given.fixture)
    suffix = f".{given.format}"
    if found is None or found.path.suffix != suffix:
        names = [n for n, f in project.fixtures.items() if f.path.suffix == suffix]
        raise SqlError(
            f"fixture {given.fixture!r}: no {given.fixture}{suffix} in "
            f"{project.spec.paths.tests}/fixtures/{did_you_mean(given.fixture, names)}",
            at,
        )
    return given.model_copy(update={"rows": found.text, "fixture": None})


def _rows_sql(given: UnitRows, columns: dict[str, str] | None, at: SourceLocation) -> str:
    """The given rows as a query: each value cast to the input's column type where known."""
    if given.format == "sql":
        return str(given.rows)
    rows = _dict_rows(given, at)
    names = list(dict.fromkeys(k for r in rows for k in r))
    if columns:
        names += [c for c in columns if c not in names]  # the others are NULL, as in dbt
    if not names:
        raise SqlError("no rows and no known columns: give at least one row", at)

    def value(row: dict[str, Any], name: str) -> str:
        typ = (columns or {}).get(name) or ""
        text = literal(row.get(name))
        return f"CAST({text} AS {typ})" if typ and typ != "UNKNOWN" else text

    selects = ["SELECT " + ", ".join(f"{value(r, n)} AS {quote(n)}" for n in names) for r in rows]
    if not selects:
        return (
            "SELECT " + ", ".join(f"{value({}, n)} AS {quote(n)}" for n in names) + " WHERE 1 = 0"
        )
    return "\nUNION ALL\n".join(selects)


def _dict_rows(given: UnitRows, at: SourceLocation) -> list[dict[str, Any]]:
    if given.format == "csv":
        text = str(given.rows or "")
        return [
            {k.strip(): (v if v != "" else None) for k, v in row.items()}
            for row in csv.DictReader(io.StringIO(text.strip()))
        ]
    rows = given.rows or []
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SqlError("rows: a list of mappings (format: dict)", at)
    return rows


def _expected(expect: UnitRows, at: SourceLocation) -> tuple[list[dict[str, Any]], str | None]:
    if expect.format == "sql":
        return [], str(expect.rows)
    rows = _dict_rows(expect, at)
    return [{k: _jsonable(v) for k, v in r.items()} for r in rows], None


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)
