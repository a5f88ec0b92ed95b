"""Column lineage (compiler/analysis/lineage.py): each model column's origins and how, in the manifest
and `rivc ls --lineage`, checked against sqlglot's own lineage on real projects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlglot import exp
from sqlglot.lineage import lineage as sqlglot_lineage

from rivc_testing import analyze_dir, rivc

HERE = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("project", ["sample_project", "init"])
def test_every_columns_origins_are_the_ones_sqlglots_lineage_finds(project, tmp_path):
    if project == "init":  # the project `rivc init` writes
        from rivc.adapters.ops.scaffold import scaffold

        scaffold(tmp_path / "init", "default")
    graph = analyze_dir(tmp_path / "init" if project == "init" else HERE / project).graph
    tables = [n for n in graph.nodes.values() if n.kind in ("model", "seed", "source")]
    schema = {
        n.relation: {c: t or "string" for c, t in n.columns.items()} for n in tables if n.columns
    }
    node_of = {n.relation: n.id for n in tables}
    compared = 0
    for node in graph.nodes.values():
        for column, origins in (node.lineage or {}).items():
            peer = set()
            for step in sqlglot_lineage(column, node.sql, schema=schema, dialect="spark").walk():
                if not step.downstream and isinstance(step.expression, exp.Table):
                    name = step.name.rsplit(".", 1)[-1].strip('"`')
                    peer.add((node_of[step.expression.name], name))
            assert {(o[0], o[1]) for o in origins} == peer, (node.id, column)
            compared += 1
    assert compared >= 15  # every model column of either project


def test_how_each_column_is_made_and_what_filters_the_rows(make_project):
    root = make_project(
        {
            "models/a.sql": "select 1 as id, 2 as amount, 'x' as name, 3 as kind\n",
            "models/b.sql": "select 1 as id, 'y' as name\n",
            "models/m.sql": (
                "with j as (select a.id, a.amount, b.name from {{ ref('a') }} a "
                "join {{ ref('b') }} b on b.id = a.id where a.kind = 1)\n"
                "select id, name, sum(amount) as total, upper(name) as loud from j "
                "group by id, name\n"
                "union all select id, name, 0, name from {{ ref('b') }}\n"
            ),
        }
    )
    node = analyze_dir(root).graph.nodes["model:m"]
    assert node.lineage == {
        "id": [("model:a", "id", "copied"), ("model:b", "id", "copied")],
        "name": [("model:b", "name", "copied")],
        "total": [("model:a", "amount", "aggregated")],
        "loud": [("model:b", "name", "transformed")],  # the worse of its union's branches
    }
    assert node.filters == [
        ("model:a", "id"),
        ("model:a", "kind"),
        ("model:b", "id"),
        ("model:b", "name"),
    ]
    from rivc.compiler.emit.codegen import artifacts

    written = json.loads(artifacts(analyze_dir(root))["rivc_manifest.json"])["nodes"]["model:m"]
    assert written["lineage"]["columns"]["total"] == [["model:a", "amount", "aggregated"]]
    assert ["model:a", "kind"] in written["lineage"]["filters"]


def test_ls_lineage_walks_up_to_sources_and_down_to_sinks_and_tests():
    root = HERE / "sample_project"
    shown = rivc(root, "ls", "--lineage", "stg_orders.total")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[:3] == [
        "stg_orders.total",
        "  <- orders.total_cents  transformed",
        "    <- source:shop.orders.total  transformed",
    ]
    assert "      -> sink:customer_orders_files  delivered" in lines
    assert "      -> test:accepted_values_customer_orders_segment__vip__regular  tested" in lines
    data = json.loads(
        rivc(root, "ls", "--lineage", "customer_orders.revenue", "--output", "json").output
    )
    assert [(s["node"], s["column"], s["how"]) for s in data["upstream"]] == [
        ("model:orders_enriched", "total", "aggregated"),
        ("model:stg_orders", "total", "copied"),
        ("model:orders", "total_cents", "transformed"),
        ("source:shop.orders", "total", "transformed"),
    ]
    wrong = rivc(root, "ls", "--lineage", "customer_orders.revenu")
    assert wrong.exit_code == 2 and "did you mean 'revenue'" in wrong.output
