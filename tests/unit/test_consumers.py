"""What each sink consumes, decided at compile time without a JVM: which views pass new batches
through, the batch SQL of a sink, and what compile refuses; then the planner of what a sink takes
from the places its tables hold."""

from __future__ import annotations

import pytest

from rivc.adapters.delivery.consume import WHOLE, Landed, Step, plan_steps
from rivc.compiler.analysis.increments import changes
from rivc.compiler.emit.manifest import SinkInput
from rivc.compiler.errors import StateError
from rivc_testing import analyze_dir

C = {"src__t"}


@pytest.mark.parametrize(
    ("sql", "passes"),
    [
        ("select a, b from `src__t` where a > 1", True),
        ("select o.*, u.name from `src__t` o join `users` u on u.id = o.uid", True),
        ("select o.*, u.name from `src__t` o left join `users` u on u.id = o.uid", True),
        ("select a from `src__t` union all select a from `other`", True),
        ("with x as (select * from `src__t`) select a from x where a > 0", True),
        ("select * from (select a from `src__t`) s", True),
        ("select a, (select max(id) from `users`) m from `src__t`", True),
        ("select u.*, o.a from `users` u left join `src__t` o on u.id = o.uid", False),
        ("select uid, sum(a) from `src__t` group by uid", False),
        ("select count(*) from `src__t`", False),
        ("select a, row_number() over (order by a) from `src__t`", False),
        ("select distinct a from `src__t`", False),
        ("select a from `src__t` union select a from `other`", False),
        ("select * from `src__t` a join `src__t` b on a.id = b.id", False),
        ("select * from `users` where id in (select uid from `src__t`)", False),
        ("select * from `src__t` limit 5", False),
    ],
)
def test_which_views_pass_new_batches_through(sql, passes):
    moving, why = changes(sql, C)
    assert moving
    assert (why is None) is passes, why


def test_a_view_of_static_inputs_does_not_change():
    assert changes("select * from `users` join `other` using (id)", C) == (False, None)


SOURCES = """
sources:
  - name: db
    connector: postgres
    connection: main
    tables:
      - {name: orders, table: orders, mode: incremental, cursor_column: at, unique_key: id,
         columns: {id: bigint, customer_id: bigint, amount: "decimal(12,2)", at: timestamp}}
      - {name: customers, table: customers, columns: {id: bigint, name: string}}
"""
PROFILE = "default:\n  connections:\n    main: {type: postgres, database: d}\n"


def compile_with(make_project, models: dict[str, str], sinks: str):  # type: ignore[no-untyped-def]
    files = {
        "profiles.yml": PROFILE,
        "sources/db.yml": SOURCES,
        "sources/demo.yml": None,
        "models/stg.sql": None,
        "sinks/out.yml": sinks,
        **{f"models/{k}.sql": v for k, v in models.items()},
    }
    return analyze_dir(make_project(files))


def test_a_sink_through_row_wise_views_reads_its_own_new_batches(make_project):
    compiled = compile_with(
        make_project,
        {
            "enriched": "select o.id, o.amount, c.name from {{ source('db', 'orders') }} o\n"
            "join {{ source('db', 'customers') }} c on c.id = o.customer_id\n",
            "big": "select * from {{ ref('enriched') }} where amount > 100\n",
        },
        "sinks:\n  - {name: lake, from: big, connector: delta,\n"
        "     config: {table_uri: out/lake, mode: append}}\n",
    )
    assert not compiled.errors, [str(f) for f in compiled.errors]
    sink = compiled.graph.nodes["sink:lake"]
    assert sink.facts.input == SinkInput(
        kind="batches",
        changing=("source:db.orders",),
        tracked=("source:db.customers", "source:db.orders"),
        untracked=False,
    )
    sql = sink.sql_batches
    assert "`_rivc_new__lake__db__orders`" in sql and "`db__customers`" in sql
    assert sql.index("`enriched` AS (") < sql.index("`big` AS (")  # in dependency order


