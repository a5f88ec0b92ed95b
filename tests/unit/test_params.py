from __future__ import annotations

import datetime as dt

import pytest
import sqlglot
from sqlglot import exp

from rivc.compiler.dialects import dialect
from rivc.compiler.errors import RenderError
from rivc.compiler.rendering.params import bind, resolve_params
from rivc.compiler.sql import SPARK
from rivc_testing import analyze_dir, only


def test_injection_attempt_stays_one_string_literal():
    params = resolve_params({"region": "eu"}, {"region": "x' OR '1'='1"})
    sql, unbound = bind("select * from t where region = ${region}", params, SPARK)
    assert not unbound
    where = sqlglot.parse_one(sql, read="spark").find(exp.Where)
    literal = where.find(exp.EQ).expression
    assert isinstance(literal, exp.Literal) and literal.this == "x' OR '1'='1"
    assert where.find(exp.Or) is None


@pytest.mark.parametrize(
    "default,text,expected",
    [
        (10, "42", 42),
        (1.5, "2.25", 2.25),
        (True, "false", False),
        ("eu", "us", "us"),
        (dt.date(2024, 1, 1), "2025-02-03", dt.date(2025, 2, 3)),
    ],
)
def test_conversion_follows_default_type(default, text, expected):
    assert resolve_params({"p": default}, {"p": text})["p"] == expected


def test_bad_conversion_and_unknown_param():
    with pytest.raises(RenderError, match="int"):
        resolve_params({"n": 10}, {"n": "ten"})
    with pytest.raises(RenderError, match="limit_n"):
        resolve_params({"limit_n": 10}, {"limitn": "1"})


def test_literals_per_type():
    sql, _ = bind(
        "${a} ${b} ${c} ${d}", {"a": 1, "b": True, "c": dt.date(2024, 1, 2), "d": "o'k"}, SPARK
    )
    assert sql == "1 TRUE CAST('2024-01-02' AS DATE) 'o\\'k'"
    pg, _ = bind("${d}", {"d": "o'k"}, dialect("postgres"))
    assert pg == "'o''k'"


def test_unbound_placeholder_is_an_error_with_position(make_project):
    root = make_project(
        {"models/m.sql": "select order_id\nfrom {{ ref('stg') }}\nwhere x = ${nope}\n"}
    )
    f = only(analyze_dir(root).findings, "RV003")
    assert isinstance(f.error, RenderError)
    assert (f.location.line, f.location.col) == (3, 11)


def test_param_in_source_query_is_bound_for_its_dialect(make_project):
    root = make_project(
        {
            "sources/pg.yml": """
            sources:
              - name: pg
                connector: postgres
                connection: db
                tables:
                  - {name: o, query: "SELECT id, updated_at FROM orders WHERE region = ${region}"}
        """
        }
    )
    node = analyze_dir(root, params={"region": "x'y"}).graph.nodes["source:pg.o"]
    assert node.sql.endswith("region = 'x''y'")
