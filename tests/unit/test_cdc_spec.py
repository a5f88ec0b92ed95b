"""postgres-cdc at compile, without a database: its settings on the source, a database table
per table, the change envelope as the landed columns (typed from `columns:`), unwrap_cdc's
sequence_by checked against it, and what belongs to query-based sources refused at its line."""

from __future__ import annotations

import pytest

from rivc.compiler.errors import CompileFailed, ProjectError
from rivc_testing import analyze_dir

PROFILE = "default:\n  connections:\n    db: {type: postgres, database: shop}\n"
SOURCE = """
sources:
  - name: pg
    connector: postgres-cdc
    connection: db
    config: {slot_name: shop_slot, publication_name: shop_pub}
    tables:
      - name: orders
        table: public.orders
        columns: {id: int, status: string, amount: "decimal(10,2)"}
      - {name: notes, table: public.notes}
"""
SINK = """
sinks:
  - name: lake
    from: source:pg.orders
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: SEQ}]
    connector: delta
    config: {table_uri: out/orders, mode: merge, merge_keys: [id]}
"""


def test_a_cdc_source_lands_change_envelopes_typed_from_its_columns(make_project):
    root = make_project(
        {
            "profiles.yml": PROFILE,
            "sources/pg.yml": SOURCE,
            "sinks/lake.yml": SINK.replace("SEQ", "seq"),
        }
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    nodes = compiled.graph.nodes
    image = "struct<id:int,status:string,amount:decimal(10,2)>"
    assert nodes["source:pg.orders"].columns == {
        "op": "string",
        "before": image,
        "after": image,
        "commit_lsn": "decimal(20,0)",
        "seq": "decimal(38,0)",
        "txid": "bigint",
        "commit_time": "timestamp",
    }
    assert nodes["source:pg.notes"].columns is None  # no columns declared: known when it runs
    assert nodes["sink:lake"].columns == {
        "id": "int",
        "status": "string",
        "amount": "decimal(10,2)",
    }
    assert nodes["source:pg.orders"].facts.table["table"] == "public.orders"
    assert nodes["sink:lake"].facts.input.kind == "batches"  # every change, batch after batch


def test_sequence_by_must_name_an_envelope_field(make_project):
    root = make_project(
        {
            "profiles.yml": PROFILE,
            "sources/pg.yml": SOURCE,
            "sinks/lake.yml": SINK.replace("SEQ", "lsn"),
        }
    )
    (error,) = analyze_dir(root).errors
    assert "lsn" in error.error.message and error.location.path.as_posix() == "sinks/lake.yml"


@pytest.mark.parametrize(
    ("change", "said", "line"),
    [
        ("      - {name: notes, table: public.notes}\n", "", 0),
        ("      - {name: notes}\n", "source table pg.notes needs table:", 10),
        ("      - {name: notes, query: SELECT 1}\n", "query is not for postgres-cdc", 10),
        (
            "      - {name: notes, table: t, mode: incremental, cursor_column: id}\n",
            "cursor_column is not for postgres-cdc",
            10,
        ),
        ("      - {name: notes, table: t, config: {x: 1}}\n", "config is not for postgres-cdc", 10),
    ],
)
def test_what_a_cdc_table_cannot_take_is_refused_at_its_line(make_project, change, said, line):
    text = SOURCE.replace("      - {name: notes, table: public.notes}\n", change)
    root = make_project({"profiles.yml": PROFILE, "sources/pg.yml": text})
    if not said:
        assert not analyze_dir(root).errors
        return
    with pytest.raises((ProjectError, CompileFailed)) as caught:
        analyze_dir(root)
    error = caught.value.errors[0] if isinstance(caught.value, CompileFailed) else caught.value
    assert said in error.message and error.location is not None and error.location.line == line


def test_source_settings_are_checked_and_only_cdc_sources_take_them(make_project):
    bad = SOURCE.replace("slot_name: shop_slot", "slot_name: Shop-Slot")
    root = make_project({"profiles.yml": PROFILE, "sources/pg.yml": bad})
    with pytest.raises((ProjectError, CompileFailed), match="slot_name"):
        analyze_dir(root)
    plain = SOURCE.replace("postgres-cdc", "postgres")
    root = make_project({"profiles.yml": PROFILE, "sources/pg.yml": plain})
    with pytest.raises(
        (ProjectError, CompileFailed), match="config on a source is for change-log connectors"
    ):
        analyze_dir(root)
