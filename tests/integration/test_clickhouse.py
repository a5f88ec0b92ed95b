"""The clickhouse sink against Debian's ClickHouse server (18.16, a server of the tests' own),
read back with clickhouse-client over the native protocol: every type exactly at its edges, a
rerun and a lost .rivc/ inserting nothing, kills mid-insert and before the marker leaving each
row once, an upsert of change envelopes equal to the delta sink's merge of the same changes, and
refusals by column and value with nothing landed and no password shown."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rivc_testing import clickhouse_server, rivc, run_rivc, write_files

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    with clickhouse_server(tmp_path_factory.mktemp("clickhouse")) as server:
        yield server


UNESCAPE = {"\\": "\\", "t": "\t", "n": "\n", "0": "\0", "'": "'"}


def read(port: int, sql: str) -> list[list[str | None]]:
    """A query's rows through clickhouse-client over the native protocol (TabSeparated,
    unescaped here; NULL as None)."""
    out = subprocess.run(
        ["clickhouse-client", "--port", str(port), "-q", sql + " FORMAT TabSeparated"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [
        [
            None if v == "\\N" else re.sub(r"\\(.)", lambda m: UNESCAPE[m.group(1)], v)
            for v in line.split("\t")
        ]
        for line in out.splitlines()
    ]


def execute(port: int, sql: str) -> None:
    subprocess.run(["clickhouse-client", "--port", str(port), "-q", sql], check=True)


def fresh(port: int, name: str) -> str:
    execute(port, f"DROP DATABASE IF EXISTS {name}")
    return name


EDGES = """{{ config(materialized='table') }}
select * from values
  (1, cast(-9223372036854775808 as bigint), cast('Infinity' as double), cast('-0' as double),
   4.9e-324d, cast(3.4028235e38 as float), cast('12345678901234567890.0123456789' as
   decimal(38,10)), concat('tab', chr(9), 'nl', chr(10), 'bs', chr(92), 'N', chr(0), 'żółw 🐢'),
   unhex('00FF5C0A09'), date'1970-01-01', timestamp'2105-12-31 23:59:59', true,
   array('it''s', concat('x', chr(10), chr(92), chr(9)), null), array(cast('NaN' as double),
   -1.5d, null), cast(127 as tinyint)),
  (2, null, null, null, null, null, null, null, null, null, null, null, array(), array(), null),
  (1, cast(-9223372036854775808 as bigint), cast('Infinity' as double), cast('-0' as double),
   4.9e-324d, cast(3.4028235e38 as float), cast('12345678901234567890.0123456789' as
   decimal(38,10)), concat('tab', chr(9), 'nl', chr(10), 'bs', chr(92), 'N', chr(0), 'żółw 🐢'),
   unhex('00FF5C0A09'), date'2105-12-31', timestamp'1970-01-01 00:00:00', false,
   array(), array(), cast(-128 as tinyint))
as t(id, big, pinf, negzero, tiny, flt, dec, txt, bin, d, ts, flag, words, nums, small)
"""


def test_every_type_lands_exactly_and_a_rerun_or_a_lost_rivc_inserts_nothing(spark, tmp_path, ch):
    url, port = ch
    db = fresh(port, "edges")
    root = write_files(
        tmp_path / "e",
        {
            "rivc_project.yml": "name: che\n",
            "models/edges.sql": EDGES,
            "sinks/ch.yml": f"""
sinks:
  - {{name: edges_ch, from: edges, connector: clickhouse,
     config: {{url: "{url}", database: {db}, table: edges, username: rivc,
               password: ch-s3cret, batch_size: 2}}}}
