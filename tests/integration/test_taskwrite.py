"""The executor writer and reader with edge values: what Spark's tasks write through the
filesystem layer and rivc commits must read back exactly with delta-rs and with rivc's own
file reader (rivc.adapters.plane.tableread)."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from rivc.adapters.lake import deltatable
from rivc.adapters.plane.tableread import read_group
from rivc.adapters.plane.taskwrite import task_write
from rivc.adapters.util.storage import Store

pytestmark = pytest.mark.integration

ROWS = [
    (
        1,
        "NULL",
        1.5,
        Decimal("99999999999999999999999999999999999.999"),
        datetime(1, 1, 1, tzinfo=UTC),
        date(1, 1, 1),
        "a",
    ),
    (
        2,
        "",
        float("nan"),
        Decimal("-0.001"),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        date(9999, 12, 31),
        "b b",
    ),
    (3, "None", float("inf"), None, None, None, None),
    (
        4,
        None,
        float("-inf"),
        Decimal("0.000"),
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
        date(2026, 3, 29),
        "ü/=%20",
    ),
]
# decimals of up to 18 digits, which cross from the JVM to the tasks as unscaled bigints
COMPACT = [
    (Decimal("99999999999999.9999"), Decimal("9")),
    (Decimal("-99999999999999.9999"), Decimal("-9")),
    (None, None),
    (Decimal("-0.0001"), Decimal("0")),
]
DDL = (
    "id bigint, text string, f double, d decimal(38,3), ts timestamp, day date, part string, "
    "c decimal(18,4), small decimal(1,0)"
)


def test_tasks_write_edge_values_that_read_back_exactly(spark, tmp_path):
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")  # not UTC: the task converts
    try:
        df = spark.createDataFrame([r + c for r, c in zip(ROWS, COMPACT, strict=True)], DDL)
        uri = str(tmp_path / "edge")
        store = Store()
        where = "rivc-batch-000000-test"
        written = task_write(df.repartition(2), uri, store, where, "snappy", ("part",))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert sum(w.rows for w in written) == 4
    assert all(w.size == (tmp_path / "edge" / w.rel).stat().st_size for w in written)
    schema = deltatable.arrow_schema(df)
    deltatable.commit(
        uri, store, "append", schema, written, ("part",), stamp=deltatable.Stamp((("edge", 0),))
    )

    table = DeltaTable(uri)
    assert table.transaction_version("edge") == 0
    by_delta = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    files = deltatable.table_files(table, uri)
    by_rivc = sorted(
        pa.Table.from_batches(
            list(read_group(files, deltatable.table_schema(table), store))
        ).to_pylist(),
        key=lambda r: r["id"],
    )
    for got in (by_delta, by_rivc):
        assert [r["id"] for r in got] == [1, 2, 3, 4]
        assert [r["text"] for r in got] == ["NULL", "", "None", None]
        f = [r["f"] for r in got]
        assert f[0] == 1.5 and math.isnan(f[1]) and f[2] == math.inf and f[3] == -math.inf
        assert [r["d"] for r in got] == [ROWS[0][3], ROWS[1][3], None, Decimal("0.000")]
        assert [r["ts"] for r in got] == [ROWS[0][4], ROWS[1][4], None, ROWS[3][4]]
        assert [r["day"] for r in got] == [
            date(1, 1, 1),
            date(9999, 12, 31),
            None,
            date(2026, 3, 29),
        ]
        assert [r["part"] for r in got] == ["a", "b b", None, "ü/=%20"]
        assert [(r["c"], r["small"]) for r in got] == COMPACT
    assert table.schema().to_arrow().field("c").type == pa.decimal128(18, 4)
    assert table.schema().to_arrow().field("small").type == pa.decimal128(1, 0)
    # floats and decimals carry no min/max (a rounded bound would make readers skip matches)
    for w in written:
        assert "f" not in w.stats["minValues"] and "d" not in w.stats["minValues"]
