"""dbt's model versions at compile (no JVM): each version a model of its own, `ref('name')` the
latest, `ref('name', v=1)` / `version=1` another, the model's properties on every version with
its own on top, and mistakes refused at their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rivc.compiler.errors import CompileFailed, ProjectError
from rivc_testing import analyze_dir, write_files

PROPS = """models:
  - name: dim_customers
    description: Customers
    latest_version: 2
    config: {materialized: table}
    columns:
      - name: id
        tests: [not_null]
      - name: legacy
    versions:
      - v: 1
      - v: 2
        description: Customers, without legacy
        columns:
          - include: all
            exclude: [legacy]
          - name: name
            tests: [unique]
      - v: 3
        defined_in: dim_customers_next
"""


def project(tmp_path: Path, props: str = PROPS, **models: str) -> Path:
    return write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: versions\n",
            "models/dim_customers_v1.sql": "select 1 as id, 'a' as name, 'x' as legacy\n",
            "models/dim_customers_v2.sql": "select 1 as id, 'a' as name\n",
            "models/dim_customers_next.sql": "select 1 as id, 'a' as name, 2 as score\n",
            "models/props.yml": props,
            **{f"models/{name}.sql": sql for name, sql in models.items()},
        },
    )


def test_each_version_is_a_model_and_ref_takes_the_latest_or_the_one_asked(tmp_path):
    root = project(
        tmp_path,
        latest="select * from {{ ref('dim_customers') }}\n",
        first="{{ config(materialized='table') }}\nselect * from {{ ref('dim_customers', v=1) }}\n",
        third="select * from {{ ref('dim_customers', version='3') }}\n",
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    nodes = compiled.graph.nodes
    assert nodes["model:latest"].depends_on == ["model:dim_customers_v2"]
    assert nodes["model:first"].depends_on == ["model:dim_customers_v1"]
    # a version defined in a file of another name is still `<name>_v<v>`, as in dbt
    assert nodes["model:third"].depends_on == ["model:dim_customers_v3"]
    assert nodes["model:dim_customers_v3"].path.name == "dim_customers_next.sql"
    assert "`dim_customers_v1`" in (nodes["model:first"].sql or "")
    # the model's properties on every version, a version's own on top
    v1, v2 = nodes["model:dim_customers_v1"], nodes["model:dim_customers_v2"]
    assert v1.description == "Customers" and v2.description == "Customers, without legacy"
    assert v1.config["materialized"] == v2.config["materialized"] == "table"
    tests = {n.name for n in nodes.values() if n.kind == "test"}
    assert {
        "not_null_dim_customers_v1_id",
        "not_null_dim_customers_v2_id",
        "not_null_dim_customers_v3_id",
        "unique_dim_customers_v2_name",
    } <= tests
    assert "unique_dim_customers_v1_name" not in tests
    # the versioned model's name selects every version, as in dbt
    picked = analyze_dir(root, select=("dim_customers",)).chosen
    assert {"model:dim_customers_v1", "model:dim_customers_v2", "model:dim_customers_v3"} <= set(
        picked
    )
    assert "model:latest" not in picked


@pytest.mark.parametrize(
    ("props", "sql", "said", "where"),
    [
        (PROPS, "select * from {{ ref('dim_customers', v=4) }}\n", "has versions 1, 2, 3", ""),
        (PROPS, "select * from {{ ref('dim_customers_v1', v=1) }}\n", "has no versions", ""),
        (PROPS.replace("latest_version: 2", "latest_version: 7"), "", "latest_version 7", ":4"),
        (PROPS.replace("      - v: 3\n", "      - v: 2.0\n"), "", "version 2 twice", ":19"),
    ],
)
def test_a_wrong_version_is_refused_at_its_line(tmp_path, props, sql, said, where):
    models = {"uses": sql} if sql else {}
    root = project(tmp_path, props, **models)
    try:
        compiled = analyze_dir(root)
    except (CompileFailed, ProjectError) as exc:
        text = str(exc)
    else:
        text = "\n".join(str(f) for f in compiled.errors)
    assert said in text, text
    assert (f"props.yml{where}" if where else "models/uses.sql:1") in text, text