def test_an_append_sink_past_an_aggregating_view_is_refused_at_its_from(make_project):
    compiled = compile_with(
        make_project,
        {
            "daily": "select customer_id, sum(amount) as revenue\n"
            "from {{ source('db', 'orders') }} group by customer_id\n"
        },
        "sinks:\n"
        "  - {name: appended, from: daily, connector: delta,\n"
        "     config: {table_uri: out/a, mode: append}}\n"
        "  - {name: merged, from: daily, connector: delta,\n"
        "     config: {table_uri: out/m, mode: merge, merge_keys: [customer_id]}}\n",
    )
    (error,) = compiled.errors
    assert error.location is not None and str(error.location.path) == "sinks/out.yml"
    assert error.location.line == 2 and "'appended'" in str(error) and "aggregates" in str(error)
    merged = compiled.graph.nodes["sink:merged"].facts.input
    assert merged.kind == "whole" and merged.through == "daily"


@pytest.mark.parametrize(
    "config",
    [
        'connector: mqtt\n    tables:\n      - {name: readings, config: {url: "mqtt://127.0.0.1:1883", topics: [t]},',
        'connector: nats\n    tables:\n      - {name: readings, config: {url: "nats://127.0.0.1:4222", stream: S},',
        'connector: rabbitmq\n    tables:\n      - {name: readings, config: {url: "amqp://h", queue: q},',
    ],
)
def test_a_stream_whose_place_the_broker_holds_feeds_one_sink(make_project, config):
    source = f"""
sources:
  - name: iot
    {config}
         columns: {{v: bigint}}}}
"""
    sinks = "sinks:\n" + "".join(
        f"  - {{name: {n}, from: source:iot.readings, connector: delta,\n"
        f"     config: {{table_uri: out/{n}}}}}\n"
        for n in ("first", "second")
    )
    root = make_project({"sources/iot.yml": source, "sinks/out.yml": sinks})
    (error,) = analyze_dir(root).errors
    assert "'second' reads stream source 'iot.readings'" in str(error)
    assert "declare a second table of the stream" in str(error)


def landed(*ids: int, keyed: bool = True) -> Landed:
    return Landed(ids[-1] if ids else None, ids, ids[0] if ids else None, keyed)


def test_the_planner_takes_what_is_newer_than_each_place():
    src = "source:db.orders"
    keyed = landed(10, 20, 30)

    def plan(held: list, merging: bool = False, at: Landed = keyed) -> list[Step]:  # type: ignore[type-arg]
        return plan_steps("s", "batches", [src], {src: at.batch}, {src: at}, held, False, merging)

    assert plan([{src: 30}]) == []  # nothing new
    assert plan([{src: 10}]) == [Step({src: 30}, {src: (10, 30)})]
    assert plan([{src: None}]) == [Step({src: 30}, {src: (None, 30)})]  # a new consumer
    assert plan([{src: WHOLE}]) == [Step({src: 30}, {src: (None, 30)})]  # rewound to start
    # destinations at different places: one landed batch at a time, each skips what it holds
    assert plan([{src: 10}, {src: 20}]) == [
        Step({src: 20}, {src: (10, 20)}),
        Step({src: 30}, {src: (20, 30)}),
    ]
    # a merge of a source without a key: one batch at a time, no key twice in a write
    unkeyed = landed(10, 20, 30, keyed=False)
    assert len(plan([{src: 10}], merging=True, at=unkeyed)) == 2
    assert len(plan([{src: 10}], merging=True)) == 1  # keyed: each key's newest version
    # a sink that keeps no place takes its whole input
    assert plan([None]) == [Step({src: 30}, complete=False)]
    with pytest.raises(StateError, match="batches were lost"):
        plan([{src: 40}])
    with pytest.raises(StateError, match="re-created"):
        plan([{src: 5}])


def test_a_whole_input_is_delivered_when_a_tracked_version_moved():
    model = "model:daily"

    def plan(held: int | None, untracked: bool = False) -> list[Step]:
        return plan_steps("s", "whole", [], {model: 7}, {}, [{model: held}], untracked, False)

    assert plan(7) == []
    assert plan(6) == [Step({model: 7})]
    assert plan(7, untracked=True) == [Step({model: 7}, complete=False)]  # datagen and the like
