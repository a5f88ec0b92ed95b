"""Seeds as dbt users have them: seeds/*.csv loaded into Delta tables by `rivc seed` and by
`build` in DAG order, every value exact (read back with delta-rs), `ref()`-able, tested, and
held once across reruns and a kill."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from rivc_testing import last_run, rivc, run_rivc

pytestmark = pytest.mark.integration

EDGES = (
    "id,price,big,flag,day,at,name,code\n"
    "1,1.10,9223372036854775807,true,2024-02-29,2024-01-01 10:00:00,kevin parker's favorite,007\n"
    '2,-0.05,-9223372036854775808,FALSE,1970-01-01,1999-12-31T23:59:59.999999,"say ""hi""",120\n'
    '3,,,,,,"two\nlines",\n'
    '4,1234567.00,0,false,9999-12-31,2024-06-30T12:00:00Z,"",0\n'
    '5,,,,,,"a Windows\r\nline end, kept",\r\n'  # and a row that ends in one
)

EXPECTED = [
    {
        "id": 1,
        "price": Decimal("1.10"),
        "big": 9223372036854775807,
        "flag": True,
        "day": dt.date(2024, 2, 29),
        "at": dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC),
        "name": "kevin parker's favorite",
        "code": "007",
    },
    {
        "id": 2,
        "price": Decimal("-0.05"),
        "big": -9223372036854775808,
        "flag": False,
        "day": dt.date(1970, 1, 1),
        "at": dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        "name": 'say "hi"',
        "code": "120",
    },
    {
        "id": 3,
        "price": None,
        "big": None,
        "flag": None,
        "day": None,
        "at": None,
        "name": "two\nlines",
        "code": None,
    },
    {
        "id": 4,
        "price": Decimal("1234567.00"),
        "big": 0,
        "flag": False,
        "day": dt.date(9999, 12, 31),
        "at": dt.datetime(2024, 6, 30, 12, 0, tzinfo=dt.UTC),
        "name": None,  # an empty field, quoted or not, is NULL (as dbt loads it)
        "code": "0",
    },
    {
        "id": 5,
        "price": None,
        "big": None,
        "flag": None,
        "day": None,
        "at": None,
        "name": "a Windows\r\nline end, kept",
        "code": None,
    },
]

FILES = {
    "seeds/edges.csv": EDGES,
    "seeds/edges.yml": """
        seeds:
          - name: edges
            columns:
              - name: id
                tests: [unique, not_null]
    """,
    "models/priced.sql": (
        "{{ config(materialized='table') }}\n"
        "select id, price * 2 as doubled, name from {{ ref('edges') }} where price is not null\n"
    ),
}


def rows(root: Path, name: str) -> list[dict]:
    table = DeltaTable(str(root / "warehouse" / name)).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def results(root: Path) -> dict[str, str]:
    data = last_run(root)
    return {r["node"]: r["status"] for r in data["results"]}


def test_a_seed_loads_every_edge_value_exactly_and_models_read_it(make_project):
    root = make_project(FILES)
    ran = rivc(root, "seed")
    assert ran.exit_code == 0, ran.output
    assert results(root) == {"seed:edges": "success"}  # seeds only: no model, no test
    assert rows(root, "edges") == EXPECTED
    schema = DeltaTable(str(root / "warehouse/edges")).to_pyarrow_table().schema
    assert str(schema.field("price").type) == "decimal128(9, 2)"  # never a float
    assert str(schema.field("id").type) == "int32"

    built = rivc(root, "build")
    assert built.exit_code == 0, built.output
    done = results(root)
    assert done["seed:edges"] == "success" and done["model:priced"] == "success"
    assert done["test:unique_edges_id"] == "pass"
    assert rows(root, "priced") == [
        {"id": 1, "doubled": Decimal("2.20"), "name": "kevin parker's favorite"},
        {"id": 2, "doubled": Decimal("-0.10"), "name": 'say "hi"'},
        {"id": 4, "doubled": Decimal("2469134.00"), "name": None},
    ]
    assert rows(root, "edges") == EXPECTED
    table = DeltaTable(str(root / "warehouse/edges"))
    version = table.version()
    data = last_run(root)["results"]
    seed = next(r for r in data if r["node"] == "seed:edges")
    assert seed["message"].startswith("unchanged")  # the table holds this file already
    assert table.version() == version

    (root / "seeds/edges.csv").write_text(EDGES.replace("kevin parker's favorite", "edited"))
    assert rivc(root, "seed").exit_code == 0
    assert [r["name"] for r in rows(root, "edges")][0] == "edited"  # replaced: every row once
    assert len(rows(root, "edges")) == len(EXPECTED)
    again = rivc(root, "seed", "--full-refresh")  # loads it again, unchanged or not
    assert again.exit_code == 0
    assert DeltaTable(str(root / "warehouse/edges")).version() == version + 2


