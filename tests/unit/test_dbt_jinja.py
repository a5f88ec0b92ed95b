"""dbt's Jinja surface without a JVM: return(), {% do %}, {% test %} blocks, packages as
namespaces, adapter.dispatch's search order, dbt.* macros in Spark SQL, and `rivc deps` for local
and git packages (a file:// repository: git without a network)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rivc.compiler.dbt.jinja import macro_blocks
from rivc_testing import analyze_dir, rivc

PACKAGE = {
    "dbt_packages/kit/dbt_project.yml": "name: kit\nmacro-paths: [macros]\n",
    "dbt_packages/kit/macros/kit.sql": """
{% macro cols(names) %}
    {%- set out = [] -%}
    {%- for n in names -%}{%- do out.append(_wrap(n)) -%}{%- endfor -%}
    {{ return(out) }}
{% endmacro %}
{% macro _wrap(name) %}{{ return('coalesce(' ~ name ~ ', 0)') }}{% endmacro %}
{% macro ratio(a, b) %}{{ return(adapter.dispatch('ratio', 'kit')(a, b)) }}{% endmacro %}
{% macro default__ratio(a, b) %}{{ a }} / nullif({{ b }}, 0){% endmacro %}
{% macro spark__ratio(a, b) %}try_divide({{ a }}, {{ b }}){% endmacro %}
{% macro uses_undefined() %}[{{ not_set_anywhere }}]{% endmacro %}
{% macro days_between(a, b) %}
    {%- call statement('days', fetch_result=True) %}
        select {{ dbt.datediff(a, b, 'day') }}
    {%- endcall -%}
    {{ return(load_result('days')['data'][0][0]) }}
{% endmacro %}
{% materialization table, adapter='spark' %}ignored{% endmaterialization %}
{% test at_least(model, column_name, value) %}
select * from {{ model }} where {{ column_name }} < {{ value }}
{% endtest %}
""",
}


def project(make_project, model: str, **files: str) -> Path:
    return make_project({**PACKAGE, "models/m.sql": model, **files})


def test_package_macros_return_values_and_dispatch_to_spark_first(make_project):
    model = (
        "select {{ kit.cols(['total', 'customer_id']) | join(', ') }},\n"
        "  {{ kit.ratio('total', 'customer_id') }} as r,\n"
        "  {{ dbt.date_trunc('day', 'current_timestamp()') }} as d,\n"
        "  {{ dbt.hash(dbt.concat(['customer_id', \"'-'\"])) }} as h,\n"
        "  '{{ kit.uses_undefined() | trim }}' as u\n"
        "from {{ ref('stg') }}\n"
    )
    compiled = analyze_dir(project(make_project, model))
    assert not compiled.errors, [str(f) for f in compiled.errors]
    sql = compiled.graph.nodes["model:m"].sql or ""
    assert "coalesce(total, 0), coalesce(customer_id, 0)" in sql  # a list came back
    assert "try_divide(total, customer_id) as r" in sql  # spark__ before default__
    assert "date_trunc('day', current_timestamp()) as d" in sql
    assert "md5(cast(concat(customer_id, '-') as string)) as h" in sql
    assert "'[]' as u" in sql  # in a macro, as in dbt, an undefined name prints nothing


def test_the_root_project_overrides_a_package_by_dispatch(make_project):
    model = "select {{ kit.ratio('total', 'customer_id') }} as r from {{ ref('stg') }}\n"
    root = project(
        make_project,
        model,
        **{
            "macros/mine.sql": "{% macro spark__ratio(a, b) %}{{ a }} * 1.0 / {{ b }}{% endmacro %}"
        },
    )
    assert "total * 1.0 / customer_id as r" in (analyze_dir(root).graph.nodes["model:m"].sql or "")


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("select {{ kit.nope() }} from {{ ref('stg') }}\n", "kit.nope: no such macro in 'kit'"),
        (
            "select {{ missing_pkg.x() }} from {{ ref('stg') }}\n",
            "'missing_pkg' is undefined: not a macro",
        ),
        (
            "select {{ run_query('select * from stg') }} from {{ ref('stg') }}\n",
            "run_query reads 'stg' while compiling; rivc compiles offline",
        ),
        (
            "select {{ adapter.dispatch('nothing', 'kit')() }} from {{ ref('stg') }}\n",
            "no macro 'nothing' in t, kit",
        ),
    ],
)
def test_what_rivc_cannot_render_is_one_error_at_the_model(make_project, model, said):
    (error,) = analyze_dir(project(make_project, model)).errors
    assert error.location is not None and str(error.location.path) == "models/m.sql"
    assert said in str(error)


def test_generic_tests_from_packages_and_the_project(make_project):
    props = """
        models:
          - name: stg
            columns:
              - name: total
                tests:
                  - kit.at_least: {value: 0}
                  - over_zero
    """
    root = project(
        make_project,
        "select 1 as x from {{ ref('stg') }}\n",
        **{
            "models/stg.yml": props,
            "tests/generic/over_zero.sql": "{% test over_zero(model, column_name) %}\n"
            "select * from {{ model }} where {{ column_name }} <= 0\n{% endtest %}\n",
        },
    )
    nodes = analyze_dir(root).graph.nodes
    assert "where total < 0" in (nodes["test:kit_at_least_stg_total__0"].sql or "")
    assert "where total <= 0" in (nodes["test:over_zero_stg_total"].sql or "")
    assert "test:over_zero" not in nodes  # tests/generic/ holds macros, not singular tests


def test_macro_blocks_keep_their_lines_and_name_tests_test_x():
    text = "\n\n{% test t(model) %}\nselect 1\n{% endtest %}\n{%- macro m() -%}x{%- endmacro -%}"
    blocks = dict(macro_blocks("a.sql", text))
    assert sorted(blocks) == ["m", "test_t"]
    assert blocks["test_t"].startswith("\n\n{% macro test_t(model) %}")
    assert blocks["test_t"].endswith("{% endmacro %}")


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_deps_installs_local_and_git_packages_and_names_what_it_cannot_fetch(
    make_project, tmp_path
):
    repo = tmp_path / "remote_kit"
    (repo / "macros").mkdir(parents=True)
    (repo / "dbt_project.yml").write_text("name: remote_kit\n")
    (repo / "macros" / "k.sql").write_text("{% macro one() %}1{% endmacro %}\n")
    _git("init", "-q", "-b", "main", cwd=repo)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "add", ".", cwd=repo)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "v1", cwd=repo)
    _git("tag", "1.0.0", cwd=repo)
    (repo / "macros" / "k.sql").write_text("{% macro one() %}2{% endmacro %}\n")
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "v2", cwd=repo)
    packages = (
        "packages:\n"
        "  - local: vendored/kit\n"
        f"  - git: 'file://{repo}'\n"
        "    revision: 1.0.0\n"
        "  - git: 'file:///nowhere/at/all.git'\n"
    )
    root = make_project(
        {
            "packages.yml": packages,
            **{f"vendored/kit/{k.split('/', 2)[2]}": v for k, v in PACKAGE.items()},
            "models/m.sql": "select {{ remote_kit.one() }} as one from {{ ref('stg') }}\n",
        }
    )
    result = rivc(root, "deps")
    assert result.exit_code == 1
    assert "installed kit (local: vendored/kit)" in result.output
    assert f"installed remote_kit (git: file://{repo})" in result.output
    assert "packages.yml:5: cannot fetch file:///nowhere/at/all.git" in result.output
    assert (root / "dbt_packages/kit").is_symlink()
    assert not (root / "dbt_packages/remote_kit/.git").exists()
    sql = analyze_dir(root).graph.nodes["model:m"].sql or ""
    assert "select 1 as one" in sql  # the tagged revision, not the newest commit


def test_a_query_that_reads_no_table_runs_while_compiling(make_project):
    """dbt_utils.date_spine asks the warehouse how many days lie between two dates: rivc
    answers such queries in process (DuckDB), so the spine compiles offline."""
    model = (
        "select {{ kit.days_between(\"cast('2024-01-01' as date)\", \"cast('2024-03-01' as date)\") }}"
        " as n,\n  {{ run_query('select 2 as two').columns[0].values()[0] }} as two\n"
        "from {{ ref('stg') }}\n"
    )
    sql = analyze_dir(project(make_project, model)).graph.nodes["model:m"].sql or ""
    assert "select 60 as n" in sql and "2 as two" in sql


def test_dbt_configs_that_place_tables_are_accepted_in_a_model(make_project):
    model = (
        "{{ config(materialized='table', schema='marts', alias='m2', post_hook='grant x',"
        " persist_docs={'relation': true}) }}\nselect 1 as x from {{ ref('stg') }}\n"
    )
    compiled = analyze_dir(project(make_project, model))
    assert not compiled.errors, [str(f) for f in compiled.errors]
    assert compiled.graph.nodes["model:m"].config["materialized"] == "table"
    # named as dbt-spark names it: <target schema>_<custom schema>.<alias> (dbt/naming.py)
    placed = compiled.graph.nodes["model:m"].placed
    assert placed is not None and placed.relation_name == "default_marts.m2"


def test_two_relations_of_one_name_and_a_failing_naming_macro_are_errors_at_their_models(
    make_project,
):
    """dbt refuses two nodes its naming gives one relation; a project's generate_*_name that
    fails is an error at each node it names, never a silent default."""
    clash = "{{ config(materialized='table', alias='m') }}\nselect 2 as x from {{ ref('stg') }}\n"
    compiled = analyze_dir(
        project(make_project, "select 1 as x from {{ ref('stg') }}\n", **{"models/n.sql": clash})
    )
    found = [str(f) for f in compiled.errors if "both named" in str(f)]
    assert found and "default.m" in found[0] and "give one another alias or schema" in found[0]

    broken = (
        "{% macro generate_alias_name(custom_alias_name=none, node=none) %}"
        "{{ exceptions.raise_compiler_error('no alias for ' ~ node.name) }}{% endmacro %}\n"
    )
    compiled = analyze_dir(
        project(
            make_project,
            "select 1 as x from {{ ref('stg') }}\n",
            **{"macros/naming.sql": broken},
        )
    )
    errors = [str(f) for f in compiled.errors if "generate_*_name" in str(f)]
    assert any(e.startswith("models/m.sql") and "no alias for m" in e for e in errors), errors


def test_a_profiles_schema_is_target_schema_and_names_the_relations(make_project):
    root = project(
        make_project,
        "{{ config(materialized='table', schema='marts') }}\n"
        "select '{{ target.schema }}' as s from {{ ref('stg') }}\n",
        **{"profiles.yml": "default:\n  target: dev\n  outputs:\n    dev: {schema: analytics}\n"},
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    node = compiled.graph.nodes["model:m"]
    assert "'analytics' as s" in (node.sql or "")
    assert node.placed is not None and node.placed.relation_name == "analytics_marts.m"


COLUMNS_MACROS = {
    "macros/cols.sql": """
{% macro all_but(relation, skip) %}
    {%- do _needs_relation(relation) -%}
    {%- set names = [] -%}
    {%- for col in adapter.get_columns_in_relation(relation) if col.column not in skip -%}
        {%- do names.append(adapter.quote(col.column) ~ ' /* ' ~ col.data_type ~ ' */') -%}
    {%- endfor -%}
    {{ return(names | join(', ')) }}
{% endmacro %}
{% macro _needs_relation(obj) %}
    {%- if not (obj is mapping and obj.get('metadata', {}).get('type', '').endswith('Relation')) -%}
        {%- do exceptions.raise_compiler_error('not a relation: ' ~ obj) -%}
    {%- endif -%}
{% endmacro %}
{% macro distinct_values(relation, column) %}
    {%- set rows = run_query('select distinct ' ~ column ~ ' from ' ~ relation ~ ' order by 1') -%}
    {{ return(rows.columns[0].values() | list) }}
{% endmacro %}
{% test same_count(model, compare_model) %}
{{ config(fail_calc='max(diff)', severity='warn') }}
select abs((select count(*) from {{ model }}) - (select count(*) from {{ compare_model }})) as diff
{% endtest %}
""",
    "seeds/codes.csv": "code,label,rate\n1,a,1.50\n2,b,\n3,b,0.25\n",
}


def test_a_macro_reads_the_columns_of_seeds_sources_and_models_at_compile(make_project):
    """dbt_utils.star's way: adapter.get_columns_in_relation answers from compile's columns,
    a model asking for another model's is rendered once they are resolved."""
    files = {
        **COLUMNS_MACROS,
        "models/wide.sql": "select s.*, c.label from {{ ref('stg') }} s join {{ ref('codes') }} c on c.code = s.order_id\n",
        "models/narrow.sql": "select {{ all_but(ref('wide'), ['label']) }} from {{ ref('wide') }}\n",
        "models/from_seed.sql": "select {{ all_but(ref('codes'), []) }} from {{ ref('codes') }}\n",
        "models/from_source.sql": "select {{ all_but(source('demo', 'orders'), ['total']) }} from {{ source('demo', 'orders') }}\n",
    }
    compiled = analyze_dir(make_project(files))
    assert not compiled.errors, [str(f) for f in compiled.errors]
    nodes = compiled.graph.nodes
    assert (nodes["model:from_seed"].sql or "").startswith(
        "select `code` /* int */, `label` /* string */, `rate` /* decimal(3,2) */ from"
    )
    assert "`product` /* string */, `quantity` /* int */, `status`" in (
        nodes["model:from_source"].sql or ""
    )
    narrow = nodes["model:narrow"]
    assert (
        "`order_id` /* bigint */, `customer_id` /* bigint */, `total` /* decimal(10,2) */ from"
        in (narrow.sql or "")
    )
    assert narrow.depends_on == ["model:wide"] and narrow.columns == {
        "order_id": "bigint",
        "customer_id": "bigint",
        "total": "decimal(10,2)",
    }
    # the same answers from the compile cache, and a model that is not a relation is refused
    files["models/bad.sql"] = "select {{ all_but('wide', []) }} from {{ ref('wide') }}\n"
    (error,) = analyze_dir(make_project(files)).errors
    assert "not a relation: wide" in str(error)


