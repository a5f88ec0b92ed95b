"""dbt_project.yml read as it is: folders, vars, per-folder configs (with or without `+`, tags
adding up, Jinja in values), enabled: false, and dbt's keys rivc leaves alone; a key neither
knows is an error at its line."""

from __future__ import annotations

import pytest

from rivc.compiler.errors import CompileFailed, ProjectError
from rivc.compiler.loading.locate import find_project_root
from rivc_testing import analyze_dir, findings

DBT_PROJECT = """
name: shop
config-version: 2
version: '1.0'
profile: shop
model-paths: ["transform"]
seed-paths: ["data"]
clean-targets: [target, dbt_packages]
require-dbt-version: ">=1.5.0"
dbt-cloud: {project-id: 1}
vars:
  fast: true
  shop: {scoped: 7}
  other_package: {hidden: 1}
  "dbt_date:time_zone": UTC
models:
  +tags: [all]
  shop:
    materialized: table
    staging:
      +materialized: view
      +tags: staging
      +schema: ignored_by_rivc
      stg_b:
        +enabled: "{{ var('fast', false) == false }}"
seeds:
  shop:
    +schema: raw
    extra:
      +enabled: "{{ var('load_extra', false) }}"
"""


def dbt_project(make_project, files: dict[str, str]):
    return make_project(
        {
            "dbt_project.yml": DBT_PROJECT,
            "transform/staging/stg_a.sql": "select {{ var('scoped') }} as n, '{{ var('dbt_date:time_zone') }}' as tz\n",
            "transform/staging/stg_b.sql": "select 1 as n\n",
            "transform/marts/m.sql": "select n from {{ ref('stg_a') }}\n",
            "data/codes.csv": "code\n1\n",
            "data/extra/more.csv": "code\n2\n",
            **files,
        },
        base=False,
    )


def test_folders_vars_and_per_folder_configs_apply_as_in_dbt(make_project):
    root = dbt_project(make_project, {})
    assert find_project_root(root / "transform") == root.resolve()
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    nodes = compiled.graph.nodes
    stg, mart = nodes["model:stg_a"], nodes["model:m"]
    assert (stg.config["materialized"], mart.config["materialized"]) == ("view", "table")
    assert (stg.tags, mart.tags) == (("all", "staging"), ("all",))  # tags add up
    assert "7 as n" in (stg.sql or "") and "'UTC'" in (stg.sql or "")
    assert "model:stg_b" not in nodes  # enabled: false, rendered from a var
    assert "seed:codes" in nodes and "seed:more" not in nodes  # a disabled folder of seeds
    assert compiled.project.spec.vars == {"fast": True, "dbt_date:time_zone": "UTC", "scoped": 7}


def test_a_ref_to_a_disabled_model_is_an_error_at_the_model(make_project):
    root = dbt_project(
        make_project, {"transform/marts/n.sql": "select * from {{ ref('stg_b') }}\n"}
    )
    (error,) = analyze_dir(root).errors
    assert error.location is not None and str(error.location.path) == "transform/marts/n.sql"
    assert "ref('stg_b'): that model is disabled" in str(error)


@pytest.mark.parametrize(
    ("edit", "said", "line"),
    [
        ("      +materialised: view\n", "unknown model config '\\+materialised', did you mean", 20),
        ("", "unknown key 'modles' in dbt_project.yml", 30),
        ("", "model-paths: rivc reads one folder of each kind, got 2", 5),
    ],
)
def test_a_key_neither_dbt_nor_rivc_knows_is_an_error_at_its_line(make_project, edit, said, line):
    text = DBT_PROJECT
    if "materialised" in said:
        text = text.replace("      +materialized: view\n", edit)
    elif "modles" in said:
        text += "modles: {}\n"
    else:
        text = text.replace('["transform"]', '["transform", "more"]')
    root = dbt_project(make_project, {"dbt_project.yml": text})
    with pytest.raises(ProjectError, match=said) as caught:
        analyze_dir(root)
    assert caught.value.location is not None
    assert (str(caught.value.location.path), caught.value.location.line) == (
        "dbt_project.yml",
        line,
    )