def test_run_reads_a_seed_it_does_not_load_and_names_rivc_seed_when_missing(make_project):
    root = make_project(FILES)
    first = rivc(root, "run", "--select", "priced")
    assert first.exit_code == 2  # refused before any node runs
    assert "seed 'edges' has not been built yet; run `rivc seed --select +edges`" in first.output
    assert rivc(root, "seed").exit_code == 0
    second = rivc(root, "run", "--select", "priced")
    assert second.exit_code == 0, second.output
    assert [r["id"] for r in rows(root, "priced")] == [1, 2, 4]


def test_a_seed_killed_after_its_commit_is_held_once_after_the_rerun(make_project):
    root = make_project(FILES)
    killed = run_rivc(root, "after-commit:edges", "seed")
    assert killed.returncode != 0
    assert rows(root, "edges") == EXPECTED  # the commit landed
    version = DeltaTable(str(root / "warehouse/edges")).version()
    again = run_rivc(root, None, "seed")
    assert again.returncode == 0, again.stderr
    assert rows(root, "edges") == EXPECTED
    # the resumed run found its batch in the table and committed nothing again
    assert DeltaTable(str(root / "warehouse/edges")).version() == version


def test_values_a_type_would_change_are_kept_as_written(make_project):
    """NULL-looking text, NaN and Infinity, a number past decimal(38) or a double, and
    timestamps at the ends of the calendar and in other zones: exact, or text, never changed."""
    seed = (
        "id,txt,num,big,far,ts\n"
        "1,null,NaN,123456789012345678901234567890123456789,1e300,2024-03-10 02:30:00+05:30\n"
        "2,NULL,Infinity,1.5,1e400,2024-03-10T02:30:00Z\n"
        "3,none,-Infinity,2,2,9999-12-31 23:59:59.999999\n"
        '4,.,"",3,3,0001-01-01 00:00:00\n'
    )
    root = make_project({"seeds/edge.csv": seed})
    assert rivc(root, "seed").exit_code == 0
    table = DeltaTable(str(root / "warehouse/edge")).to_pyarrow_table()
    assert [str(f.type) for f in table.schema] == [
        "int32",
        "string",
        "string",
        "string",
        "string",
        "timestamp[us, tz=UTC]",
    ]
    got = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert [r["txt"] for r in got] == ["null", "NULL", "none", "."]
    assert [r["num"] for r in got] == ["NaN", "Infinity", "-Infinity", None]
    assert got[0]["big"] == "123456789012345678901234567890123456789"
    assert [r["far"] for r in got] == ["1e300", "1e400", "2", "3"]  # 1e400 is no double
    utc = dt.UTC
    assert [r["ts"] for r in got] == [
        dt.datetime(2024, 3, 9, 21, 0, tzinfo=utc),
        dt.datetime(2024, 3, 10, 2, 30, tzinfo=utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
        dt.datetime(1, 1, 1, tzinfo=utc),
    ]


def test_a_sink_of_a_seed_takes_each_version_once_across_a_lost_state(make_project):
    """A seed is a tracked input like a table model: a sink delivers it when its table has a new
    version, and nothing when it does not, even after `.rivc/` is lost."""
    import shutil

    sink = "sinks:\n  - {name: lake, from: codes, connector: delta,\n"
    sink += "     config: {table_uri: out/codes, mode: overwrite}}\n"
    root = make_project({"seeds/codes.csv": "code,label\n1,a\n2,b\n", "sinks/s.yml": sink})
    assert rivc(root, "build").exit_code == 0
    lake = DeltaTable(str(root / "out/codes"))
    first = lake.version()
    assert sorted(r["code"] for r in lake.to_pyarrow_table().to_pylist()) == [1, 2]
    shutil.rmtree(root / ".rivc")  # the record is gone; the tables keep their places
    again = rivc(root, "build")
    assert again.exit_code == 0, again.output
    assert DeltaTable(str(root / "out/codes")).version() == first  # nothing new to deliver
    (root / "seeds/codes.csv").write_text("code,label\n1,a\n2,b\n3,c\n")
    assert rivc(root, "build").exit_code == 0
    rows = DeltaTable(str(root / "out/codes")).to_pyarrow_table().to_pylist()
    assert sorted(r["code"] for r in rows) == [1, 2, 3]  # the new version, each row once