def test_a_query_of_a_seed_runs_while_compiling_and_test_configs_come_from_the_macro(make_project):
    props = """
        models:
          - name: labels
            data_tests:
              - same_count: {compare_model: "ref('codes')"}
              - same_count:
                  compare_model: ref('stg')
                  error_if: ">100"
                  severity: error
    """
    files = {
        **COLUMNS_MACROS,
        "models/labels.sql": "{% for v in distinct_values(ref('codes'), 'label') %}select '{{ v }}' as label{% if not loop.last %} union all {% endif %}{% endfor %}\n",
        "models/labels.yml": props,
    }
    compiled = analyze_dir(make_project(files))
    assert not compiled.errors, [str(f) for f in compiled.errors]
    nodes = compiled.graph.nodes
    assert nodes["model:labels"].sql == "select 'a' as label union all select 'b' as label\n"
    first, second = (n for n in nodes.values() if n.kind == "test" and "same_count" in n.name)
    assert (first.config["fail_calc"], first.config["severity"]) == ("max(diff)", "warn")
    assert (second.config["severity"], second.config["error_if"]) == ("error", ">100")
    assert second.depends_on == ["model:labels", "model:stg"]


def test_information_schema_tables_lists_the_projects_relations_by_dbt_name():
    """run_query of information_schema.tables at compile reads the listing (any catalog before
    it, as dbt_utils renders `None.information_schema.tables` on dbt-spark); its rows are read
    by column name, as agate's are."""
    from rivc.compiler.dbt.jinja import run_query

    told: list[bool] = []
    listing = (
        ("analytics", "orders", "BASE TABLE", "orders"),
        ("analytics_raw", "raw_orders", "BASE TABLE", "raw_orders"),
        ("analytics", "stg_orders", "VIEW", "stg_orders"),
    )
    table = run_query(
        "select table_schema, table_name, table_type from None.information_schema.tables "
        "where table_schema ilike 'analytics%' and table_name ilike '%orders' "
        "and table_name not ilike 'stg%' order by table_name",
        (),
        listing,
        lambda: told.append(True),
    )
    assert told == [True]
    assert [(r.table_schema, r["table_name"], r[2]) for r in table] == [
        ("analytics", "orders", "BASE TABLE"),
        ("analytics_raw", "raw_orders", "BASE TABLE"),
    ]
    assert run_query("select 1 as x", (), listing, lambda: told.append(False)).rows == [(1,)]
    assert told == [True]


def test_a_models_literal_config_arguments_are_read_without_rendering_it():
    from rivc.compiler.nodes.models import literal_config

    text = "{{ config(materialized='table', alias='x', schema=var('s'), tags=['a']) }}\nselect 1"
    assert literal_config(text) == {"materialized": "table", "alias": "x"}
    assert literal_config("{{ config(alias='x' }}") == {}  # its render says why
