from __future__ import annotations

import pytest

from rivc.compiler.errors import GraphError, SqlError
from rivc_testing import analyze_dir, findings, only

PG = """
sources:
  - name: pg
    connector: postgres
    connection: db
    tables:
      - name: o
        query: {query}
        mode: incremental
        cursor_column: {cursor}
"""


def _pg(make_project, query: str, cursor: str = "updated_at", columns: str = ""):
    text = PG.format(query=query, cursor=cursor)
    if columns:
        text += f"        columns: {columns}\n"
    return make_project({"sources/pg.yml": text})


def test_syntax_error_has_line_and_col(make_project):
    root = make_project({"models/m.sql": "select order_id,\n  (( from {{ ref('stg') }}\n"})
    f = only(findings(root), "RV001")
    assert isinstance(f.error, SqlError) and f.location.line == 2


def test_model_must_be_one_select(make_project):
    root = make_project({"models/m.sql": "select 1 as a;\nselect 2 as b\n"})
    assert only(findings(root), "RV001").location.line == 2
    root = make_project({"models/m.sql": "insert into t select 1\n"})
    assert "SELECT" in only(findings(root), "RV001").error.message


@pytest.mark.parametrize(
    "query",
    [
        '"DELETE FROM orders"',
        '"SELECT 1; DROP TABLE orders"',
        '"WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d"',
        '"SELECT id, updated_at FROM orders FOR UPDATE"',
    ],
)
def test_source_query_must_be_read_only_select(make_project, query):
    f = only(findings(_pg(make_project, query)), "RV010")
    assert f.location.path.as_posix() == "sources/pg.yml" and f.location.line == 7


def test_a_source_query_that_does_not_parse_is_a_syntax_error(make_project):
    f = only(findings(_pg(make_project, '"SELECT id FROM orders WHERE ("')), "RV001")
    assert f.location.path.as_posix() == "sources/pg.yml"


def test_cursor_column_must_be_in_output(make_project):
    root = _pg(make_project, '"SELECT id, updated_at AS changed FROM orders"')
    f = only(findings(root), "RV004")
    assert f.severity == "error" and "changed" in f.error.message and f.location.line == 9


def test_a_star_source_cannot_be_checked_and_says_how_to_list_its_columns(make_project):
    f = only(findings(_pg(make_project, '"SELECT * FROM orders"')), "RV004")
    assert f.severity == "warning" and "list its columns in query:" in f.error.message
    # `columns:` sets the types of the columns it names, nothing more: a refusal's advice
    # (declare one column) never turns into "the key is not an output column"
    root = _pg(make_project, '"SELECT * FROM orders"', columns="{note: string}")
    f = only(findings(root), "RV004")
    assert f.severity == "warning" and "cannot be checked" in f.error.message


def test_declared_columns_type_the_query_s_columns(make_project):
    root = _pg(make_project, '"SELECT id, note, updated_at FROM orders"', columns="{note: string}")
    assert not findings(root)
    root = _pg(make_project, '"SELECT id, updated_at FROM orders"', columns="{nte: string}")
    f = only(findings(root), "RV004")
    assert f.severity == "error" and "'nte' is not selected by the query" in f.error.message


def test_models_over_a_query_source_are_column_checked(make_project):
    root = _pg(make_project, '"SELECT id, amount, updated_at FROM orders"')
    (root / "models/m.sql").write_text("select id, amont from {{ source('pg', 'o') }}\n")
    (root / "models/d.sql").write_text("select id, amont2 from {{ ref('m') }}\n")
    errors = [f for f in findings(root) if f.rule == "RV009"]
    # the second error, downstream of the first, is found in the same compile
    assert sorted((f.location.path.name, f.error.message) for f in errors) == [
        ("d.sql", "unknown column 'amont2', did you mean 'amont'?"),
        ("m.sql", "unknown column 'amont', did you mean 'amount'?"),
    ]