def test_rivc_project_yml_wins_over_dbt_project_yml(make_project):
    root = make_project({"dbt_project.yml": DBT_PROJECT})  # beside the base rivc_project.yml
    compiled = analyze_dir(root)
    assert compiled.project.name == "t"


def test_a_seed_config_of_a_folder_is_checked(make_project):
    text = DBT_PROJECT.replace("    +schema: raw\n", "    +delimiter: ';;'\n")
    root = dbt_project(make_project, {"dbt_project.yml": text})
    with pytest.raises(CompileFailed, match="seed codes: config delimiter"):
        from rivc.compiler import compile_project

        compile_project(root, env={})


def test_dbt_resources_rivc_does_not_run_are_read_with_one_note_each(make_project):
    props = """
version: 2
groups:
  - name: finance
exposures:
  - name: dashboard
semantic_models:
  - name: orders
"""
    root = dbt_project(make_project, {"transform/marts/more.yml": props})
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    notes = sorted(
        (f.location.line, f.error.message) for f in compiled.warnings if f.rule == "RV012"
    )
    assert notes == [
        (2, "groups: groups (access control between models) are not enforced"),
        (4, "exposures: exposures are documentation only"),
        (6, "semantic_models: the semantic layer is not run"),
    ]


DBT_SOURCES = """
version: 2
sources:
  - name: ecom
    schema: raw
    loaded_at_field: loaded_at
    freshness: {warn_after: {count: 12, period: hour}}
    tables:
      - name: orders
        columns:
          - name: id
            data_type: integer
            data_tests: [unique, not_null]
          - name: note
            data_type: varchar(20)
      - name: events
        identifier: web_events
        columns:
          - {name: kind, description: only some columns are listed}
      - name: lake
        external: {location: lake/orders}
        config: {event_time: updated_at}
        data_tests:
          - dbt_utils.expression_is_true: {expression: "id > 0"}
  - name: files
    database: main
    config: {event_time: clicked_at}
    tables:
      - name: clicks
        external: {location: landing/clicks, file_format: parquet}
"""


def test_dbt_sources_are_tables_read_in_place(make_project):
    model = (
        "select o.id, o.note, e.kind, l.id as lake_id, c.url\n"
        "from {{ source('ecom', 'orders') }} o\n"
        "join {{ source('ecom', 'events') }} e on e.id = o.id\n"
        "join {{ source('ecom', 'lake') }} l on l.id = o.id\n"
        "join {{ source('files', 'clicks') }} c on c.id = o.id\n"
    )
    root = dbt_project(
        make_project,
        {"transform/staging/sources.yml": DBT_SOURCES, "transform/marts/uses.sql": model},
    )
    (root / "macros").mkdir(exist_ok=True)
    (root / "macros" / "expression_is_true.sql").write_text(
        "{% test expression_is_true(model, expression) %}\n"
        "select * from {{ model }} where not ({{ expression }})\n{% endtest %}\n"
    )
    text = (root / "transform/staging/sources.yml").read_text()
    (root / "transform/staging/sources.yml").write_text(text.replace("dbt_utils.", ""))
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    assert not [f for f in compiled.warnings if f.rule == "RV012"]
    nodes = compiled.graph.nodes
    facts = {
        n: nodes[f"source:{n}"].facts
        for n in ("ecom.orders", "ecom.events", "ecom.lake", "files.clicks")
    }
    assert {n: (f.connector, f.table["config"]) for n, f in facts.items()} == {
        "ecom.orders": ("table", {"name": "raw.orders"}),
        "ecom.events": ("table", {"name": "raw.web_events"}),
        "ecom.lake": ("delta", {"table_uri": "lake/orders"}),
        "files.clicks": ("files", {"path": "landing/clicks", "format": "parquet"}),
    }
    # every column typed: known at compile, in Spark's types; a partial list: unknown
    assert nodes["source:ecom.orders"].columns == {"id": "int", "note": "string"}
    assert nodes["source:ecom.events"].columns is None
    # dbt's event_time, a table's over its source's: what a microbatch model filters it on
    assert {n: nodes[f"source:{n}"].config.get("event_time") for n in facts} == {
        "ecom.orders": None,
        "ecom.events": None,
        "ecom.lake": "updated_at",
        "files.clicks": "clicked_at",
    }
    assert facts["ecom.orders"].freshness == {
        "loaded_at_field": "loaded_at",
        "freshness": {"warn_after": {"count": 12, "period": "hour"}},
    }
    uses = nodes["model:uses"]
    assert sorted(uses.depends_on) == [
        "source:ecom.events",
        "source:ecom.lake",
        "source:ecom.orders",
        "source:files.clicks",
    ]
    tests = {n.name: n for n in nodes.values() if n.kind == "test"}
    assert {
        "source_unique_ecom_orders_id",
        "source_not_null_ecom_orders_id",
        "source_expression_is_true_ecom_lake_id_0",
    } <= set(tests)
    assert tests["source_unique_ecom_orders_id"].depends_on == ["source:ecom.orders"]
    assert "`ecom__orders`" in (tests["source_not_null_ecom_orders_id"].sql or "")


