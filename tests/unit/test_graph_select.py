from __future__ import annotations

import pytest

from rivc.compiler.errors import GraphError, SelectionError
from rivc.compiler.selector import select
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
