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


HISTORY = """
sinks:
  - name: history
    from: source:pg.orders
    transforms: [TRANSFORMS]
    connector: CONNECTOR
    config: CONFIG
"""


@pytest.mark.parametrize("connector", ["delta", "iceberg"])
def test_a_scd2_sink_holds_each_version_with_its_span(make_project, connector):
    config = (
        "{table_uri: out/h, mode: scd2, merge_keys: [id], scd2: {valid_to: ended}}"
        if connector == "delta"
        else "{namespace: n, table: h, mode: scd2, key_fields: [id], scd2: {valid_to: ended}}"
    )
    sink = (
        HISTORY.replace("TRANSFORMS", "{type: unwrap_cdc, deletes: apply, sequence_by: seq}")
        .replace("CONNECTOR", connector)
        .replace("CONFIG", config)
    )
    root = make_project({"profiles.yml": PROFILE, "sources/pg.yml": SOURCE, "sinks/h.yml": sink})
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    assert compiled.graph.nodes["sink:history"].columns == {
        "id": "int",
        "status": "string",
        "amount": "decimal(10,2)",
        "valid_from": "decimal(38,0)",
        "ended": "decimal(38,0)",
        "is_current": "boolean",
    }


@pytest.mark.parametrize(
    ("transforms", "config", "said", "line"),
    [
        ("", "{table_uri: h, mode: scd2, merge_keys: [id]}", "add the transform", 6),
        (
            "{type: unwrap_cdc, deletes: apply}",
            "{table_uri: h, mode: scd2, merge_keys: [id]}",
            "orders each key's versions by sequence_by",
            4,
        ),
        (
            "{type: unwrap_cdc, deletes: keep, sequence_by: seq}",
            "{table_uri: h, mode: scd2, merge_keys: [id]}",
            "deletes: apply",
            4,
        ),
        (
            "{type: unwrap_cdc, sequence_by: seq}",
            "{table_uri: h, mode: scd2, merge_keys: [id], scd2: {valid_from: status}}",
            "name the scd2 columns otherwise",
            4,
        ),
    ],
)
def test_what_a_scd2_sink_cannot_take_is_refused_at_its_line(
    make_project, transforms, config, said, line
):
    sink = (
        HISTORY.replace("TRANSFORMS", transforms)
        .replace("CONNECTOR", "delta")
        .replace("CONFIG", config)
    )
    root = make_project({"profiles.yml": PROFILE, "sources/pg.yml": SOURCE, "sinks/h.yml": sink})
    errors = analyze_dir(root).errors
    assert [said in e.error.message for e in errors] == [True], [str(e) for e in errors]
    assert errors[0].location.line == line


def test_scd2_needs_keys_and_three_names(make_project):
    for config, said in (
        ("{table_uri: h, mode: scd2}", "mode scd2 needs merge_keys"),
        (
            "{table_uri: h, mode: scd2, merge_keys: [id], scd2: {valid_to: valid_from}}",
            "three different names",
        ),
    ):
        sink = (
            HISTORY.replace("TRANSFORMS", "{type: unwrap_cdc, sequence_by: seq}")
            .replace("CONNECTOR", "delta")
            .replace("CONFIG", config)
        )
        root = make_project(
            {"profiles.yml": PROFILE, "sources/pg.yml": SOURCE, "sinks/h.yml": sink}
        )
        with pytest.raises((ProjectError, CompileFailed), match=said):
            analyze_dir(root)


MYSQL = """
sources:
  - name: my
    connector: mysql-cdc
    connection: db
    config: CONFIG
    tables:
      - name: orders
        table: shop.orders
        columns: {id: int, total: "decimal(10,2)"}
"""


def test_a_mysql_cdc_source_lands_binlog_envelopes_and_checks_its_server_id(make_project):
    profile = "default:\n  connections:\n    db: {type: mysql, database: shop}\n"
    root = make_project({"profiles.yml": profile, "sources/my.yml": MYSQL.replace("CONFIG", "{}")})
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(f) for f in compiled.errors]
    image = "struct<id:int,total:decimal(10,2)>"
    assert compiled.graph.nodes["source:my.orders"].columns == {
        "op": "string",
        "before": image,
        "after": image,
        "binlog_file": "string",
        "binlog_pos": "bigint",
        "seq": "decimal(38,0)",
        "gtid": "string",
        "commit_time": "timestamp",
    }
    bad = MYSQL.replace("CONFIG", "{server_id: 0}")
    root = make_project({"profiles.yml": profile, "sources/my.yml": bad})
    with pytest.raises((ProjectError, CompileFailed), match="server_id"):
        analyze_dir(root)


def test_a_table_s_changes_may_add_columns_but_not_drop_or_retype_them():
    from rivc.adapters.connectors.postgres.spec import cdc_columns
    from rivc.adapters.ingest.changes import check_shape
    from rivc.compiler.errors import ConnectorError

    held = cdc_columns(None, {"id": "int", "amount": "decimal(10,2)", "tags": "map<string,int>"})
    assert check_shape(held, dict(held or {}), "source s", "s.t") == []
    wider = cdc_columns(
        None,
        {**{"id": "int", "amount": "decimal(10,2)"}, "tags": "map<string,int>", "note": "string"},
    )
    assert check_shape(held, wider or {}, "source s", "s.t") == ["note"]
    assert check_shape(None, wider or {}, "source s", "s.t") == []  # nothing landed yet
    retyped = cdc_columns(None, {"id": "int", "amount": "decimal(12,2)", "tags": "map<string,int>"})
    with pytest.raises(
        ConnectorError, match=r"column amount changed type \(decimal\(10,2\) -> decimal\(12,2\)\)"
    ):
        check_shape(held, retyped or {}, "source s", "s.t")
    dropped = cdc_columns(None, {"id": "int", "tags": "map<string,int>"})
    with pytest.raises(
        ConnectorError, match="column amount was dropped or renamed.*--select source:s.t"
    ):
        check_shape(held, dropped or {}, "source s", "s.t")


@pytest.mark.parametrize(
    ("trigger", "seconds"),
    [
        ("1 second", 1.0),
        ("500 milliseconds", 0.5),
        ("2s", 2.0),
        ("1 minute", 60.0),
        ("1 hour", 3600.0),
    ],
)
def test_a_followed_log_waits_the_trigger_spark_would(trigger, seconds):
    from rivc.compiler.loading.specs import interval_seconds

    assert interval_seconds(trigger) == seconds


def test_a_trigger_interval_spark_would_not_read_is_refused_at_its_line(make_project):
    sink = SINK.replace("SEQ", "seq") + '    trigger: {processing_time: "soon"}\n'
    root = make_project({"profiles.yml": PROFILE, "sources/pg.yml": SOURCE, "sinks/lake.yml": sink})
    with pytest.raises((ProjectError, CompileFailed)) as caught:
        analyze_dir(root)
    error = caught.value.errors[0] if isinstance(caught.value, CompileFailed) else caught.value
    assert "'soon' is not an interval" in error.message
    assert error.location is not None and error.location.line == 7  # the trigger line
