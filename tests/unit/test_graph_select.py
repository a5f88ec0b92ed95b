from __future__ import annotations

import json

import pytest

from rivc.compiler.dag.selector import select
from rivc.compiler.emit import run_results
from rivc.compiler.errors import GraphError, SelectionError
from rivc_testing import analyze_dir

FILES = {
    "sources/more.yml": """
        sources:
          - name: crm
            connector: datagen
            tables:
              - {name: users, config: {pattern: users}}
    """,
    "models/staging/stg_users.sql": "select user_id from {{ source('crm', 'users') }}\n",
    "models/marts/orders.sql": "{{ config(materialized='incremental', tags=['fin']) }}"
    "select * from {{ ref('stg') }}\n",
    "models/marts/revenue.sql": "{{ config(materialized='table', tags=['fin', 'kpi']) }}"
    "select sum(total) as r from {{ ref('orders') }}\n",
    "models/marts/users.sql": "select * from {{ ref('stg_users') }}\n",
    "models/props.yml": "models:\n  - name: orders\n    columns:\n      - {name: order_id, tests: [unique]}\n",
    "sinks/s.yml": "sinks:\n  - {name: lake, from: revenue, connector: stdout}\n",
}


@pytest.fixture
def graph(make_project):
    return analyze_dir(make_project(FILES)).graph


def names(graph, *include, exclude=()):
    return sorted(graph.nodes[n].name for n in select(graph, include, exclude))


def test_graph_operators(graph):
    assert names(graph, "orders") == ["orders", "unique_orders_order_id"]
    assert names(graph, "orders+") == ["lake", "orders", "revenue", "unique_orders_order_id"]
    assert names(graph, "+orders") == ["demo.orders", "orders", "stg", "unique_orders_order_id"]
    assert names(graph, "1+revenue") == ["orders", "revenue", "unique_orders_order_id"]
    assert names(graph, "stg+1") == ["orders", "stg", "unique_orders_order_id"]
    assert names(graph, "@orders") == sorted(
        ["demo.orders", "lake", "orders", "revenue", "stg", "unique_orders_order_id"]
    )


def test_methods(graph):
    assert names(graph, "tag:kpi") == ["revenue"]
    assert names(graph, "path:models/staging") == ["stg_users"]
    assert names(graph, "source:crm+") == ["crm.users", "stg_users", "users"]
    assert names(graph, "source:demo.orders") == ["demo.orders"]
    assert names(graph, "sink:lake") == ["lake"]
    assert names(graph, "config.materialized:incremental") == ["orders", "unique_orders_order_id"]
    assert names(graph, "stg_*") == ["stg_users"]


def test_union_intersection_exclude(graph):
    assert names(graph, "revenue users") == ["revenue", "users"]
    assert names(graph, "tag:fin,config.materialized:table") == ["revenue"]
    assert names(graph, "orders+", exclude=["sink:lake"]) == [
        "orders",
        "revenue",
        "unique_orders_order_id",
    ]


def test_unknown_name_suggests(graph):
    with pytest.raises(SelectionError, match="'revenue'"):
        select(graph, ["revenu"])
    with pytest.raises(SelectionError, match="'tag'"):
        select(graph, ["tga:fin"])


def test_cycle_is_reported_as_a_path(make_project):
    root = make_project(
        {
            "models/a.sql": "select 1 as x from {{ ref('b') }}\n",
            "models/b.sql": "select 1 as x from {{ ref('a') }}\n",
        }
    )
    with pytest.raises(GraphError) as info:
        analyze_dir(root)
    assert "model:a -> model:b -> model:a" in info.value.message
    assert info.value.location.path.as_posix() == "models/a.sql"


def test_order_is_deterministic(graph):
    order = graph.order()
    assert order.index("model:stg") < order.index("model:orders") < order.index("model:revenue")
    assert order == graph.order()


def test_every_sink_is_selected_by_its_mode(make_project):
    sinks = """
        sinks:
          - {name: to_files, from: stg, connector: files,
             config: {path: out, format: parquet, mode: overwrite}}
          - {name: to_delta, from: stg, connector: delta, config: {table_uri: d}}
          - {name: to_iceberg, from: stg, connector: iceberg,
             config: {namespace: n, table: t, mode: overwrite}}
    """
    graph = analyze_dir(make_project({**FILES, "sinks/s.yml": sinks})).graph
    assert names(graph, "config.mode:overwrite") == ["to_files", "to_iceberg"]
    assert names(graph, "config.mode:append") == ["to_delta"]