def test_unknown_column_through_the_dag(make_project):
    root = make_project(
        {
            "models/mid.sql": "select order_id, total * 2 as doubled from {{ ref('stg') }}\n",
            "models/top.sql": "select order_id,\n  doubld\nfrom {{ ref('mid') }}\n",
        }
    )
    f = only(findings(root), "RV009")
    assert (f.location.path.as_posix(), f.location.line, f.location.col) == ("models/top.sql", 2, 3)
    assert "'doubled'" in f.error.message


def test_star_expands_through_the_dag(make_project):
    root = make_project(
        {
            "models/mid.sql": "select * from {{ ref('stg') }}\n",
            "models/top.sql": "select totl from {{ ref('mid') }}\n",
        }
    )
    assert only(findings(root), "RV009").location.path.as_posix() == "models/top.sql"
    nodes = analyze_dir(root).graph.nodes
    assert list(nodes["model:mid"].columns) == ["order_id", "customer_id", "total"]


def test_sink_from_names_nothing(make_project):
    root = make_project({"sinks/s.yml": "sinks:\n  - {name: s, from: stgg, connector: stdout}\n"})
    f = only(findings(root), "RV002")
    assert isinstance(f.error, GraphError) and f.location.line == 2 and "'stg'" in f.error.message


def test_sink_merge_key_checked(make_project):
    root = make_project(
        {
            "sinks/s.yml": "sinks:\n  - {name: s, from: stg, connector: delta,\n"
            "     config: {table_uri: o, mode: merge, merge_keys: [id]}}\n"
        }
    )
    f = only(findings(root), "RV004")
    assert "merge_keys" in f.error.message and f.location.path.as_posix() == "sinks/s.yml"


def test_model_unique_key_checked(make_project):
    root = make_project(
        {
            "models/m.sql": "{{ config(materialized='incremental', unique_key='id') }}"
            "select order_id from {{ ref('stg') }}\n"
        }
    )
    assert "unique_key" in only(findings(root), "RV004").error.message


def test_all_problems_reported_in_one_run_sorted(make_project):
    root = make_project(
        {
            "models/a.sql": "select from from\n",
            "models/b.sql": "select {{ ref('zzz') }}\n",
            "models/c.sql": "select ${unbound_p} as x\n",
        }
    )
    paths = [f.location.path.as_posix() for f in analyze_dir(root).errors]
    assert paths == ["models/a.sql", "models/b.sql", "models/c.sql"]


def test_parallel_workers_match_serial(make_project):
    files = {
        f"models/m{i}.sql": f"select order_id, total + {i} as t{i} from {{{{ ref('stg') }}}}\n"
        for i in range(20)
    }
    files["models/bad.sql"] = "select nope from {{ ref('m3') }}\n"
    root = make_project(files)
    serial, parallel = analyze_dir(root, workers=1), analyze_dir(root, workers=2)
    assert [str(f) for f in serial.findings] == [str(f) for f in parallel.findings]
    assert {n: v.columns for n, v in serial.graph.nodes.items()} == {
        n: v.columns for n, v in parallel.graph.nodes.items()
    }


def test_an_expression_nested_too_deep_is_one_finding_not_a_traceback(make_project):
    deep = "select " + "(" * 800 + "1" + " + 1)" * 800 + " as x\n"
    root = make_project({"models/deep.sql": deep})
    f = only(findings(root), "RV001")
    assert f.location.path.as_posix() == "models/deep.sql" and "too deeply" in f.error.message


def test_a_relationships_field_the_target_lacks_is_found_at_the_test(make_project):
    root = make_project(
        {
            "models/top.sql": "select order_id, customer_id from {{ ref('stg') }}\n",
            "models/top.yml": """
                models:
                  - name: top
                    columns:
                      - name: customer_id
                        tests:
                          - not_null
                          - relationships:
                              to: ref('stg')
                              field: customer
            """,
        }
    )
    f = only(findings(root), "RV009")
    assert (f.location.path.as_posix(), f.location.line) == ("models/top.yml", 7)
    assert "field 'customer' is not a column of ref('stg')" in f.error.message
    assert "did you mean 'customer_id'" in f.error.message


