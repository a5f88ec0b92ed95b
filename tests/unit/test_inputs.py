"""Which compiled SQL a table model may be reused for: no value that changes from run to run,
no relation rivc does not version (adapters/models/inputs.py)."""

from __future__ import annotations

import pytest

from rivc.adapters.models.inputs import _reads_only

KNOWN = frozenset({"orders", "shop__customers"})


@pytest.mark.parametrize(
    "sql",
    [
        "select * from orders",
        "select o.id, c.name from orders o join shop__customers c on o.cid = c.id",
        "with recent as (select * from orders where ts > '2026-01-01') select * from recent",
        "select unix_timestamp(ts) as t, date_add(ts, 1) as d from orders",
        "select * from (select id from orders) x union all select 1",
    ],
)
def test_the_same_sql_over_the_same_inputs_may_be_reused(sql):
    assert _reads_only(sql, KNOWN)


@pytest.mark.parametrize(
    "sql",
    [
        "select current_date() as d from orders",
        "select current_timestamp as t from orders",
        "select now() from orders",
        "select unix_timestamp() from orders",
        "select rand() as r from orders",
        "select uuid() from orders",
        "select monotonically_increasing_id() from orders",
        "select input_file_name() from orders",
        "select * from orders tablesample (10 percent)",
        "select * from other_table",  # not a parent: rivc has no version of it
        "select * from prod.orders",  # a catalog's table
        "select * from range(10)",
        "select * from orders where",  # not SQL sqlglot reads: built every run
    ],
)
def test_a_value_of_the_moment_or_an_unknown_relation_builds_every_run(sql):
    assert not _reads_only(sql, KNOWN)