def test_result_selects_by_the_last_runs_status(make_project):
    root = make_project(FILES)
    with pytest.raises(SelectionError, match=r"run_results.json is missing: run first"):
        analyze_dir(root, select=("result:error",))
    results = [
        {"node": "model:orders", "kind": "model", "status": "error"},
        {"node": "model:revenue", "kind": "model", "status": "skipped"},
        {"node": "model:stg", "kind": "model", "status": "success"},
        {"node": "model:gone", "kind": "model", "status": "error"},  # no longer in the project
    ]
    last = run_results.dumps(
        project="p",
        ids={},
        relations={},
        command="run",
        run={"run_id": "r1", "status": "error"},
        options={},
        results=results,
        elapsed_s=1.0,
    )
    (root / "target").mkdir()
    (root / "target/run_results.json").write_text(last)
    chosen = analyze_dir(root, select=("result:error+",)).chosen
    assert sorted(chosen) == [
        "model:orders",
        "model:revenue",
        "sink:lake",
        "test:unique_orders_order_id",
    ]
    chosen = analyze_dir(root, select=("result:error", "result:skipped")).chosen
    assert sorted(chosen) == ["model:orders", "model:revenue", "test:unique_orders_order_id"]
    assert analyze_dir(root, select=("result:fail",)).chosen == []  # nothing failed a test


def write_target(compiled, folder) -> None:
    from rivc.compiler.emit.codegen import artifacts

    for rel, text in artifacts(compiled).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def test_state_selects_what_changes_what_a_node_does(make_project):
    root = make_project(FILES)
    write_target(analyze_dir(root), root / "prod")

    def changed(*selectors):
        return sorted(analyze_dir(root, select=selectors, state=str(root / "prod")).chosen)

    assert changed("state:modified") == []  # nothing changed: nothing to build
    users = root / "models/marts/users.sql"
    users.write_text("-- the users\nSELECT *\n  FROM {{ ref('stg_users') }}\n")  # same SQL
    (root / "models/marts/revenue.sql").write_text(
        "{{ config(materialized='table', tags=['fin', 'kpi']) }}"
        "select sum(total) * 100 as r from {{ ref('orders') }}\n"
    )
    (root / "models/marts/orders.sql").write_text(
        "{{ config(materialized='incremental', tags=['fin', 'new']) }}select * from {{ ref('stg') }}\n"
    )
    (root / "models/marts/fresh.sql").write_text("select 1 as one\n")
    (root / "sinks/s.yml").write_text(
        "sinks:\n  - {name: lake, from: revenue, connector: stdout, config: {limit: 5}}\n"
    )
    assert changed("state:modified") == [
        "model:fresh",
        "model:orders",
        "model:revenue",
        "sink:lake",
        "test:unique_orders_order_id",  # its model's: dbt's indirect selection
    ]
    assert changed("state:new") == ["model:fresh"]
    assert changed("state:modified.body") == ["model:revenue"]
    assert changed("state:modified.configs") == [
        "model:orders",
        "sink:lake",
        "test:unique_orders_order_id",
    ]
    assert changed("state:modified.body+") == ["model:revenue", "sink:lake"]
    with pytest.raises(SelectionError, match="needs --state DIR"):
        analyze_dir(root, select=("state:modified",))
    with pytest.raises(SelectionError, match="'modified'"):
        analyze_dir(root, select=("state:modifed",), state=str(root / "prod"))
    with pytest.raises(SelectionError, match="no rivc_manifest.json there"):
        analyze_dir(root, select=("state:new",), state=str(root / "nowhere"))


def test_a_changed_var_or_upstream_column_selects_the_nodes_it_changes(make_project):
    root = make_project(
        {
            "models/a.sql": "select {{ var('n', 1) }} as n, 2 as m\n",
            "models/b.sql": "select * from {{ ref('a') }}\n",
            "models/c.sql": "select m from {{ ref('a') }}\n",
        }
    )
    write_target(analyze_dir(root, vars={"n": 1}), root / "prod")

    def changed(selector, **options):
        compiled = analyze_dir(root, select=(selector,), state=str(root / "prod"), **options)
        return sorted(compiled.chosen)

    assert changed("state:modified", vars={"n": 1}) == []
    assert changed("state:modified", vars={"n": 2}) == ["model:a"]  # its rendered SQL
    (root / "models/a.sql").write_text("select 1 as n, 2 as m, 3 as k\n")
    # b's SQL is the same, but it has a new column; c reads what it read
    assert changed("state:modified.contract") == ["model:a", "model:b"]
    assert changed("state:modified.body") == ["model:a"]


