"""Transforms, quality checks, routes and dead letters on real rows, read back independently.

Expected values come from the datagen generator itself (plain Python), not from Spark.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from rivc.adapters.connectors.datagen.source import Generator
from rivc_testing import last_run, rivc, write_files

pytestmark = pytest.mark.integration

N = 300
ORDERS = [
    Generator("orders", 11).row(i) for i in range(N)
]  # (id, customer, product, qty, total, status, ts)


def project(root: Path, sinks: str, model: str) -> Path:
    files = {
        "rivc_project.yml": "name: pipe\n",
        "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
        f"      - {{name: orders, config: {{pattern: orders, max_events: {N}, seed: 11}}}}\n",
        "models/orders.sql": model,
        "sinks/out.yml": sinks,
    }
    return write_files(root, files)


def delta_rows(path: Path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def jsonl(path: Path) -> list[dict]:
    rows = duckdb.sql(f"SELECT * FROM read_json('{path}/*.jsonl', format='newline_delimited')")
    return [dict(zip(rows.columns, r, strict=True)) for r in rows.fetchall()]


TRANSFORMS = """
sinks:
  - name: lake
    from: orders
    connector: delta
    config: {table_uri: out/lake}
    transforms:
      - {type: mask, fields: [product], keep_last: 3, char: "#"}
      - {type: rename, map: {total: amount}}
      - {type: cast, fields: {quantity: bigint}}
      - {type: insert, static: {src: gen}, timestamp: loaded_at, uuid: row_uuid}
      - {type: filter, condition: "status = 'cancelled'", action: drop}
      - {type: drop, fields: [customer_id]}
      - {type: route, field: status, routes: {shipped: shipped}}
  - {name: shipped, connector: files, config: {path: out/shipped, format: jsonl}}
"""


def test_transforms_and_route_on_real_rows(spark, tmp_path):
    model = "select order_id, customer_id, product, quantity, total, status from {{ source('gen', 'orders') }}\n"
    root = project(tmp_path / "t", TRANSFORMS, model)
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output

    kept = [o for o in ORDERS if o[5] != "cancelled"]
    lake = {r["order_id"]: r for r in delta_rows(root / "out/lake")}
    shipped = {r["order_id"]: r for r in jsonl(root / "out/shipped")}
    assert set(shipped) == {o[0] for o in kept if o[5] == "shipped"}
    assert set(lake) == {o[0] for o in kept if o[5] != "shipped"}
    assert set(next(iter(lake.values()))) == {
        "order_id",
        "product",
        "quantity",
        "amount",
        "status",
        "src",
        "loaded_at",
        "row_uuid",
    }
    for order_id, _, product, qty, total, status, _ in kept:
        row = lake.get(order_id) or shipped[order_id]
        assert row["status"] == status
        assert row["product"] == "#" * (len(product) - 3) + product[-3:]
        assert Decimal(str(row["amount"])) == total and row["quantity"] == qty
        assert row["src"] == "gen" and row["loaded_at"] is not None
    uuids = [str(r["row_uuid"]) for r in [*lake.values(), *shipped.values()]]
    assert len(set(uuids)) == len(kept) and all(len(u) == 36 for u in uuids)


QUALITY = """
sinks:
  - name: checked
    from: orders
    connector: delta
    config: {table_uri: out/checked}
    transforms:
      - {type: cast, fields: {qty_text: int}}
    quality:
      - {check: accepted_values, column: status, values: [pending, paid, shipped, delivered], action: dead_letter}
      - {check: range, column: total, max: 100, action: drop}
      - {check: not_null, column: order_id, action: warn}
      - {check: unique, column: customer_id, action: warn}
      - {check: expression, expression: "qty_text between 1 and 5", action: FAIL_ACTION}
    dead_letter: {connector: files, config: {path: out/dlq, format: jsonl}}
"""
QUALITY_MODEL = """select order_id, customer_id, status, total,
  case when order_id % 10 = 0 then concat('x', order_id) else cast(quantity as string) end as qty_text