""",
        },
    )
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    got = read(
        port,
        f"SELECT id, toString(big), toString(pinf), toString(negzero), toString(tiny), "
        f"toString(flt), toString(dec), hex(txt), hex(bin), toUInt16(d), "
        f"toUnixTimestamp(ts), toString(flag), toString(words), toString(nums), "
        f"toString(small), _rivc_batch FROM {db}.edges ORDER BY id, small",
    )
    first = [
        "1",
        "-9223372036854775808",
        "inf",
        "-0",
        "5e-324",
        "3.4028235e38",
        "12345678901234567890.0123456789",
        "tab\tnl\nbs\\N\0żółw 🐢".encode().hex().upper(),
        "00FF5C0A09",
    ]
    assert got == [
        [*first, "49672", "0", "0", "[]", "[]", "-128", "0"],
        [
            *first,
            "0",
            "4291747199",
            "1",
            "['it\\'s','x\\n\\\\\\t',NULL]",
            "[nan,-1.5,NULL]",
            "127",
            "0",
        ],
        ["2", *[None] * 11, "[]", "[]", None, "0"],
    ]
    kinds = dict(
        (n, t)
        for n, t in read(
            port,
            f"SELECT name, type FROM system.columns WHERE database = '{db}' AND table = 'edges'",
        )
    )
    assert (
        kinds["ts"] == "Nullable(DateTime('UTC'))" and kinds["dec"] == "Nullable(Decimal(38, 10))"
    )
    assert kinds["words"] == "Array(Nullable(String))" and kinds["flt"] == "Nullable(Float32)"
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    shutil.rmtree(root / ".rivc")  # the commits are in ClickHouse, beside the table
    third = rivc(root, "run")
    assert third.exit_code == 0, third.output
    assert read(port, f"SELECT count() FROM {db}.edges") == [["3"]]
    marks = read(port, f"SELECT id, version FROM {db}._rivc_commits FINAL ORDER BY id")
    assert ["rivc:che:edges_ch", "0"] in marks
    assert "ch-s3cret" not in done.output + again.output + third.output
    manifest = (root / "target/manifest.json").read_text()
    manifest += (root / "target/rivc_manifest.json").read_text()
    assert "ch-s3cret" not in manifest


MODEL = """{{ config(materialized='table') }}
select id, concat('v', id, '-', {{ var('round', 1) }}) as v
from range({{ var('low', 0) }}, {{ var('high', 1000) }}) as r(id)
"""


def test_killed_mid_insert_and_before_the_marker_each_row_once(spark, tmp_path, ch):
    url, port = ch
    db = fresh(port, "kills")
    root = write_files(
        tmp_path / "k",
        {
            "rivc_project.yml": "name: chk\n",
            "models/nums.sql": MODEL,
            "sinks/ch.yml": f"""
sinks:
  - {{name: appended, from: nums, connector: clickhouse,
     config: {{url: "{url}", database: {db}, table: appended, batch_size: 300}}}}
  - {{name: upserted, from: nums, connector: clickhouse,
     config: {{url: "{url}", database: {db}, table: upserted, mode: upsert, key_columns: [id],
               batch_size: 300}}}}
