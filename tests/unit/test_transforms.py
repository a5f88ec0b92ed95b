"""Transforms and expectations at compile time: specs, SQL steps, and checks against columns."""

from __future__ import annotations

import pytest
import sqlglot
from pydantic import ValidationError

from rivc.compiler.loading.specs import SinkSpec
from rivc.compiler.rendering import transforms as tf
from rivc_testing import findings

COLS = {"id": "bigint", "card": "string", "amount": "string", "region": "string"}


def _plan(*specs: dict) -> tf.TransformPlan:
    sink = SinkSpec.model_validate(
        {"name": "s", "from": "m", "connector": "stdout", "transforms": specs}
    )
    return tf.plan(sink.transforms, COLS)


def test_every_step_is_spark_sql():
    p = _plan(
        {"type": "mask", "fields": ["card"], "keep_last": 4},
        {"type": "rename", "map": {"region": "area"}},
        {"type": "cast", "fields": {"amount": "decimal(10,2)"}},
        {"type": "insert", "static": {"src": "web", "v": 2}, "timestamp": "seen_at", "uuid": "uid"},
        {"type": "filter", "condition": "amount > 0", "action": "keep"},
        {"type": "drop", "fields": ["id"]},
    )
    assert p.columns == {
        "card": "string",
        "amount": "decimal(10,2)",
        "area": "string",
        "src": "string",
        "v": "int",
        "seen_at": "timestamp",
        "uid": "string",
    }
    sql = tf.to_sql("orders", p.steps)
    tree = sqlglot.parse_one(sql, read="spark")  # one valid Spark SQL query
    assert tree.find(sqlglot.exp.Where) is not None
    assert (
        "try_cast(`amount` AS decimal(10,2))" in sql and "right(CAST(`card` AS STRING), 4)" in sql
    )
    assert p.steps[2].casts == (("amount", "decimal(10,2)"),)


def test_unwrap_cdc_columns_from_the_after_struct():
    cols = {
        "op": "string",
        "before": "struct<id:bigint,name:string>",
        "after": "struct<id:bigint,name:string>",
        "ts": "timestamp",
    }
    t = SinkSpec.model_validate(
        {
            "name": "s",
            "from": "m",
            "connector": "stdout",
            "transforms": [{"type": "unwrap_cdc", "deletes": "keep"}],
        }
    ).transforms
    p = tf.plan(t, cols)
    assert p.columns == {"id": "bigint", "name": "string", "_op": "string"}
    assert all(s.where is None for s in p.steps)  # deletes kept: no filter


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "mask", "fields": ["cardd"]}, "'cardd' is not in the input"),
        ({"type": "rename", "map": {"id": "card"}}, "same name"),
        ({"type": "keep", "fields": ["nope"]}, "'nope'"),
        ({"type": "filter", "condition": "amountt > 1"}, "'amountt'"),
        ({"type": "insert", "static": {"id": 1}}, "already exists"),
    ],
)
def test_bad_transform_names_its_index_and_key(spec, message):
    with pytest.raises(tf.TransformError) as info:
        _plan(
            {"type": "drop", "fields": ["region"]}
            if spec["type"] == "rename"
            else {"type": "keep", "fields": list(COLS)},
            spec,
        )
    assert message in str(info.value) and info.value.index == 1


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "cast", "fields": {"a": "decimal(10,"}},
        {"type": "filter", "condition": "amount >"},
        {"type": "mask", "fields": ["card"], "char": "**"},
        {"type": "sort"},
    ],
)
def test_invalid_specs_are_rejected(spec):
    with pytest.raises(ValidationError):
        SinkSpec.model_validate(
            {"name": "s", "from": "m", "connector": "stdout", "transforms": [spec]}
        )


def test_expectation_conditions():
    e = tf.Expectation(check="range", column="amount", min=0, max=10, action="drop")
    assert e.failing() == "`amount` < 0 OR `amount` > 10"
    assert (
        "row_number() OVER (PARTITION BY `id`"
        in tf.Expectation(check="unique", column="id").failing()
    )
    with pytest.raises(ValidationError):
        tf.Expectation(check="accepted_values", column="x")


SINK = """
sinks:
  - name: s
    from: stg
    connector: stdout
    transforms:
      - {type: rename, map: {total: amount}}
      - {type: route, field: customer_id, routes: {"1": one}, default: rest}
    quality:
      - {check: not_null, column: total, action: dead_letter}
    dead_letter: {connector: files, config: {path: dlq, format: jsonl}}
  - {name: one, connector: stdout}
  - {name: rest, connector: stdout}
  - {name: orphan, connector: stdout}
"""


def test_compile_checks_transforms_quality_and_targets(make_project):
    found = findings(make_project({"sinks/s.yml": SINK}))
    messages = sorted(f.error.message for f in found if f.severity == "error")
    assert len(messages) == 2, messages
    assert "quality not_null: column 'total' is not in the sink's input" in messages[0]
    assert "'orphan' has no from:" in messages[1]
    lines = sorted(f.location.line for f in found if f.severity == "error")
    assert lines == [9, 13]  # the quality entry, and the orphan sink


def test_route_targets_must_exist_and_have_no_from(make_project):
    text = SINK.replace("default: rest", "default: stg2").replace(
        "  - {name: orphan, connector: stdout}\n",
        "  - {name: stg2, from: stg, connector: stdout}\n",
    )
    found = [f.error.message for f in findings(make_project({"sinks/s.yml": text}))]
    assert any("target 'stg2' has its own from:" in m for m in found), found
    assert any("'rest' has no from:" in m for m in found), found


