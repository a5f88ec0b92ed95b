"""Data tests: generic tests from properties YAML and singular tests from tests/*.sql, one node each."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ..analysis import rules
from ..analysis.rules import Finding
from ..analysis.validate import parse_query
from ..dag.graph import Node, node_id, ref_id
from ..errors import (
    GraphError,
    RenderError,
    RivcError,
    SourceLocation,
    SqlError,
    did_you_mean,
)
from ..loading.project import Located, Project
from ..loading.property_specs import GENERIC_TESTS, DbtSourceTable, ModelProps, SeedProps
from ..loading.specs import NodeId
from ..rendering.params import bind
from ..rendering.relations import Relation
from ..rendering.render import TEST_CONFIG_KEYS, Rendered, Renderer
from ..sql import SPARK, literal, quote
from .common import content_hash, suggest

REF_ARG = re.compile(r"""^\s*ref\(\s*['"](\w+)['"]\s*\)\s*$""")
SOURCE_ARG = re.compile(r"""^\s*source\(\s*['"](\w+)['"]\s*,\s*['"](\w+)['"]\s*\)\s*$""")


def test_nodes(
    project: Project,
    renderer: Renderer,
    params: dict[str, Any],
    nodes: dict[NodeId, Node],
    findings: list[Finding],
) -> list[Node]:
    out: list[Node] = []
    seen: set[str] = set()
    described: list[tuple[Tested, ModelProps | SeedProps | DbtSourceTable, Located]] = []
    props_of: list[tuple[str, tuple[ModelProps | SeedProps, Located]]] = [
        *project.properties.items(),
        *project.seed_properties.items(),
    ]
    for name, (model_props, where) in sorted(props_of, key=lambda d: d[0]):
        model = nodes.get(node_id("model", name)) or nodes.get(node_id("seed", name))
        if model is not None and model.kind == "model" and model.sql is None:
            continue  # its own error is reported; its tests would only repeat it
        if model is not None:  # a disabled model's tests are disabled with it
            described.append((Tested(model.id, model.name, name), model_props, where))
    for fqn, table in sorted(project.dbt_sources.items()):
        seed = project.source_seeds.get(fqn)
        target = nodes.get(node_id("seed", seed) if seed else node_id("source", fqn))
        if target is not None:
            label = fqn.replace(".", "_")
            tested = Tested(target.id, target.relation, label, "source_")
            described.append((tested, table.table, Located(table.doc, table.at)))
    for tested, props, where in described:
        model = nodes[tested.node]
        tests: list[tuple[str | None, Any, SourceLocation]] = [
            (None, test, _test_location(where, (), ti)) for ti, test in enumerate(props.data_tests)
        ]
        for ci, column in enumerate(props.columns):
            tests += [
                (column.name, test, _test_location(where, ("columns", ci), ti))
                for ti, test in enumerate(column.data_tests)
            ]
        for column_name, test, loc in tests:
            try:
                node = generic_test(tested, column_name, test, loc, nodes, renderer)
            except SqlError as exc:
                findings.append(rules.unknown_column(exc))
                continue
            except RivcError as exc:
                findings.append(rules.from_error(exc))
                continue
            if not node.config["enabled"]:
                continue
            if column_name is not None:
                if model.columns is not None and column_name not in model.columns:
                    findings.append(
                        rules.unknown_column(
                            SqlError(
                                f"test on unknown column {column_name!r} of {model.kind} "
                                f"{model.name!r}{suggest(column_name, list(model.columns))}",
                                loc,
                            )
                        )
                    )
            base, n = node.name, 2
            while node.name in seen:
                node.name, n = f"{base}_{n}", n + 1
            node.id = node_id("test", node.name)
            seen.add(node.name)
            out.append(node)
    for name, singular in sorted(project.tests.items()):
        node = Node(
            id=node_id("test", name),
            kind="test",
            name=name,
            path=singular.path,
            checksum=hashlib.sha256(singular.text.encode()).hexdigest(),
            config={"severity": "error", "test": "singular"},
        )
        try:
            rendered = renderer.render(name, singular.path, singular.text, False)
            sql, unbound = bind(rendered.sql, params, SPARK)
            for pname, line, col in unbound:
                findings.append(
                    rules.unbound_parameter(pname, SourceLocation(singular.path, line, col))
                )
            if not unbound:
                parse_query(sql, singular.path, "spark", "a test")
                node.sql = sql
            node.depends_on = [ref_id(r, project.seeds) for r in rendered.refs] + [
                node_id("source", s) for s in rendered.sources
            ]
        except RivcError as exc:
            findings.append(rules.from_error(exc))
        seen.add(name)
        out.append(node)
    return out


@dataclass(frozen=True, slots=True)
class Tested:
    """What a generic test tests: a node, the relation its query reads, and the names dbt gives
    its tests (`not_null_orders_id`; `source_not_null_ecom_orders_id`)."""

    node: NodeId
    relation: str
    label: str  # a model's name; a source table's "source_table"
    prefix: str = ""  # "source_" for a source table's tests

    def name(self, kind: str, column: str | None, args: dict[str, Any]) -> str:
        """dbt's name of a generic test: its type, the tested node, then every argument's
        value (sorted by argument, configs left out), so that names match dbt's."""
        namespace, _, short = kind.rpartition(".")
        test_type = self.prefix + short
        if namespace:
            test_type = f"{namespace}_{test_type}"
        given = {k: v for k, v in args.items() if k != "config"}
        if column is not None:
            given["column_name"] = column
        flat: list[str] = []
        for key in sorted(given):
            value = given[key]
            parts = (
                list(value.values())
                if isinstance(value, dict)
                else list(value)
                if isinstance(value, list | tuple)
                else [value]
            )
            flat += [re.sub("[^0-9a-zA-Z_]+", "_", str(part)) for part in parts]
        return f"{test_type}_{self.label}_{'__'.join(flat)}"

    def alias(self, kind: str, name: str) -> dict[str, str]:
        """A generated name of 64 characters or more as dbt shortens it for the test's alias
        and file: its type and tested node cut at 30 characters, then the name's md5."""
        if len(name) < 64:
            return {}
        namespace, _, short = kind.rpartition(".")
        test_type = f"{namespace}_{self.prefix}{short}" if namespace else self.prefix + short
        return {
            "alias": f"{f'{test_type}_{self.label}'[:30]}_{hashlib.md5(name.encode()).hexdigest()}"
        }


def generic_test(
    tested: Tested,
    column: str | None,
    test: str | dict[str, Any],
    loc: SourceLocation,
    nodes: dict[NodeId, Node],
    renderer: Renderer,
) -> Node:
    args: dict[str, Any]
    if isinstance(test, str):
        kind, args = test, {}
    elif len(test) == 1:
        kind, args = next(iter(test.items()))
        args = dict(args or {})
        args.update(args.pop("arguments", None) or {})  # dbt 1.10's place for them
    else:
        raise RenderError(f"a test is a name or a mapping with one key, got {sorted(test)}", loc)
    given_name = args.pop("name", None)  # dbt's custom name of one test
    args.pop("description", None)
    try:  # Jinja in the arguments, as dbt renders it; a test that cannot is an error here
        args, read = renderer.render_args(str(given_name or kind), args)
    except RivcError as exc:
        raise type(exc)(f"test {kind}: {exc.message}", loc) from None
    config = dict(args.pop("config", None) or {})
    for key in [k for k in args if k in TEST_CONFIG_KEYS]:  # configs written as arguments
        config.setdefault(key, args.pop(key))
    if config:
        args["config"] = config
    cls = GENERIC_TESTS.get(kind)
    if cls is None:
        macro = renderer.macro(_macro_name(kind))
        if macro is None:
            names = [
                *GENERIC_TESTS,
                *(n[5:] for n in renderer.macro_names if n.startswith("test_")),
            ]
            raise RenderError(
                f"unknown test {kind!r}{did_you_mean(kind, names)} (a package's test is "
                "package.name, from dbt_packages/)",
                loc,
            )
        node = custom_test(tested, column, kind, args, given_name, loc, nodes, renderer, macro)
        return _reading(node, read, nodes)
    if column is None:
        raise RenderError(f"test {kind} tests a column: list it under the column's tests", loc)
    from pydantic import ValidationError

    try:
        spec: Any = cls.model_validate(args)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise RenderError(
            f"test {kind}: {'.'.join(map(str, err['loc']))}: {err['msg']}", loc
        ) from None
    rel, col = quote(tested.relation), quote(column)
    if spec.config.where:
        where = parse_condition(spec.config.where, loc)
        rel = f"(SELECT * FROM {rel} WHERE {where}) AS {rel}"
    deps = [tested.node]
    name = tested.name(kind, column, args)
    if kind == "not_null":
        sql = f"SELECT *\nFROM {rel}\nWHERE {col} IS NULL"
    elif kind == "unique":
        sql = (
            f"SELECT {col}, COUNT(*) AS n_records\nFROM {rel}\nWHERE {col} IS NOT NULL\n"
            f"GROUP BY {col}\nHAVING COUNT(*) > 1"
        )
    elif kind == "accepted_values":
        values = ", ".join(
            literal(v) if spec.quote or not isinstance(v, str) else v for v in spec.values
        )
        sql = (
            f"SELECT {col}, COUNT(*) AS n_records\nFROM {rel}\nWHERE {col} IS NOT NULL "
            f"AND {col} NOT IN ({values})\nGROUP BY {col}"
        )
    else:
        target = test_target(spec.to, loc, nodes)
        known = nodes[target].columns
        if known is not None and spec.field not in known:
            raise SqlError(
                f"relationships: field {spec.field!r} is not a column of {spec.to}"
                f"{suggest(spec.field, list(known))}",
                loc,
            )
        deps.append(target)
        parent = quote(nodes[target].relation)
        field_ = quote(spec.field)
        sql = (
            f"SELECT child.{col}\nFROM {rel} AS child\nLEFT JOIN {parent} AS parent\n"
            f"  ON child.{col} = parent.{field_}\nWHERE child.{col} IS NOT NULL "
            f"AND parent.{field_} IS NULL"
        )
    alias = tested.alias(kind, name)
    if isinstance(given_name, str) and given_name:
        name, alias = given_name, {}
    if spec.config.limit is not None:
        sql += f"\nLIMIT {spec.config.limit}"
    config = {
        "severity": spec.config.severity,
        "warn_if": spec.config.warn_if,
        "error_if": spec.config.error_if,
        "enabled": spec.config.enabled,
        "test": kind,
        "column": column,
        "model": tested.label,
        **alias,
    }
    if spec.config.store_failures:
        config["store_failures"] = True
    if spec.config.fail_calc != "count(*)":
        config["fail_calc"] = spec.config.fail_calc
    node = Node(
        id=node_id("test", name),
        kind="test",
        name=name,
        path=loc.path,
        depends_on=deps,
        tags=spec.config.tags,
        config=config,
        description="",
        sql=sql + "\n",
        checksum=content_hash(tested.prefix + tested.label, column, test),
        line=loc.line,
    )
    return _reading(node, read, nodes)


def test_target(to: str, loc: SourceLocation, nodes: dict[NodeId, Node]) -> NodeId:
    m = REF_ARG.match(to)
    target = None
    if m:
        target = node_id("seed", m.group(1))
        target = target if target in nodes else node_id("model", m.group(1))
    if target is None and (s := SOURCE_ARG.match(to)):
        target = node_id("source", f"{s.group(1)}.{s.group(2)}")
    if target is None:
        raise RenderError(
            f"relationships: to must be ref('model') or source('src', 'table'), got {to!r}", loc
        )
    if target not in nodes:
        raise GraphError(f"relationships: {to} names nothing", loc)
    return target


def parse_condition(text: str, loc: SourceLocation) -> str:
    """A test's `where`: one Spark SQL condition, written back as Spark SQL."""
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        return sqlglot.parse_one(text, read="spark").sql(dialect="spark")
    except (ParseError, TokenError) as exc:
        raise SqlError(
            f"where: not a Spark SQL condition: {str(exc).splitlines()[0]}", loc
        ) from None


def _test_location(where: Located, at: tuple[str | int, ...], i: int) -> SourceLocation:
    """Where test `i` of a model or column is written, under `tests:` or `data_tests:`."""
    for key in ("data_tests", "tests"):
        if (*where.at, *at, key, i) in where.doc.marks:
            return where.location(*at, key, i)
    return where.location(*at)


def _macro_name(kind: str) -> str:
    """The macro of a generic test: `pkg.name` is `pkg.test_name`, `name` the project's."""
    package, _, name = kind.rpartition(".")
    return f"{package}.test_{name}" if package else f"test_{name}"


def _reading(node: Node, read: Rendered, nodes: dict[NodeId, Node]) -> Node:
    """The test also depends on what rendering its arguments read."""
    extra = [ref_id(r, _seeds(nodes)) for r in read.refs] + [
        node_id("source", s) for s in read.sources
    ]
    node.depends_on = list(dict.fromkeys([*node.depends_on, *extra]))
    return node


def custom_test(
    tested: Tested,
    column: str | None,
    kind: str,
    args: dict[str, Any],
    given_name: Any,
    loc: SourceLocation,
    nodes: dict[NodeId, Node],
    renderer: Renderer,
    macro: Any,
) -> Node:
    """A generic test from a `{% test %}` block (the project's or a package's): its macro
    renders the failing rows' query, as dbt runs it."""
    given_config = args.pop("config", None) or {}
    config = _test_config(kind, given_config, loc)
    rel = Relation(tested.relation, "ref")
    if config.where:
        where = parse_condition(config.where, loc)
        rel = Relation(tested.relation, "ref", f"(SELECT * FROM {rel} WHERE {where}) AS {rel}")
    kwargs = {**args, "model": rel}
    if column is not None:
        kwargs["column_name"] = column
    name = str(given_name) if given_name else tested.name(kind, column, args)
    try:
        rendered = renderer.render_macro(name, macro, kwargs)
    except TypeError as exc:  # a missing or unknown argument
        raise RenderError(f"test {kind}: {exc}", loc) from None
    except RivcError as exc:
        raise type(exc)(f"test {kind}: {exc.message}", loc) from None
    if rendered.config:  # config() in the test's macro: under the YAML's
        macro_config = {k: v for k, (v, _) in rendered.config.items()}
        config = _test_config(kind, {**macro_config, **given_config}, loc)
    sql = rendered.sql.strip()
    parse_query(sql, loc.path, "spark", "a test")
    if config.limit is not None:
        sql += f"\nLIMIT {config.limit}"
    deps = [tested.node, *(ref_id(r, _seeds(nodes)) for r in rendered.refs)]
    deps += [node_id("source", s) for s in rendered.sources]
    return Node(
        id=node_id("test", name),
        kind="test",
        name=name,
        path=loc.path,
        depends_on=list(dict.fromkeys(deps)),
        tags=config.tags,
        config={
            "severity": config.severity,
            "warn_if": config.warn_if,
            "error_if": config.error_if,
            "enabled": config.enabled,
            "test": kind,
            "column": column,
            "model": tested.label,
            **({} if given_name else tested.alias(kind, name)),
            **({"store_failures": True} if config.store_failures else {}),
            **({"fail_calc": config.fail_calc} if config.fail_calc != "count(*)" else {}),
        },
        sql=sql + "\n",
        checksum=content_hash(tested.prefix + tested.label, column, kind, args),
        line=loc.line,
    )


def _test_config(kind: str, given: dict[str, Any], loc: SourceLocation) -> Any:
    from pydantic import ValidationError

    from ..loading.property_specs import TestConfig

    try:
        return TestConfig.model_validate(given)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise RenderError(
            f"test {kind}: config.{'.'.join(map(str, err['loc']))}: {err['msg']}", loc
        ) from None


def _seeds(nodes: dict[NodeId, Node]) -> set[str]:
    return {n.name for n in nodes.values() if n.kind == "seed"}