""",
        },
    )
    first = rivc(root, "run")
    assert first.exit_code == 0, first.output
    second = ("run", "--vars", "{round: 2, low: 500, high: 1500}")
    killed = run_rivc(root, "mid-publish:appended", *second)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    # one request of the second batch inserted, visible, without its marker
    assert read(port, f"SELECT count() FROM {db}.appended WHERE _rivc_batch = 1") == [["300"]]
    killed = run_rivc(root, "before-commit:upserted", *second)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    rerun = rivc(root, *second)
    assert rerun.exit_code == 0, rerun.output
    appended = Counter(tuple(r) for r in read(port, f"SELECT id, v FROM {db}.appended"))
    assert appended == Counter(
        [(str(i), f"v{i}-1") for i in range(1000)] + [(str(i), f"v{i}-2") for i in range(500, 1500)]
    )
    upserted = read(
        port, f"SELECT id, v FROM {db}.upserted FINAL WHERE _rivc_deleted = 0 ORDER BY id"
    )
    assert upserted == [[str(i), f"v{i}-{1 if i < 500 else 2}"] for i in range(1500)]
    assert read(port, "SELECT count() FROM system.mutations WHERE is_done = 0") == [["0"]]


CHANGES = """{{ config(materialized='table') }}
{% set rounds = {
  1: [(1, 'c', 'a', 1), (2, 'c', 'b', 1), (3, 'c', 'c', 1), (4, 'c', 'd', 1)],
  2: [(1, 'u', 'a2', 2), (1, 'd', 'a2', 3), (2, 'u', 'b2', 2), (2, 'u', 'b3', 3),
      (5, 'c', 'e', 2), (5, 'u', 'e2', 4), (3, 'd', 'c', 5), (3, 'c', 'c-again', 6)],
} %}
{% for id, op, v, seq in rounds[var('round', 1)] %}
select '{{ op }}' as op, {{ seq }} as seq,
  {% if op == 'd' %}named_struct('id', {{ id }}, 'v', '{{ v }}'){% else %}cast(null as struct<id:int,v:string>){% endif %} as before,
  {% if op != 'd' %}named_struct('id', {{ id }}, 'v', '{{ v }}'){% else %}cast(null as struct<id:int,v:string>){% endif %} as after
{% if not loop.last %}union all{% endif %}
{% endfor %}
"""


def test_an_upsert_of_changes_equals_the_delta_sinks_merge_of_them(spark, tmp_path, ch):
    url, port = ch
    db = fresh(port, "changes")
    unwrap = "[{type: unwrap_cdc, deletes: apply, sequence_by: seq}]"
    root = write_files(
        tmp_path / "c",
        {
            "rivc_project.yml": "name: chc\n",
            "models/changes.sql": CHANGES,
            "sinks/out.yml": f"""
sinks:
  - {{name: ch_upsert, from: changes, connector: clickhouse, transforms: {unwrap},
     config: {{url: "{url}", database: {db}, table: current, mode: upsert, key_columns: [id]}}}}
  - {{name: lake, from: changes, connector: delta, transforms: {unwrap},
     config: {{table_uri: out/current, mode: merge, merge_keys: [id]}}}}
""",
        },
    )
    for round_ in (1, 2):
        done = rivc(root, "run", "--vars", f"{{round: {round_}}}")
        assert done.exit_code == 0, done.output
    from deltalake import DeltaTable

    lake = sorted(
        (r["id"], r["v"])
        for r in DeltaTable(str(root / "out/current")).to_pyarrow_table().to_pylist()
    )
    got = read(port, f"SELECT id, v FROM {db}.current FINAL WHERE _rivc_deleted = 0 ORDER BY id")
    assert [(int(i), v) for i, v in got] == lake == [(2, "b3"), (3, "c-again"), (4, "d"), (5, "e2")]
    # the delete of key 1 is a row of its own: the newest version, flagged
    assert read(
        port, f"SELECT _rivc_deleted, _rivc_batch FROM {db}.current FINAL WHERE id = 1"
    ) == [["1", "1"]]


def test_refusals_name_the_column_and_value_and_nothing_lands(spark, tmp_path, ch):
    url, port = ch
    db = fresh(port, "refused")
    model = "{{ config(materialized='table') }}\nselect 1 as id, VALUE as x\n"
    root = write_files(
        tmp_path / "r",
        {
            "rivc_project.yml": "name: chr\n",
            "models/m.sql": model.replace("VALUE", "cast(named_struct('a', 1) as struct<a:int>)"),
            "sinks/ch.yml": f"""
sinks:
  - {{name: to_ch, from: m, connector: clickhouse,
     config: {{url: "{url}", database: {db}, table: t}}}}