def test_a_column_s_type_follows_it_through_ctes_and_is_unknown_when_computed():
    """A CTE's `amount / 100 AS amount` is a double in Spark, not the input's int: a type is
    taken from the relation a column comes from, never from a column of the same name."""
    from pathlib import Path

    import sqlglot

    from rivc.compiler.analysis.validate import resolve_columns

    sql = (
        "with source as (select * from raw),\n"
        "renamed as (select id as payment_id, amount / 100 as amount,\n"
        "  cast(id as bigint) as wide, max(note) as note, count(*) as n from source group by id)\n"
        "select r.*, p.amount as raw_amount from renamed r join raw p on p.id = r.payment_id"
    )
    schema = {"raw": {"id": "int", "amount": "int", "note": "string"}}
    got, _ = resolve_columns(sqlglot.parse_one(sql, read="spark"), sql, Path("m.sql"), schema)
    assert got == {
        "payment_id": "int",
        "amount": "UNKNOWN",
        "wide": "bigint",
        "note": "string",
        "n": "bigint",
        "raw_amount": "int",
    }


def test_dbt_test_configs_compile_as_dbt_runs_them(make_project):
    props = """
        models:
          - name: stg
            columns:
              - name: total
                tests:
                  - accepted_values:
                      name: big_totals
                      arguments: {values: [1, 2], quote: false}
                      config: {where: "customer_id > 3", limit: 5, severity: WARN,
                               warn_if: ">= 2", error_if: "> 10", tags: [slow]}
                  - not_null: {config: {enabled: false}}
                  - unique: {config: {error_if: "about ten"}}
    """
    compiled = analyze_dir(make_project({"models/stg.yml": props}))
    (error,) = compiled.errors
    assert error.location.line == 12 and "'about ten' is not a comparison" in str(error)
    test = compiled.graph.nodes["test:big_totals"]
    assert "FROM (SELECT * FROM `stg` WHERE customer_id > 3) AS `stg`" in test.sql
    assert test.sql.rstrip().endswith("LIMIT 5") and "NOT IN (1, 2)" in test.sql
    assert test.config["severity"] == "warn" and test.tags == ("slow",)
    assert (test.config["warn_if"], test.config["error_if"]) == (">= 2", "> 10")
    assert not [n for n in compiled.graph.nodes if n.startswith("test:not_null")]  # disabled


@pytest.mark.parametrize(
    ("count", "threshold", "met"),
    [(0, "!= 0", False), (1, "!= 0", True), (5, ">5", False), (6, ">5", True), (2, "<>2", False)],
)
def test_a_threshold_compares_the_failing_rows(count, threshold, met):
    from rivc.compiler.loading.property_specs import failed

    assert failed(count, threshold) is met


def test_a_cast_to_a_type_spark_does_not_parse_is_an_error_at_its_word(make_project):
    """sqlglot reads varchar without a length, text or bool, and Spark refuses them at run
    time (as dbt-spark does): compile and lint say so at the word."""
    sql = (
        "select cast(id as varchar) as a,\n"
        "  id::text as b, cast(id as varchar(10)) as c, cast(id as string) as d,\n"
        "  try_cast(id as bool) as e, 'x' as text, 1L as f, 2.5d as g, 3bd as h, 1.5f as i\n"
        "from {{ ref('stg') }}\n"
    )
    root = make_project({"models/stg.sql": "select 1 as id", "models/m.sql": sql})
    said = sorted(str(f) for f in findings(root) if f.rule == "RV001")
    assert said == [
        "models/m.sql:1:19: error: varchar needs a length in Spark SQL: varchar(n), or string [RV001]",
        "models/m.sql:2:7: error: Spark SQL has no type text: use string [RV001]",
        "models/m.sql:3:18: error: Spark SQL has no type bool: use boolean [RV001]",
    ]
