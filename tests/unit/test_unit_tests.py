"""dbt's unit tests at compile: given rows become CTEs named like the inputs they stand for,
typed by the inputs' columns; `this` and is_incremental, vars overrides; a missing input or a
fixture file is an error at the test."""

from __future__ import annotations

from rivc_testing import analyze_dir

INCREMENTAL = """{{ config(materialized='incremental', unique_key='order_id') }}
select order_id, total from {{ ref('stg') }}
{% if is_incremental() %}where order_id > (select max(order_id) from {{ this }}){% endif %}
"""


def compiled(make_project, tests: str):
    return analyze_dir(make_project({"models/inc.sql": INCREMENTAL, "models/inc.yml": tests}))


def test_given_rows_stand_in_for_the_inputs_and_this(make_project):
    tests = """
unit_tests:
  - name: only_new_orders
    model: inc
    overrides: {macros: {is_incremental: true}}
    given:
      - input: ref('stg')
        rows: [{order_id: 1, total: 1.5}, {order_id: 3}]
      - input: this
        format: sql
        rows: "select 2 as order_id, 9 as total"
    expect:
      rows: [{order_id: 3, total: null}]
"""
    result = compiled(make_project, tests)
    assert not result.errors, [str(f) for f in result.errors]
    node = result.graph.nodes["test:only_new_orders"]
    sql = node.sql or ""
    assert sql.startswith("WITH `__unit_given_0` AS (SELECT CAST(1 AS BIGINT) AS `order_id`")
    assert "`__unit_given_1` AS (SELECT 2 AS order_id, 9 AS total)" in sql
    assert "FROM `__unit_given_0` AS stg WHERE" in sql
    assert "(SELECT MAX(order_id) FROM `__unit_given_1` AS inc)" in sql  # is_incremental()
    assert node.depends_on == [] and node.config["expect_rows"] == [{"order_id": 3, "total": None}]
    chosen = analyze_dir(result.project.root, select=("inc",)).chosen
    assert "test:only_new_orders" in chosen  # selected with the model it tests


def test_an_input_the_model_reads_must_be_given(make_project):
    tests = """
unit_tests:
  - name: half
    model: inc
    given: []
    expect: {rows: []}
  - name: from_a_file
    model: inc
    given:
      - input: ref('stg')
        fixture: orders_fixture
    expect: {rows: []}
"""
    said = sorted(str(f) for f in compiled(make_project, tests).errors)
    assert said == [
        "models/inc.yml:2:5: error: unit test half: inc reads model:stg; give its rows under "
        "given: [RV001]",
        "models/inc.yml:9:9: error: fixture: needs format: csv or sql (a dict fixture is not a "
        "file) [RV001]",
    ]


def test_fixture_files_give_rows_and_a_missing_one_is_named(make_project):
    tests = """
unit_tests:
  - name: from_files
    model: inc
    given:
      - input: ref('stg')
        format: csv
        fixture: stg_rows
    expect:
      format: sql
      fixture: expected_rows
  - name: misspelt
    model: inc
    given:
      - {input: ref('stg'), format: csv, fixture: stg_row}
    expect: {rows: []}
"""
    root = make_project(
        {
            "models/inc.sql": INCREMENTAL,
            "models/inc.yml": tests,
            "tests/fixtures/stg_rows.csv": "order_id,total\n1,2.5\n2,\n",
            "tests/fixtures/deeper/expected_rows.sql": "select 1 as order_id, 2.5 as total\n",
        }
    )
    result = analyze_dir(root)
    assert [str(f) for f in result.errors] == [
        "models/inc.yml:14:10: error: fixture 'stg_row': no stg_row.csv in tests/fixtures/, did "
        "you mean 'stg_rows'? [RV001]"
    ]
    node = result.graph.nodes["test:from_files"]
    assert "SELECT CAST('1' AS BIGINT) AS `order_id`" in (node.sql or "")
    assert node.config["expect_sql"] == "select 1 as order_id, 2.5 as total\n"
    assert not [n for n in result.graph.nodes if "expected_rows" in n]  # not a singular test


def test_a_model_cte_named_like_its_input_keeps_reading_the_given_rows(make_project):
    model = "with stg as (select * from {{ ref('stg') }})\nselect order_id from stg\n"
    tests = """
unit_tests:
  - name: same_name
    model: shadow
    given: [{input: "ref('stg')", rows: [{order_id: 1}]}]
    expect: {rows: [{order_id: 1}]}
"""
    root = make_project({"models/shadow.sql": model, "models/shadow.yml": tests})
    sql = analyze_dir(root).graph.nodes["test:same_name"].sql or ""
    assert "stg AS (SELECT * FROM `__unit_given_0` AS stg) SELECT order_id FROM stg" in sql