ENVELOPE = {
    "op": "string",
    "before": "struct<id:bigint,email:string>",
    "after": "struct<id:bigint,email:string>",
    "ts": "timestamp",
}


def _cdc(*specs: dict, keys: tuple[str, ...] = ("id",)) -> tf.TransformPlan:
    sink = SinkSpec.model_validate(
        {"name": "s", "from": "m", "connector": "stdout", "transforms": specs}
    )
    return tf.plan(sink.transforms, ENVELOPE, keys)


def test_unwrap_cdc_apply_flags_deletes_through_later_transforms():
    p = _cdc(
        {"type": "unwrap_cdc", "deletes": "apply", "sequence_by": "ts"},
        {"type": "mask", "fields": ["email"]},
        {"type": "filter", "condition": "id > 0"},
        {"type": "insert", "static": {"src": "cdc"}},
    )
    # the flag is not a data column: the sink's table never gets it
    assert p.columns == {"id": "bigint", "email": "string", "src": "string"}
    assert p.output == ("id", "email", "src", tf.DELETE_COLUMN)
    selects = [s.select for s in p.steps if s.select]
    # every select after the unwrap carries the flag, so no later transform can lose a delete
    assert all(tf.DELETE_COLUMN in " ".join(s) for s in selects[-3:])
    sql = tf.to_sql("events", p.steps)
    tree = sqlglot.parse_one(sql, read="spark")
    window = tree.find(sqlglot.exp.Window)
    assert window is not None and "PARTITION BY _rivc_image.`id` ORDER BY _rivc_seq DESC" in sql
    # each key's last change is picked before deletes are told apart (a delete can win)
    wheres = [s.where for s in p.steps if s.where]
    assert wheres[0] == "_rivc_rank = 1"


def test_unwrap_cdc_drops_deletes_after_picking_each_keys_last_change():
    p = _cdc({"type": "unwrap_cdc", "sequence_by": "ts"})
    wheres = [s.where for s in p.steps if s.where]
    assert wheres == ["_rivc_rank = 1", "_op IS NULL OR _op <> 'delete'"]
    assert p.columns == {"id": "bigint", "email": "string", "_op": "string"}
    assert not p.deletes


@pytest.mark.parametrize(
    "specs, keys, key, message",
    [
        ([{"type": "unwrap_cdc", "deletes": "apply"}], (), "deletes", "merges by key"),
        ([{"type": "unwrap_cdc", "sequence_by": "ts"}], (), "sequence_by", "needs keys"),
        ([{"type": "unwrap_cdc", "sequence_by": "ts"}], ("name",), "sequence_by", "'name'"),
        ([{"type": "unwrap_cdc", "sequence_by": "tss"}], ("id",), "sequence_by", "'tss'"),
        (
            [
                {"type": "unwrap_cdc", "deletes": "apply"},
                {"type": "route", "field": "id", "routes": {"1": "t"}},
            ],
            ("id",),
            "type",
            "cannot follow unwrap_cdc",
        ),
    ],
)
def test_unwrap_cdc_refusals_name_the_key(specs, keys, key, message):
    with pytest.raises(tf.TransformError) as info:
        _cdc(*specs, keys=keys)
    assert message in str(info.value) and info.value.key == key


CDC_PROJECT = """
sources:
  - name: app
    connector: datagen
    tables:
      - name: users
        config: {pattern: users, max_events: 30, cdc_mode: true}
"""


@pytest.mark.parametrize(
    "config, ok",
    [
        ("{connector: delta, config: {table_uri: t, mode: merge, merge_keys: [user_id]}}", True),
        ("{connector: delta, config: {table_uri: t, mode: append}}", False),
        (
            "{connector: iceberg, config: {namespace: n, table: t, mode: upsert, "
            "key_fields: [user_id]}}",
            True,
        ),
        ("{connector: files, config: {path: out, format: parquet}}", False),
    ],
)
def test_compile_accepts_applied_deletes_only_on_a_merging_sink(make_project, config, ok):
    sink = (
        "sinks:\n  - name: s\n    from: source:app.users\n"
        "    transforms:\n      - {type: unwrap_cdc, deletes: apply, sequence_by: ts}\n"
        f"    <<: {config}\n"
    )
    found = findings(make_project({"sources/app.yml": CDC_PROJECT, "sinks/s.yml": sink}))
    errors = [f for f in found if f.severity == "error"]
    if ok:
        assert errors == []
    else:
        assert len(errors) == 1, [str(f) for f in errors]
        assert "deletes: apply needs a sink that merges by key" in errors[0].error.message
        assert errors[0].location.line == 5  # the transform's line in sinks/s.yml


@pytest.mark.parametrize("applied", ["deletes: apply", "sequence_by: seq"])
def test_a_change_log_of_unknown_columns_still_needs_a_merging_sink_at_compile(
    make_project, applied
):
    """A postgres-cdc table with no declared columns (its envelope is learned at run time):
    `deletes: apply` or `sequence_by` into an append sink is refused at the transform's line,
    not at run time."""
    found = findings(
        make_project(
            {
                "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: h}\n",
                "sources/pg.yml": "sources:\n  - name: pg\n    connector: postgres-cdc\n"
                "    connection: db\n    tables:\n      - {name: t, table: public.t}\n",
                "sinks/s.yml": "sinks:\n  - name: s\n    from: source:pg.t\n"
                f"    transforms:\n      - {{type: unwrap_cdc, {applied}}}\n"
                "    connector: delta\n    config: {table_uri: t, mode: append}\n",
            }
        )
    )
    errors = [f for f in found if f.severity == "error"]
    assert len(errors) == 1, [str(f) for f in errors]
    assert "needs" in errors[0].error.message and errors[0].location.line == 5