from {{ source('gen', 'orders') }}
"""


def test_expectations_and_dead_letters(spark, tmp_path):
    root = project(tmp_path / "q", QUALITY.replace("FAIL_ACTION", "fail"), QUALITY_MODEL)
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output

    bad_cast = {o[0] for o in ORDERS if o[0] % 10 == 0}
    cancelled = {o[0] for o in ORDERS if o[5] == "cancelled"} - bad_cast
    dear = {o[0] for o in ORDERS if o[4] > 100} - bad_cast - cancelled
    written = {r["order_id"]: r for r in delta_rows(root / "out/checked")}
    assert set(written) == {o[0] for o in ORDERS} - bad_cast - cancelled - dear
    assert all(isinstance(r["qty_text"], int) for r in written.values())

    dead = jsonl(root / "out/dlq")
    assert {r["sink"] for r in dead} == {"checked"} and {r["attempts"] for r in dead} == {0}
    by_id = {json.loads(r["row"])["order_id"]: r for r in dead}
    assert set(by_id) == bad_cast | cancelled
    some_cast = by_id[min(bad_cast)]
    assert some_cast["error"] == "cast of qty_text to int failed"
    assert (
        json.loads(some_cast["row"])["qty_text"] == f"x{min(bad_cast)}"
    )  # the value before the cast
    assert by_id[min(cancelled)]["error"] == "accepted_values(status) failed"
    assert all(r["batch_id"] == 0 and r["failed_at"] for r in dead)

    summary = last_run(root)["results"]
    message = next(r["message"] for r in summary if r["node"] == "sink:checked")
    # each check counts every row that fails it, whatever the other checks say
    castable = [o for o in ORDERS if o[0] not in bad_cast]
    dupes = len(castable) - len({o[1] for o in castable})
    assert f"accepted_values(status): {len(cancelled)} dead_letter" in message
    assert f"range(total): {sum(o[4] > 100 for o in castable)} drop" in message
    assert f"cast: {len(bad_cast)} dead_letter" in message
    assert "not_null" not in message  # nothing failed it
    assert f"unique(customer_id): {dupes} warn" in message and dupes > 0


def test_failing_expectation_writes_nothing(spark, tmp_path):
    text = QUALITY.replace("FAIL_ACTION", "fail").replace("between 1 and 5", "between 1 and 4")
    root = project(tmp_path / "f", text, QUALITY_MODEL)
    result = rivc(root, "run")
    assert result.exit_code == 1
    assert "quality failed: expression(qty_text between 1 and 4) on" in result.output
    assert not (root / "out/checked").exists() and not (root / "out/dlq").exists()
    state = rivc(root, "state", "show", "--json")
    assert json.loads(state.output)["batches"] == []


FAILING = """
sinks:
  - name: broken
    from: orders
    connector: files
    config: {path: out/not_a_dir, format: parquet}
    health_check: false
    retry: {max_attempts: 2, backoff_ms: 1}
    dead_letter: {connector: files, config: {path: DLQ_PATH, format: jsonl}}
"""


def test_failed_write_goes_to_dead_letter_after_retries(spark, tmp_path):
    model = "select order_id, status from {{ source('gen', 'orders') }}\n"
    root = project(tmp_path / "w", FAILING.replace("DLQ_PATH", "out/dlq"), model)
    (root / "out").mkdir()
    (root / "out/not_a_dir").write_text("a file where the sink wants a directory")
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    dead = jsonl(root / "out/dlq")
    assert len(dead) == N and {r["attempts"] for r in dead} == {2}
    assert "write failed" not in dead[0]["error"] and dead[0]["error"]
    assert sorted(json.loads(r["row"])["order_id"] for r in dead) == [o[0] for o in ORDERS]

    # when the dead-letter write fails too, the run stops: nothing is dropped silently
    root = project(tmp_path / "w2", FAILING.replace("DLQ_PATH", "out/not_a_dir"), model)
    (root / "out").mkdir()
    (root / "out/not_a_dir").write_text("x")
    result = rivc(root, "run")
    assert result.exit_code == 1
    assert "writing dead letters to broken__dead_letter failed, stopping" in result.output


CDC_SOURCE = """sources:
  - name: gen
    connector: datagen
    tables:
      - name: changes
        config: {pattern: users, max_events: 90, seed: 5, cdc_mode: true}
        transforms:
          - {type: unwrap_cdc, deletes: DELETES}
          - {type: keep, fields: [user_id, email, _op]}