""",
        },
    )
    compiled = rivc(root, "compile")
    assert compiled.exit_code == 2
    assert re.search(r"sinks/ch\.yml:\d+.*cannot hold column 'x'.*struct", compiled.output), (
        compiled.output
    )
    cases = {  # the struct again, its type known only when the model ran
        "named_struct('a', 1)": "cannot hold column 'x', of type struct<a:int>: the ClickHouse sink",
        "timestamp'2026-01-01 00:00:00.5'": "column 'x' holds 2026-01-01 00:00:00.500000",
        "date'1969-12-31'": "column 'x' holds 1969-12-31; a ClickHouse Date holds 1970-01-01",
        "timestamp'2106-01-01 00:00:00'": "2105-12-31 23:59:59",
        "cast(null as array<int>)": "column 'x' holds NULL; the table's column is Array(Nullable(Int32)), which cannot",
    }
    for value, said in cases.items():
        (root / "models/m.sql").write_text(model.replace("VALUE", value))
        failed = rivc(root, "run")
        assert failed.exit_code == 1, failed.output
        assert "sink" in failed.output and said in failed.output, failed.output
        landed = f"SELECT count() FROM system.parts WHERE database = '{db}' AND table = 't'"
        assert read(port, landed) == [["0"]]  # no part: nothing inserted
        shutil.rmtree(root / ".rivc")
        execute(port, f"DROP TABLE IF EXISTS {db}.t")
    # a table of the user's whose column would not hold the values exactly
    execute(
        port,
        f"CREATE TABLE {db}.t (id Int32, x Nullable(Int16), _rivc_batch Int64) ENGINE = MergeTree ORDER BY id",
    )
    (root / "models/m.sql").write_text(model.replace("VALUE", "cast(40000 as int)"))
    failed = rivc(root, "run")
    assert failed.exit_code == 1
    assert "column 'x' is Nullable(Int16); the batch's values need Int32" in failed.output
    # a table of the user's with rows and no _rivc_batch: refused with the ALTER that adds it,
    # after which its rows are kept as they are
    execute(
        port, f"CREATE TABLE {db}.u (id Int32, x Nullable(Int32)) ENGINE = MergeTree ORDER BY id"
    )
    execute(port, f"INSERT INTO {db}.u VALUES (100, 7)")
    (root / "sinks/ch.yml").write_text(
        f'sinks:\n  - {{name: to_ch, from: m, connector: clickhouse, config: {{url: "{url}", '
        f"database: {db}, table: u}}}}\n"
    )
    failed = rivc(root, "run")
    assert failed.exit_code == 1
    alter = f"ALTER TABLE {db}.u ADD COLUMN _rivc_batch Int64 DEFAULT -1"
    assert alter in failed.output, failed.output
    execute(port, alter)
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    got = read(port, f"SELECT id, x, _rivc_batch FROM {db}.u ORDER BY id")
    assert got[0][:2] == ["1", "40000"] and int(got[0][2]) >= 0  # a batch of rivc's
    assert got[1] == ["100", "7", "-1"]  # the user's row, as it was
    # a wrong password: the server's refusal, the password nowhere
    (root / "sinks/ch.yml").write_text(
        f'sinks:\n  - {{name: to_ch, from: m, connector: clickhouse, config: {{url: "{url}", '
        f"database: {db}, table: t, username: rivc, password: not-this-one}}}}\n"
    )
    failed = rivc(root, "run")
    assert failed.exit_code == 1
    assert "Wrong password for user rivc" in failed.output, failed.output
    assert "not-this-one" not in failed.output, failed.output
    assert read(port, f"SELECT count() FROM {db}.t") == [["0"]]
    # Rivven's keys: lz4 refused with what to write instead, at its line
    (root / "sinks/ch.yml").write_text(
        f"sinks:\n  - name: to_ch\n    from: m\n    connector: clickhouse\n    config:\n"
        f'      url: "{url}"\n      table: t\n      compression: lz4\n'
    )
    refused = rivc(root, "compile")
    assert refused.exit_code == 2 and "sinks/ch.yml:8" in refused.output, refused.output
    assert "compression: gzip" in refused.output


def test_the_marker_decides_after_a_lost_connection(tmp_path: Path, ch):
    """Without Spark: an attempt that inserted rows and lost the server before its marker is
    begun again by the next, which deletes what it inserted first."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    from rivc.adapters.connectors.clickhouse.sink import ClickHouseSink, Transient
    from rivc.adapters.connectors.clickhouse.spec import ClickHouseSinkConfig
    from rivc.adapters.plane.base import SinkContext

    url, port = ch
    db = fresh(port, "retry")
    cfg = ClickHouseSinkConfig(
        url=url, database=db, table="t", batch_size=2, max_retries=2, initial_backoff_ms=0
    )
    sink = ClickHouseSink(cfg, SinkContext(root=tmp_path, project="p", sink="s", writer="w1"))
    data = pads.dataset(pa.table({"id": list(range(5))}))
    real = sink.server.query
    calls = {"n": 0}

    def flaky(sql: str, body: bytes | None = None) -> str:
        if (
            sql.startswith(f"INSERT INTO `{db}`.`_rivc_commits`")
            and "rivc.writer" not in (body or b"").decode()
        ):
            calls["n"] += 1
            if calls["n"] == 1:
                raise Transient("lost")
        return real(sql, body)

    sink.server.query = flaky  # type: ignore[method-assign]
    result = sink.write(data, 0)
    assert result.rows == 5 and calls["n"] == 2
    assert read(port, f"SELECT id FROM {db}.t ORDER BY id") == [[str(i)] for i in range(5)]
    assert sink.write(data, 0).rows == 0 and sink.last_batch_id() == 0


