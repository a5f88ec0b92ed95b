"""mode scd2's history on Spark: changes in three batches, one late and out of order, one
replayed whole (as after a kill), a delete and a key that comes back, merged into a Delta table
and read back with deltalake against the history the changes themselves describe."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from rivc.adapters.lake.deltamerge import merge
from rivc.adapters.util.storage import Store
from rivc.compiler.connector import Scd2Columns
from rivc.compiler.errors import ConnectorError

pytestmark = pytest.mark.integration

NAMES = Scd2Columns(valid_from="since", valid_to="until", is_current="live")


def expected(changes: list[tuple[int, int, str | None, bool]]) -> set[tuple]:
    """The history the changes describe, worked out here without Spark: per key in sequence
    order, each non-delete change is a version until the key's next change."""
    out = set()
    for key in {c[0] for c in changes}:
        mine = sorted({(s, v, d) for k, s, v, d in changes if k == key})
        for n, (seq, value, deleted) in enumerate(mine):
            if not deleted:
                until = mine[n + 1][0] if n + 1 < len(mine) else None
                out.add((key, value, seq, until, until is None))
    return out


def table(uri: str) -> set[tuple]:
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return {(r["id"], r["v"], r["since"], r["until"], r["live"]) for r in rows}


def batch(spark, changes):
    rows = [(k, v, s, None, None, d) for k, s, v, d in changes]
    return spark.createDataFrame(
        rows, "id int, v string, since bigint, until bigint, live boolean, _rivc_delete boolean"
    )


def test_versions_land_in_sequence_order_once_across_replays_and_late_changes(spark, tmp_path):
    uri = str(tmp_path / "history")
    first = [(1, 10, "a", False), (1, 20, "b", False), (2, 10, "x", False), (3, 5, "p", False)]
    second = [
        (1, 30, None, True),  # key 1 deleted: its version b ends at 30
        (2, 40, "y", False),
        (3, 1, "o", False),  # late: before the table's version p
        (1, 50, "c", False),  # key 1 back after its delete
    ]
    third = [(1, 25, "b2", False), (2, 40, "y", False)]  # late between b and the delete; a repeat
    seen: list = []
    for changes in (first, second, second, third):  # the second batch twice: a replay
        merge(batch(spark, changes), uri, Store(), ("id",), history=NAMES)
        seen += changes
        assert table(uri) == expected(seen)
    rows = table(uri)
    assert (1, "b", 20, 25, False) in rows and (1, "b2", 25, 30, False) in rows
    assert (3, "o", 1, 5, False) in rows and (1, "c", 50, None, True) in rows
    assert len(rows) == 8

    with pytest.raises(ConnectorError, match=r"two changes of key \(id=2, since=60\)"):
        merge(
            batch(spark, [(2, 60, "m", False), (2, 60, "n", False)]),
            uri,
            Store(),
            ("id",),
            history=NAMES,
        )
    assert table(uri) == expected(seen)  # nothing written