"""


@pytest.mark.parametrize("deletes", ["keep", "drop"])
def test_unwrap_cdc_on_a_source(spark, tmp_path, deletes):
    root = project(
        tmp_path / deletes,
        "sinks:\n  - {name: out, from: source:gen.changes, connector: files,"
        " config: {path: out/cdc, format: jsonl}}\n",
        "select 1 as x\n",
    )
    (root / "sources/gen.yml").write_text(CDC_SOURCE.replace("DELETES", deletes))
    result = rivc(root, "run", "--select", "sink:out")
    assert result.exit_code == 0, result.output

    gen = Generator("users", 5, cdc=True)
    expected = []
    for i in range(90):
        op, before, after, _ = gen.row(i)
        if op == "delete" and deletes == "drop":
            continue
        image = before if op == "delete" else after
        expected.append((image[0], image[2], op))
    got = sorted((r["user_id"], r["email"], r["_op"]) for r in jsonl(root / "out/cdc"))
    assert got == sorted(expected)
    assert any(op == "delete" for *_, op in expected) == (deletes == "keep")


def test_datagen_changes_kept_in_step_by_a_delta_merge(spark, tmp_path):
    """The documented CDC example: datagen's change events (each key inserted, updated, then
    deleted or updated again, all in one batch) merged with deletes: apply and sequence_by: ts
    leave exactly each key's last image, and no deleted key."""
    root = project(
        tmp_path / "p",
        """
sinks:
  - name: users_table
    from: source:gen.changes
    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: ts}]
    connector: delta
    config: {table_uri: out/users, mode: merge, merge_keys: [user_id]}
""",
        "select 1 as x\n",
    )
    (root / "sources/gen.yml").write_text(
        CDC_SOURCE.replace("DELETES", "apply").split("        transforms:")[0]
    )
    result = rivc(root, "run", "--select", "sink:users_table")
    assert result.exit_code == 0, result.output

    gen = Generator("users", 5, cdc=True)
    last: dict[int, tuple] = {}
    for i in range(90):
        op, before, after, _ = gen.row(i)
        last[(before or after)[0]] = (op, after)
    expected = {k: a for k, (op, a) in last.items() if op != "delete"}
    assert 0 < len(expected) < len(last)  # some keys were deleted, not all
    got = DeltaTable(str(root / "out/users")).to_pyarrow_table()
    assert got.column_names == ["user_id", "name", "email", "created_at"]
    rows = {r["user_id"]: tuple(r.values()) for r in got.to_pylist()}
    assert len(rows) == got.num_rows
    assert rows == {k: tuple(a) for k, a in expected.items()}


def test_consecutive_failures_stop_a_stream(spark, tmp_path):
    root = project(
        tmp_path / "s",
        """
sinks:
  - name: broken
    from: source:land.clicks
    connector: files
    config: {path: out/not_a_dir, format: parquet}
    health_check: false
    retry: {max_attempts: 1, max_consecutive_failures: 2}
    dead_letter: {connector: files, config: {path: out/dlq, format: jsonl}}
""",
        "select 1 as x\n",
    )
    (root / "sources/land.yml").write_text(
        "sources:\n  - name: land\n    connector: files\n    tables:\n      - name: clicks\n"
        "        config: {path: landing, format: json, stream: true, max_files_per_trigger: 1}\n"
        "        columns: {id: bigint, url: string}\n"
    )
    (root / "landing").mkdir()
    for f in range(3):
        rows = [json.dumps({"id": f * 10 + i, "url": f"/p{i}"}) for i in range(4)]
        (root / f"landing/part-{f}.json").write_text("\n".join(rows) + "\n")
    (root / "out").mkdir()
    (root / "out/not_a_dir").write_text("x")

    result = rivc(root, "run", "--select", "sink:broken")
    assert result.exit_code == 1
    assert "2 batches failed in a row (max_consecutive_failures 2): sink stopped" in result.output
    dead = jsonl(root / "out/dlq")
    assert sorted(r["batch_id"] for r in dead) == [0] * 4 + [1] * 4  # the third never ran
    assert {r["attempts"] for r in dead} == {1}