def test_modified_macros_vars_sources_and_sinks(make_project):
    """dbt's sub-selectors: a macro a node calls (directly or through another macro) or a var
    it reads changed, even where its SQL came out the same; a source's or a sink's spec."""
    root = make_project(
        {
            "macros/m.sql": "{% macro inner() %}1{% endmacro %}\n"
            "{% macro outer() %}{{ inner() }}{% endmacro %}\n"
            "{% macro other() %}2{% endmacro %}\n",
            "models/a.sql": "select {{ outer() }} as one\n",
            "models/b.sql": "select {{ other() }} as two, '{{ var('mode', 'x') }}' as mode\n",
            "models/c.sql": "select * from {{ ref('a') }}\n",
            "sources/s.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
            "      - {name: users, config: {pattern: users}}\n",
            "sinks/s.yml": "sinks:\n  - {name: out, from: c, connector: stdout}\n",
        }
    )
    write_target(analyze_dir(root, vars={"flag": 1}), root / "prod")

    def changed(selector, **options):
        compiled = analyze_dir(root, select=(selector,), state=str(root / "prod"), **options)
        return sorted(compiled.chosen)

    assert changed("state:modified", vars={"flag": 1}) == []
    # the inner macro's text changes, its output does not: a's SQL is the same
    macros = root / "macros/m.sql"
    macros.write_text(
        macros.read_text().replace("{% macro inner() %}1", "{% macro inner() %}{# one #}1")
    )
    assert changed("state:modified.macros") == ["model:a"]
    assert changed("state:modified.body") == []
    assert changed("state:modified.macros+") == ["model:a", "model:c", "sink:out"]
    # a var b reads has another value; one it does not read changes nothing
    assert changed("state:modified.vars", vars={"mode": "y"}) == ["model:b"]
    assert changed("state:modified.vars", vars={"mode": "x"}) == []  # its default, as before
    assert changed("state:modified.vars", vars={"flag": 2}) == []  # nobody reads flag
    (root / "sources/s.yml").write_text(
        (root / "sources/s.yml").read_text().replace("pattern: users", "pattern: users, seed: 3")
    )
    (root / "sinks/s.yml").write_text(
        "sinks:\n  - {name: out, from: c, connector: stdout, config: {limit: 5}}\n"
    )
    assert changed("state:modified.sources") == ["source:gen.users"]
    assert changed("state:modified.sinks") == ["sink:out"]


def test_diff_and_lint_state_name_the_readers_a_column_change_breaks(make_project):
    from rivc.compiler.analysis import breaking
    from rivc.compiler.dag import statediff
    from rivc_testing import rivc

    root = make_project(
        {
            "models/a.sql": "select 1 as id, cast(2 as int) as amount, 'x' as note\n",
            "models/b.sql": "select x.id, x.amount from {{ ref('a') }} x\n",
            "models/c.sql": "select * from {{ ref('a') }}\n",
            "models/d.sql": "select id\nfrom {{ ref('a') }}\n",
            "models/props.yml": "models:\n  - name: a\n    columns:\n      - {name: note, tests: [not_null]}\n",
            "sinks/s.yml": "sinks:\n  - {name: out, from: a, connector: stdout}\n",
        }
    )
    write_target(analyze_dir(root), root / "prod")
    assert rivc(root, "lint", "--state", str(root / "prod")).exit_code == 0
    (root / "models/a.sql").write_text("select 1 + 0 as id, cast(2 as double) as amount\n")
    compiled = analyze_dir(root)
    changes = breaking.column_changes(compiled.graph, statediff.load(root / "prod"))
    assert {(c.node, c.column, c.what) for c in changes} == {
        ("model:a", "id", "redefined"),
        ("model:a", "amount", "retyped"),
        ("model:a", "note", "removed"),
        ("model:c", "amount", "retyped"),  # it passes a's columns on
        ("model:c", "note", "removed"),
        ("model:b", "amount", "retyped"),
    }
    broken = {
        (i.change.node, i.change.column, i.reader)
        for i in breaking.impacts(compiled.graph, changes, root)
        if i.breaking
    }
    assert broken == {
        ("model:a", "id", "model:b"),
        ("model:a", "id", "model:d"),
        ("model:a", "amount", "model:b"),
        ("model:a", "id", "sink:out"),
        ("model:a", "amount", "sink:out"),
        ("model:a", "note", "sink:out"),
        ("model:a", "note", "test:not_null_a_note"),
    }
    linted = rivc(root, "lint", "--state", str(root / "prod"))
    assert linted.exit_code == 1
    errors = [line for line in linted.output.splitlines() if "[RV013]" in line]
    assert len(errors) == 3 and all(e.startswith("models/a.sql") for e in errors)
    assert "column note of model a was removed: sink out (sinks/s.yml:2)" in linted.output
    shown = json.loads(rivc(root, "diff", "--state", str(root / "prod"), "--format", "json").output)
    d = [
        r
        for c in shown["changes"]
        if c["column"] == "id"
        for r in c["readers"]
        if r["node"] == "model:d"
    ]
    assert d == [{"node": "model:d", "breaking": True, "why": "reads a.id", "at": "models/d.sql:1"}]
    assert rivc(root, "diff").exit_code == 2  # no --state