def test_two_consumers_of_a_source_each_hold_every_row_once(spark, tmp_path, ch, monkeypatch):
    """A postgres table landed incrementally, consumed by the clickhouse sink and a delta sink:
    after a partial selection, a failed sibling (a password that is not set yet) and a lost
    .rivc/, each holds every row once, read back with clickhouse-client and deltalake."""
    from deltalake import DeltaTable
    from rivc_dbs import database, project

    url, port = ch
    db = fresh(port, "consumers")
    with database("postgres") as pg:
        pg.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, v text, at timestamp)",
            "INSERT INTO orders SELECT i, 'v' || i, timestamp '2026-01-01' + i * interval '1 s' "
            "FROM generate_series(1, 100) i",
        )

        def add(first: int, last: int) -> None:
            pg.execute(
                f"INSERT INTO orders SELECT i, 'v' || i, timestamp '2026-01-01' + i * "
                f"interval '1 s' FROM generate_series({first}, {last}) i"
            )

        sinks = f"""
sinks:
  - {{name: ch, from: source:src.orders, connector: clickhouse,
     config: {{url: "{url}", database: {db}, table: orders, username: rivc,
               password_env: CH_PW}}}}
  - {{name: lake, from: source:src.orders, connector: delta, config: {{table_uri: out/lake}}}}
"""
        tables = "- {name: orders, table: orders, mode: incremental, cursor_column: at}"
        root = project(tmp_path, pg, tables, {}, sinks)
        monkeypatch.setenv("CH_PW", "ch-s3cret")
        partial = rivc(root, "run", "--select", "+ch")  # the clickhouse sink alone
        assert partial.exit_code == 0, partial.output
        add(101, 200)
        both = rivc(root, "run")
        assert both.exit_code == 0, both.output
        add(201, 300)
        monkeypatch.delenv("CH_PW")
        failed = rivc(root, "run")  # the clickhouse sink fails, its sibling goes on
        assert failed.exit_code == 1 and "password_env CH_PW is not set" in failed.output
        monkeypatch.setenv("CH_PW", "ch-s3cret")
        add(301, 350)
        again = rivc(root, "run")
        assert again.exit_code == 0, again.output
        shutil.rmtree(root / ".rivc")  # what each consumer took is in its own table
        lost = rivc(root, "run")
        assert lost.exit_code == 0, lost.output

    # rows at the newest cursor value wait for a newer row (docs/sources.md, incremental): 1..349
    held = Counter(int(r[0]) for r in read(port, f"SELECT id FROM {db}.orders"))
    lake = DeltaTable(str(root / "out/lake")).to_pyarrow_table().column("id").to_pylist()
    assert held == Counter(lake) == Counter(range(1, 350))
