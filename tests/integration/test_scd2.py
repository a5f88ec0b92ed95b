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


def batch(spark, changes, seq: str = "bigint"):
    """A batch of changes; `seq`: the sequence's type (a change log's is decimal(38,0), which
    Delta's statistics cannot hold exactly; a bigint's they can)."""
    from decimal import Decimal

    number = Decimal if seq.startswith("decimal") else int
    rows = [(k, v, number(s), None, None, d) for k, s, v, d in changes]
    return spark.createDataFrame(
        rows, f"id int, v string, since {seq}, until {seq}, live boolean, _rivc_delete boolean"
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


def closed_only(uri: str) -> set[str]:
    """The table's files whose every row is a closed version."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    dt = DeltaTable(uri)
    return {
        f
        for f in dt.file_uris()
        if (t := pq.read_table(f, columns=["until"])).num_rows
        and not pc.any(pc.is_null(t["until"])).as_py()
    }


@pytest.mark.parametrize("seq", ["bigint", "decimal(38,0)"])
def test_a_batch_in_order_leaves_the_closed_versions_files_alone(spark, tmp_path, seq, monkeypatch):
    """Closed versions go to files of their own; a batch whose every change is later than what
    the table holds of its key (one change of a key, several, a key back after a delete) never
    rewrites them. A late change of a deleted key, whose versions are all in such files, and a
    replay still lay the key out again from every version. A batch whose every start is past
    all the table holds is told from the files' statistics (a bigint's) or footers (a decimal's,
    which rivc's Delta statistics leave out), no rows compared."""
    uri = str(tmp_path / "history")
    seen: list = []
    # (changes, in order, every start past the table's: its statistics tell)
    batches = [
        ([(k, 10, f"a{k}", False) for k in range(1, 7)], True, False),
        ([(1, 20, "b1", False), (2, 20, "b2", False), (4, 20, None, True)], True, True),
        (
            [(1, 30, "c1", False), (5, 25, "b5", False), (5, 35, "c5", False), (7, 5, "n", False)],
            True,
            False,  # the new key 7 starts before other keys' versions
        ),
        ([(4, 40, "back4", False), (3, 41, "b3", False)], True, True),  # 4: closed only
        ([(4, 15, "late4", False)], False, False),  # between a4 (10) and its delete (20)
        (
            [(1, 30, "c1", False), (5, 25, "b5", False), (5, 35, "c5", False), (7, 5, "n", False)],
            False,
            False,
        ),
    ]
    from rivc.adapters.lake import history

    compared: list = []
    monkeypatch.setattr(
        history, "in_order", lambda *a, f=history.in_order: compared.append(1) or f(*a)
    )
    for changes, in_order, past in batches:
        kept = closed_only(uri) if seen else set()
        compared.clear()
        merge(batch(spark, changes, seq), uri, Store(), ("id",), history=NAMES)
        assert table(uri) == expected(seen + changes), changes
        if in_order:
            assert kept <= set(DeltaTable(uri).file_uris())  # not one rewritten
            # the statistics or footers tell a batch past the table's: no rows compared
            assert bool(compared) == (bool(seen) and not past), changes
        seen += changes
    assert closed_only(uri)  # the layout holds: closed versions apart
    rows = table(uri)
    assert (4, "a4", 10, 15, False) in rows and (4, "late4", 15, 20, False) in rows
    assert (4, "back4", 40, None, True) in rows


def test_a_decimal_sequence_is_compared_exactly(spark, tmp_path, monkeypatch):
    """A change log's sequence: decimal(38,0) values past a float's precision. A replay of the
    last batch (its starts equal to the table's newest, one digit from a float's rounding) is
    laid out again and changes nothing; the next change (one more in the last digit) is seen
    past the table's from the footers, no rows compared."""
    from rivc.adapters.lake import history

    compared: list = []
    monkeypatch.setattr(
        history, "in_order", lambda *a, f=history.in_order: compared.append(1) or f(*a)
    )
    uri = str(tmp_path / "history")
    big = 10**37
    first = [(1, big + 1, "a", False), (2, big + 1, "x", False)]
    second = [(1, big + 2, "b", False)]
    seen: list = []
    for changes, compares in ((first, False), (second, False), (second, True)):
        compared.clear()
        merge(batch(spark, changes, "decimal(38,0)"), uri, Store(), ("id",), history=NAMES)
        seen += changes  # a replay adds nothing: the history is a set of versions
        assert table(uri) == expected(seen), changes
        assert bool(compared) == compares, changes
    rows = table(uri)
    assert (1, "a", big + 1, big + 2, False) in rows and (1, "b", big + 2, None, True) in rows
    assert len(rows) == 3


def test_random_batches_give_the_history_they_describe(spark, tmp_path, monkeypatch):
    """Seeded random batches: several changes of a key in one batch, deletes, keys that come
    back, late changes and whole replays, each merge compared with the history worked out here;
    both ways of merging (a batch in order, any other) taken."""
    import random

    from rivc.adapters.lake import history

    fast = []
    monkeypatch.setattr(history, "appended", lambda *a, f=history.appended: fast.append(1) or f(*a))
    rng = random.Random(20261129)
    uri = str(tmp_path / "history")
    seen: list = []
    done: list[list] = []
    used: set[tuple[int, int]] = set()
    top = 100
    for step in range(10):
        if done and rng.random() < 0.15:
            changes = rng.choice(done)  # a replay after a kill
        else:
            changes = []
            for _ in range(rng.randint(1, 12)):
                key = rng.randint(1, 8)
                late = rng.random() < 0.2
                seq = rng.randint(1, top) if late else (top := top + rng.randint(1, 5))
                if (key, seq) in used:
                    continue
                used.add((key, seq))
                deleted = rng.random() < 0.2
                changes.append((key, seq, None if deleted else f"v{step}.{seq}", deleted))
            done.append(changes)
        merge(batch(spark, changes, "decimal(38,0)"), uri, Store(), ("id",), history=NAMES)
        seen += changes
        assert table(uri) == expected(seen), (step, changes)
    assert 2 <= len(fast) <= 8, len(fast)