def test_a_dbt_source_column_a_model_misspells_is_caught_when_its_columns_are_typed(make_project):
    model = "select o.idd from {{ source('ecom', 'orders') }} o\n"
    root = dbt_project(
        make_project,
        {
            "transform/staging/sources.yml": DBT_SOURCES.split("      - name: lake")[0],
            "transform/marts/uses.sql": model,
        },
    )
    compiled = analyze_dir(root)
    assert [f.error.message for f in compiled.errors] == [
        "unknown column 'idd', did you mean 'id'?"
    ]


@pytest.mark.parametrize(
    ("external", "said"),
    [
        ("{file_format: delta}", "dbt source ecom.orders: external needs location:"),
        ("{location: x, file_format: orc}", "file_format 'orc' is not read"),
    ],
)
def test_a_dbt_source_rivc_cannot_read_is_refused_at_its_line(make_project, external, said):
    props = f"version: 2\nsources:\n  - name: ecom\n    tables:\n      - name: orders\n        external: {external}\n"
    root = dbt_project(make_project, {"transform/staging/sources.yml": props})
    with pytest.raises(CompileFailed, match=said) as caught:
        analyze_dir(root)
    (error,) = caught.value.errors
    assert error.location is not None
    assert (str(error.location.path), error.location.line) == ("transform/staging/sources.yml", 6)