# Files that Spark's own readers and rivc's object-store reader must read to the same values:
# CRLF and CR line ends, blank and whitespace-only lines, a malformed line, U+2028 and other separators inside a
# JSON string, offsets on timestamps, decimals at their precision, 64-bit extremes, NULLs and
# empty text, quoted separators and newline-free quotes in CSV, gzip, and partition
# directories with a NULL and an escaped value.
EDGE_JSON = {
    "region=eu/part-0.json": (
        '{"id": 9223372036854775807, "name": "line\u2028sep\u0085and", '
        '"amount": "12345678.90", "at": "2026-03-29T01:30:00+02:00"}\r\n'
        "\r\n"
        "   \t \n"
        '{"id": -9223372036854775808, "name": "", "amount": null, "at": null}\r'
        '{"id": 3, "name": "ü/=😀", "amount": "-0.01", "at": "1970-01-01T00:00:00Z"}\n'
        "not json at all\n"
        '{"id": 4, "name": null, "amount": "99999999.99", "at": "9999-12-31T23:59:59.999999Z"}'
    ),
    "region=a%20b/part-1.json": '{"id": 5, "name": "spaced", "amount": "1", "at": null}\n',
    "region=__HIVE_DEFAULT_PARTITION__/part-2.json": '{"id": 6, "name": "none"}\n',
}
EDGE_CSV = (
    "id,name,amount,at\r\n"
    '1,"a, quoted ""name""",1.50,2026-01-01 00:00:00\r\n'
    "2,,,\r\n"
    "\r\n"
    "  \r\n"
    '3,"",-99999999.99,1999-12-31 23:59:59.123456\r\n'
)


def test_object_store_files_read_as_spark_reads_them(spark, tmp_path, monkeypatch):
    """A files source on S3 (a moto server) is read by rivc's reader, in Spark's tasks; the same
    files on local disk by Spark's own JSON and CSV readers: the tables are equal, value by
    value."""
    import gzip

    import pyarrow.fs as pafs

    from rivc_testing import S3_KEYS, moto_s3

    with moto_s3() as url:
        for key, value in {**S3_KEYS, "AWS_ENDPOINT_URL": url, "AWS_ALLOW_HTTP": "true"}.items():
            monkeypatch.setenv(key, value)
        fs = pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=url[7:], scheme="http"
        )
        local = tmp_path / "p"
        files = {f"json/{k}": v.encode() for k, v in EDGE_JSON.items()}
        files["csv/plain.csv"] = EDGE_CSV.encode()
        files["csv/zipped.csv.gz"] = gzip.compress(EDGE_CSV.replace("1,", "7,", 1).encode())
        for rel, data in files.items():
            (local / "land" / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / "land" / rel).write_bytes(data)
            with fs.open_output_stream(f"lake/land/{rel}", compression=None) as out:
                out.write(data)
        columns = "{id: bigint, name: string, amount: 'decimal(10,2)', at: timestamp}"
        source = "\n".join(
            f"      - {{name: {fmt}_{where}, columns: {cols},\n"
            f"         config: {{path: '{root}/{fmt}', format: {fmt}}}}}"
            for where, root in (("disk", "land"), ("s3", "s3://lake/land"))
            for fmt, cols in (
                ("json", columns.replace("}", ", region: string}")),
                ("csv", columns),
            )
        )
        models = {
            f"models/{fmt}_{where}.sql": "{{ config(materialized='table') }}\n"
            f"select * from {{{{ source('land', '{fmt}_{where}') }}}}\n"
            for fmt in ("json", "csv")
            for where in ("disk", "s3")
        }
        write_files(
            local,
            {
                "rivc_project.yml": "name: land\n",
                "sources/land.yml": "sources:\n  - name: land\n    connector: files\n"
                f"    tables:\n{source}\n",
                **models,
            },
        )
        result = rivc(local, "run")
        assert result.exit_code == 0, result.output
        for fmt, key in (("json", ["id", "region"]), ("csv", ["id", "name"])):
            disk = DeltaTable(str(local / f"warehouse/{fmt}_disk")).to_pyarrow_table()
            s3 = DeltaTable(str(local / f"warehouse/{fmt}_s3")).to_pyarrow_table()
            order = [(k, "ascending") for k in key]
            assert disk.num_rows >= 5
            assert s3.sort_by(order).to_pylist() == disk.sort_by(order).to_pylist(), (
                fmt,
                s3.sort_by(order).to_pylist(),
                disk.sort_by(order).to_pylist(),
            )
        regions = set(DeltaTable(str(local / "warehouse/json_s3")).to_pyarrow_table()["region"])
        assert {r.as_py() for r in regions} == {"eu", "a b", None}
        names = DeltaTable(str(local / "warehouse/json_s3")).to_pyarrow_table()["name"]
        assert "line\u2028sep\u0085and" in names.to_pylist()  # one value, not three lines
