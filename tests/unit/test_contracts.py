"""dbt's enforced model contracts at compile (no JVM): the declared columns and types against
what compile knows of the model's SQL, each break named at its file and line; a contract that
holds is written into the node for the run's check."""

from __future__ import annotations

from pathlib import Path

from rivc_testing import analyze_dir, write_files

PROPS = """models:
  - name: orders
    config: {contract: {enforced: true}}
    columns:
      - name: id
        data_type: integer
        constraints: [{type: not_null}, {type: check, expression: "id > 0"}, {type: unique}]
      - name: amount
        data_type: decimal(10,2)
      - name: note
        data_type: varchar(20)
"""
SQL = "select cast(1 as int) as id, cast(2.5 as decimal(10,2)) as amount, 'x' as note\n"


def compile_errors(tmp_path: Path, sql: str, props: str = PROPS) -> tuple[list[str], object]:
    root = write_files(
        tmp_path / "p",
        {"rivc_project.yml": "name: c\n", "models/orders.sql": sql, "models/props.yml": props},
    )
    compiled = analyze_dir(root)
    return [str(f) for f in compiled.errors], compiled


def test_a_contract_that_holds_goes_into_the_node_for_the_run(tmp_path):
    errors, compiled = compile_errors(tmp_path, SQL)
    assert not errors, errors
    contract = compiled.graph.nodes["model:orders"].config["contract"]  # type: ignore[attr-defined]
    assert contract["enforced"] is True
    assert contract["columns"] == {
        "id": "integer",
        "amount": "decimal(10,2)",
        "note": "varchar(20)",
    }
    assert contract["not_null"] == ["id"] and contract["checks"] == ["id > 0"]


def test_each_break_is_named_at_its_line(tmp_path):
    errors, _ = compile_errors(tmp_path, SQL.replace("'x' as note", "'x' as notes"))
    assert any(
        "models/orders.sql:1" in e
        and "declared, not in its SQL: note" in e
        and "in its SQL, not declared: notes" in e
        for e in errors
    ), errors
    errors, _ = compile_errors(tmp_path, SQL.replace("cast(1 as int)", "cast(1 as bigint)"))
    assert any("id is bigint, declared integer" in e for e in errors), errors
    errors, _ = compile_errors(
        tmp_path, SQL, PROPS.replace("        data_type: decimal(10,2)\n", "")
    )
    assert any(
        "models/props.yml:8" in e and "column 'amount' needs a data_type" in e for e in errors
    ), errors


def test_a_contract_not_enforced_changes_nothing(tmp_path):
    errors, compiled = compile_errors(
        tmp_path, "select 1 as other\n", PROPS.replace("enforced: true", "enforced: false")
    )
    assert not errors, errors
    assert "contract" not in compiled.graph.nodes["model:orders"].config  # type: ignore[attr-defined]