def test_a_dbt_source_loaded_by_a_seed_reads_the_seed(make_project):
    props = """
version: 2
sources:
  - name: ecom
    schema: raw
    tables:
      - name: raw_codes
        identifier: codes
        config: {event_time: code}
"""
    model = "select code from {{ source('ecom', 'raw_codes') }}\n"
    root = dbt_project(
        make_project, {"transform/staging/sources.yml": props, "transform/marts/uses.sql": model}
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    uses = compiled.graph.nodes["model:uses"]
    assert uses.depends_on == ["seed:codes"] and "from `codes`" in (uses.sql or "")
    assert uses.columns == {"code": "int"}
    # the source's event_time is the seed's, which has none of its own
    assert compiled.graph.nodes["seed:codes"].config["event_time"] == "code"


@pytest.mark.parametrize(
    ("target", "remote", "said"),
    [
        (
            "{type: spark, method: session, host: NA, schema: analytics, threads: 4,"
            " server_side_parameters: {spark.sql.shuffle.partitions: '4'}}",
            None,
            None,
        ),
        (
            "{type: spark, method: session, host: 'sc://spark.example:15002', schema: a,"
            " warehouse: 's3://lake/wh'}",
            "sc://spark.example:15002",
            None,
        ),
        (
            "{type: spark, method: thrift, host: spark.example, port: 10001, schema: a}",
            None,
            "method 'thrift': rivc reaches Spark through PySpark",
        ),
        ("{type: duckdb, path: shop.duckdb}", None, "a dbt target of type 'duckdb'"),
    ],
)
def test_a_dbt_spark_target_maps_to_rivcs_profile(make_project, target, remote, said):
    from rivc.compiler.loading.profiles import load_profile

    profiles = f"shop:\n  target: dev\n  outputs:\n    dev: {target}\n"
    root = dbt_project(make_project, {"profiles.yml": profiles})
    if said:
        with pytest.raises(ProjectError, match=said) as caught:
            load_profile(root, "shop", {})
        assert caught.value.location is not None and caught.value.location.line == 4
        return
    spec, _, chosen = load_profile(root, "shop", {})
    assert chosen == "dev" and spec.spark.remote == remote
    if remote is None:
        assert spec.spark.conf == {"spark.sql.shuffle.partitions": "4"}
        assert spec.threads == 4  # --threads' default
    else:
        assert spec.warehouse == "s3://lake/wh"


def test_snapshot_blocks_are_models_materialized_as_snapshots(make_project):
    snapshot = (
        "-- history of the orders\n"
        "{% snapshot orders_history %}\n"
        "{{ config(unique_key='code', strategy='check', check_cols='all', target_schema='s') }}\n"
        "select code from {{ ref('codes') }}\n"
        "{% endsnapshot %}\n"
    )
    text = DBT_PROJECT + "snapshots:\n  shop:\n    +tags: [history]\n"
    root = dbt_project(make_project, {"dbt_project.yml": text, "snapshots/orders.sql": snapshot})
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    node = compiled.graph.nodes["model:orders_history"]
    assert node.config["materialized"] == "snapshot" and node.config["check_cols"] == "all"
    assert node.tags == ("history",)  # from the snapshots: tree, not the models: one
    assert node.depends_on == ["seed:codes"] and (node.sql or "").startswith("\n\n\nselect code")
    assert "strategy" not in compiled.graph.nodes["model:m"].config  # only snapshots carry it


@pytest.mark.parametrize(
    ("code", "said", "line"),
    [
        (
            "def model(dbt, session):\n    return dbt.ref('nope')\n",
            "dbt.ref('nope'): no such model",
            2,
        ),
        (
            "def model(dbt, session):\n    name = 'm'\n    return dbt.ref(name)\n",
            "takes literal values",
            3,
        ),
        (
            "def model(dbt, session):\n    dbt.config(materialized='view')\n",
            "materialized as table or incremental",
            2,
        ),
        ("def model(dbt, session)\n    pass\n", "not valid Python", 1),
        ("def transform(df):\n    return df\n", "defines model(dbt, session)", 1),
    ],
)
def test_a_python_model_is_read_without_running_it(make_project, code, said, line):
    root = dbt_project(make_project, {"transform/marts/py.py": code})
    (error,) = analyze_dir(root).errors
    assert said in str(error) and error.location is not None
    assert (str(error.location.path), error.location.line) == ("transform/marts/py.py", line)


def test_a_python_models_refs_and_config_place_it_in_the_dag(make_project):
    code = (
        "def model(dbt, session):\n"
        "    dbt.config(materialized='incremental', unique_key='code')\n"
        "    return dbt.ref('codes').join(dbt.ref('stg_a'), 'n')\n"
    )
    root = dbt_project(
        make_project,
        {
            "transform/marts/py.py": code,
            "transform/marts/after.sql": "select * from {{ ref('py') }}\n",
        },
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    node = compiled.graph.nodes["model:py"]
    assert sorted(node.depends_on) == ["model:stg_a", "seed:codes"]
    assert node.config["materialized"] == "incremental" and node.config["language"] == "python"
    assert compiled.graph.nodes["model:after"].depends_on == ["model:py"]


def test_hooks_are_rendered_as_the_models_and_add_up_across_levels(make_project):
    text = DBT_PROJECT.replace(
        "      +schema: ignored_by_rivc\n", "      +pre-hook: \"set x.level = 'staging'\"\n"
    )
    text += "on-run-start:\n  - \"create database if not exists {{ var('scoped') }}_db;\"\n"
    text += "on-run-end: \"analyze table {{ ref('m') }} compute statistics\"\n"
    model = (
        "{{ config(post_hook=['analyze table {{ this }} compute statistics', "
        "{'sql': 'select 1', 'transaction': false}], pre_hook='set x.model = 1') }}\n"
        "select 1 as n\n"
    )
    root = dbt_project(make_project, {"dbt_project.yml": text, "transform/marts/hooked.sql": model})
    (root / "transform/staging/props.yml").write_text(
        "models:\n  - name: stg_a\n    config:\n      pre_hook: set x.props = 1\n"
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    assert compiled.hooks == {
        "on_run_start": ["create database if not exists 7_db"],
        "on_run_end": ["analyze table `m` compute statistics"],
    }
    nodes = compiled.graph.nodes
    assert nodes["model:stg_a"].config["pre_hook"] == ["set x.level = 'staging'", "set x.props = 1"]
    assert "post_hook" not in nodes["model:stg_a"].config
    assert "pre_hook" not in nodes["model:m"].config  # no hook: nothing in the manifest
    hooked = nodes["model:hooked"].config
    assert hooked["pre_hook"] == ["set x.model = 1"]
    assert hooked["post_hook"] == ["analyze table `hooked` compute statistics", "select 1"]


def test_a_hook_with_a_name_rivc_does_not_have_is_an_error_naming_the_hook(make_project):
    text = DBT_PROJECT + "on-run-end: \"{{ grant_usage_to_schemas(schemas, 'reporter') }}\"\n"
    compiled = analyze_dir(dbt_project(make_project, {"dbt_project.yml": text}))
    (error,) = compiled.errors
    assert error.error.message.startswith("on-run-end: ")
    assert "grant_usage_to_schemas" in error.error.message, error.error.message
    assert str(error.location.path) == "dbt_project.yml"


def test_a_yaml_snapshot_of_a_relation_is_a_snapshot(make_project):
    props = """
snapshots:
  - name: codes_history
    description: every version of the codes
    relation: ref('codes')
    config:
      unique_key: code
      strategy: check
      check_cols: all
      hard_deletes: invalidate
"""
    root = dbt_project(make_project, {"snapshots/history.yml": props})
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    node = compiled.graph.nodes["model:codes_history"]
    assert node.config["materialized"] == "snapshot" and node.config["hard_deletes"] == "invalidate"
    assert node.depends_on == ["seed:codes"] and node.description == "every version of the codes"
    assert (node.sql or "").strip() == "select * from `codes`"
    assert not [f for f in compiled.warnings if "snapshots" in str(f)]  # read, not a note


def test_properties_of_a_missing_model_are_a_note_in_a_dbt_project(make_project):
    props = "models:\n  - name: not_here\n    description: dbt warns and goes on\n"
    compiled = analyze_dir(dbt_project(make_project, {"transform/marts/extra.yml": props}))
    assert not compiled.errors
    (note,) = [f for f in compiled.warnings if "not_here" in f.error.message]
    assert note.rule == "RV012" and note.location is not None and note.location.line == 2


def test_graph_lists_the_projects_nodes_for_macros(make_project):
    macro = """
{% macro staging_models() %}
    {%- set names = [] -%}
    {%- for node in graph.nodes.values() | selectattr("resource_type", "equalto", "model") -%}
        {%- if "staging" in node.tags -%}{%- do names.append(node.name) -%}{%- endif -%}
    {%- endfor -%}
    {{ return(names | sort) }}
{% endmacro %}
"""
    model = (
        "{% for name in staging_models() %}select '{{ name }}' as model"
        "{% if not loop.last %} union all {% endif %}{% endfor %}\n"
    )
    root = dbt_project(
        make_project, {"macros/graph.sql": macro, "transform/marts/listed.sql": model}
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    # stg_b is disabled: not in dbt's graph either
    assert compiled.graph.nodes["model:listed"].sql == "select 'stg_a' as model\n"


def test_jinja_in_test_arguments_is_rendered_and_a_broken_test_is_an_error_at_its_line(
    make_project,
):
    """dbt renders the Jinja in a generic test's arguments (dbt_date's tests call its macros
    there): `expression: "... {{ macro() }}"`, `values: ["{{ var('x', ...) }}"]`; what the
    arguments read is a dependency; a test that cannot compile is an error at its line,
    never dropped."""
    root = dbt_project(
        make_project,
        {
            "macros/my_date.sql": "{% macro my_date() %}date'2020-01-01'{% endmacro %}\n",
            "macros/expression_is_true.sql": "{% test expression_is_true(model, expression) %}\n"
            "select * from {{ model }} where not ({{ expression }})\n{% endtest %}\n",
            "transform/marts/m.yml": """
models:
  - name: m
    data_tests:
      - expression_is_true:
          expression: "n < (select count(*) from {{ ref('stg_a') }}) or {{ my_date() }} < current_date()"
    columns:
      - name: n
        data_tests:
          - accepted_values:
              values: ["{{ var('x', 7) }}", "8"]
""",
        },
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    tests = {n.name: n for n in compiled.graph.nodes.values() if n.kind == "test"}
    expression = next(t for name, t in tests.items() if name.startswith("expression_is_true"))
    assert "date'2020-01-01'" in (expression.sql or "") and "{{" not in (expression.sql or "")
    assert "model:stg_a" in expression.depends_on
    values = next(t for name, t in tests.items() if name.startswith("accepted_values"))
    assert "'7', '8'" in (values.sql or "")

    (root / "transform/marts/m.yml").write_text(
        (root / "transform/marts/m.yml").read_text().replace("my_date()", "no_such_macro()")
    )
    (error,) = analyze_dir(root).errors
    assert str(error.location).startswith("transform/marts/m.yml:4")  # the test
    assert "no_such_macro" in str(error)


def test_dbt_project_yml_sees_target_and_templates_see_pytz(make_project):
    """dbt_date's integration project: `+materialized: "{{ 'ephemeral' if target.name ==
    'trino' else 'table' }}"` in dbt_project.yml, `modules.pytz` in a macro."""
    root = dbt_project(
        make_project,
        {
            "dbt_project.yml": DBT_PROJECT.replace(
                "    materialized: table",
                "    +materialized: \"{{ 'ephemeral' if target.name == 'trino' else 'table' }}\"",
            ),
            "transform/marts/tz.sql": "select '{{ modules.pytz.timezone('Europe/Paris').zone }}' as tz\n",
        },
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    assert compiled.graph.nodes["model:m"].config["materialized"] == "table"
    assert "'Europe/Paris'" in (compiled.graph.nodes["model:tz"].sql or "")


def test_a_package_macro_of_a_leading_underscore_is_reached_through_its_namespace(
    make_project,
):
    """dbt_utils calls `dbt_utils._is_relation(...)`: the sandbox lets a namespace's own macro
    through, never an attribute of a leading underscore of anything else."""
    root = dbt_project(
        make_project,
        {
            "macros/helpers.sql": "{% macro _private() %}42{% endmacro %}\n",
            "transform/marts/p.sql": "select {{ shop._private() }} as n\n",
        },
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    assert "42 as n" in (compiled.graph.nodes["model:p"].sql or "")


def test_documentation_and_semantic_layer_properties_are_accepted(make_project):
    """Model-level meta, docs, access, group, deprecation_date and time_spine, a column's
    granularity and an unenforced contract are dbt properties that change nothing in a build;
    an enforced contract is checked (tests/unit/test_contracts.py): one with no declared
    columns is refused at the model's line."""
    props = """
models:
  - name: m
    meta: {owner: data}
    docs: {show: true}
    access: public
    group: finance
    deprecation_date: 2030-01-01
    config: {contract: {enforced: false}, meta: {tier: 1}}
    time_spine: {standard_granularity_column: n}
    columns:
      - {name: n, granularity: day, data_type: int}
"""
    root = dbt_project(make_project, {"transform/marts/m.yml": props})
    assert [str(f) for f in findings(root) if f.severity == "error"] == []
    root.joinpath("transform/marts/m.yml").write_text(
        props.replace("enforced: false", "enforced: true")
    )
    assert [str(f) for f in findings(root) if f.severity == "error"] == []
    root.joinpath("transform/marts/m.yml").unlink()
    (root / "transform/marts/m.sql").write_text(
        "{{ config(contract={'enforced': true}) }} select 1 as n\n"
    )
    (error,) = [str(f) for f in findings(root) if f.severity == "error"]
    assert "transform/marts/m.sql:1" in error and "its properties declare no columns" in error
