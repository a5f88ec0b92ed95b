from __future__ import annotations

from pathlib import Path

import pytest

from rivc.compiler.errors import GraphError, RenderError
from rivc.compiler.rendering.render import RenderContext, Renderer
from rivc_testing import analyze_dir, only


def _renderer(macros: tuple[tuple[str, str], ...] = ()) -> Renderer:
    ctx = RenderContext(
        frozenset({"a", "b"}), frozenset({"s.t"}), {"x": 5}, {"HOME_X": "h"}, macros
    )
    return Renderer(ctx)


def test_fast_and_jinja_paths_agree():
    text = (
        "{{ config(materialized='table', tags=['x']) }}select * from {{ ref('a') }} "
        "join {{ source('s', 't') }} where n = {{ var('x') }}\n"
    )
    fast = _renderer().render("m", Path("models/m.sql"), text)
    slow = _renderer().render("m", Path("models/m.sql"), "{# force jinja #}" + text)
    assert fast.sql == slow.sql == "select * from `a` join `s__t` where n = 5\n"
    assert fast.refs == slow.refs == ["a"] and fast.sources == slow.sources == ["s.t"]
    assert fast.config["materialized"][0] == slow.config["materialized"][0] == "table"


def test_is_incremental_and_this():
    text = "select 1 as x from {{ ref('a') }}\n{% if is_incremental() %}where x > (select max(x) from {{ this }}){% endif %}"
    r = _renderer()
    assert "where" not in r.render("m", Path("m.sql"), text, False).sql
    inc = r.render("m", Path("m.sql"), text, True)
    assert inc.uses_is_incremental and "from `m`" in inc.sql


def test_macros_env_var_and_var_default():
    r = _renderer((("macros/m.sql", "{% macro twice(c) %}{{ c }} * 2{% endmacro %}"),))
    out = r.render(
        "m",
        Path("m.sql"),
        "select {{ twice('n') }}, '{{ env_var('HOME_X') }}', {{ var('missing', 7) }}",
    )
    assert out.sql == "select n * 2, 'h', 7" and out.env_used == {"HOME_X": "h"}


@pytest.mark.parametrize(
    "text,cls,line",
    [
        ("select 1\nfrom {{ ref('nope') }}", GraphError, 2),
        ("select 1\n\n{% if x %}", RenderError, 3),
        ("select {{ var('nope') }}", RenderError, 1),
        ("{% set y = 1 %}\nselect {{ undefined_thing }}", RenderError, 2),
        ("select 1\n{{ config(materialised='table') }}", RenderError, 2),
        ("select '{{ env_var('NOT_SET_X') }}'", RenderError, 1),
    ],
)
def test_errors_carry_file_and_line(text, cls, line):
    with pytest.raises(cls) as info:
        _renderer().render("m", Path("models/m.sql"), text)
    assert info.value.location.path == Path("models/m.sql")
    assert info.value.location.line == line


def test_unknown_ref_suggests_and_reports_in_compile(make_project):
    root = make_project({"models/m.sql": "select 1 as x\nfrom {{ ref('stgg') }}\n"})
    f = only(analyze_dir(root).findings, "RV002")
    assert isinstance(f.error, GraphError)
    assert (f.location.path.as_posix(), f.location.line) == ("models/m.sql", 2)
    assert "'stg'" in f.error.message


def test_config_precedence(make_project):
    root = make_project(
        {
            "rivc_project.yml": "name: t\ndefaults: {materialized: table, tags: [p]}\n",
            "models/props.yml": "models:\n  - name: stg\n    config: {materialized: view}\n",
            "models/inc.sql": "{{ config(materialized='incremental', unique_key='order_id') }}"
            "select order_id from {{ ref('stg') }}\n",
        }
    )
    nodes = analyze_dir(root).graph.nodes
    assert nodes["model:stg"].config["materialized"] == "view"
    assert nodes["model:stg"].tags == ("p",)
    assert nodes["model:inc"].config["materialized"] == "incremental"
    assert nodes["model:inc"].config["unique_key"] == ["order_id"]


def test_vars_override(make_project):
    root = make_project({"models/m.sql": "select {{ var('v') }} as v from {{ ref('stg') }}\n"})
    assert "select 1 as v" in analyze_dir(root).graph.nodes["model:m"].sql
    assert "select 9 as v" in analyze_dir(root, vars={"v": 9}).graph.nodes["model:m"].sql
