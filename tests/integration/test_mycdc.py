"""mysql-cdc end to end, on a MariaDB server of the tests' own with the row-based binlog on: a
snapshot, then inserts of edge values, updates, deletes, a large transaction and a truncate,
landed batch by batch; kills after staging and after landing; a lost .rivc/; a Delta merge, an
Iceberg upsert and a scd2 history equal to the table (and to the landed changes), read with
deltalake and pyiceberg; a server that cannot give whole rows and a purged log refused by name."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pymysql
import pytest
from deltalake import DeltaTable
from rivc_dbs import Db, database

from rivc.adapters.connectors.mysql.binlog import log_end
from rivc.adapters.connectors.mysql.log import SPOOL_BYTES
from rivc_testing import (
    assert_merged_once,
    iceberg_catalog,
    landed_versions,
    rivc,
    run_rivc,
    runs_while_busy,
    start_rivc,
    wait_for,
    write_files,
)

pytestmark = pytest.mark.integration

COLUMNS = "id, status, amount, updated, seen, big, body, raw"
SOURCES = """
sources:
  - name: my
    connector: mysql-cdc
    connection: db
    tables:
      - {name: orders, table: rivc_cdc.orders}
"""
UNWRAP = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
SINKS = (
    f"sinks:\n  - name: lake\n    from: source:my.orders\n{UNWRAP}"
    "    connector: delta\n    config: {table_uri: out/orders, mode: merge, merge_keys: [id]}\n"
    f"  - name: ice\n    from: source:my.orders\n{UNWRAP}"
    "    connector: iceberg\n"
    "    config: {namespace: my, table: orders, mode: upsert, key_fields: [id]}\n"
    f"  - name: history\n    from: source:my.orders\n{UNWRAP}"
    "    connector: delta\n    config: {table_uri: out/history, mode: scd2, merge_keys: [id]}\n"
)
# the mysql sink, into the machine's MariaDB (binlog off): its writes stay out of the source's log
MIRROR = (
    f"  - name: mirror\n    from: source:my.orders\n{UNWRAP}"
    "    connector: mysql\n"
    "    config: {connection: out, table: orders, mode: upsert, key_columns: [id]}\n"
)


def connect(port: int) -> pymysql.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=port,
        user="root",
        autocommit=True,
        init_command="SET time_zone='+00:00'",
    )


def run(con: pymysql.Connection, *sql: str) -> None:
    with con.cursor() as cur:
        for statement in sql:
            cur.execute(statement)


def _utc(v):
    return v.replace(tzinfo=UTC) if isinstance(v, datetime) else v


def source_rows(con) -> dict[int, tuple]:
    with con.cursor() as cur:
        cur.execute(f"SELECT {COLUMNS} FROM rivc_cdc.orders")
        return {r[0]: tuple(_utc(v) for v in r[1:]) for r in cur.fetchall()}


@pytest.fixture
def mirror():
    with database("mysql") as db:
        yield db


def mirror_rows(db: Db) -> dict[int, tuple]:
    """The mysql sink's table."""
    con = db.connect()
    try:
        with con.cursor() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM orders")
            return {r[0]: tuple(_utc(v) for v in r[1:]) for r in cur.fetchall()}
    finally:
        con.close()


def image(r: dict) -> tuple:
    return tuple(r[c] for c in COLUMNS.split(", ")[1:])


def delta_rows(root) -> dict[int, tuple]:
    return {
        r["id"]: image(r)
        for r in DeltaTable(str(root / "out/orders")).to_pyarrow_table().to_pylist()
    }


def iceberg_rows(root) -> dict[int, tuple]:
    table = iceberg_catalog(root).load_table("my.orders").scan().to_arrow().to_pylist()
    return {r["id"]: image(r) for r in table}


def landed_history(root) -> set[tuple]:
    return landed_versions(root, "my.orders", image)


def history_rows(root) -> set[tuple]:
    rows = DeltaTable(str(root / "out/history")).to_pyarrow_table().to_pylist()
    return {(r["id"], image(r), r["valid_from"], r["valid_to"], r["is_current"]) for r in rows}


@pytest.fixture
def shop(binlog_mariadb):
    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_cdc",
        "CREATE DATABASE rivc_cdc",
        "USE rivc_cdc",  # where the seq_1_to_n tables of MariaDB's sequence engine are
        "CREATE TABLE rivc_cdc.orders (id int PRIMARY KEY, status varchar(20), "
        "amount decimal(12,2), updated datetime(6), seen timestamp(6) NULL, "
        "big bigint unsigned, body mediumtext, raw varbinary(16)) CHARSET utf8mb4",
        "INSERT INTO rivc_cdc.orders SELECT seq, 'placed', seq * 1.25, "
        "'2024-01-01 00:00:00' + INTERVAL seq MINUTE, NULL, seq, CONCAT('b', seq), NULL "
        "FROM seq_1_to_2000",
    )
    try:
        yield con
    finally:
        run(
            con,
            "USE mysql",
            "DROP DATABASE IF EXISTS rivc_cdc",
            "SET GLOBAL binlog_format = 'ROW'",
        )
        con.close()


def test_binlog_changes_land_once_and_merge_into_delta_iceberg_and_history_across_kills(
    tmp_path, shop, binlog_mariadb, mirror
):
    con = shop
    root = write_files(
        tmp_path / "proj",
        {
            "rivc_project.yml": "name: mycdc\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_cdc}}\n"
            "    out: {type: mysql, host: 127.0.0.1, user: root, "
            f"database: {mirror.name}}}\n",
            "sources/my.yml": SOURCES,
            "sinks/out.yml": SINKS + MIRROR,
        },
    )
    first = rivc(root, "run")
    assert first.exit_code == 0, first.output
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(mirror)
    assert len(delta_rows(root)) == 2000

    # a partial selection: the merge takes the batch, the history waits for it in the landing
    run(con, "UPDATE rivc_cdc.orders SET status = 'partial' WHERE id = 7")
    only = rivc(root, "run", "--select", "lake")
    assert only.exit_code == 0, only.output
    assert delta_rows(root)[7][0] == "partial"
    assert {v[0] for k, v, *_ in history_rows(root) if k == 7} == {"placed"}

    run(
        con,
        "UPDATE rivc_cdc.orders SET status = 'shipped', amount = 9999999999.99 WHERE id = 5",
        "INSERT INTO rivc_cdc.orders VALUES (5001, '', -0.01, '1000-01-01 00:00:00', "
        "'1970-01-01 00:00:01.000001', 18446744073709551615, 'ünïcode 🚀', x'00ff10'), "
        "(5002, NULL, NULL, '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', 0, '', '')",
        "DELETE FROM rivc_cdc.orders WHERE id BETWEEN 10 AND 19",
        "UPDATE rivc_cdc.orders SET id = 90000, status = 'moved' WHERE id = 30",  # 30 goes
    )
    begun = log_end(con)
    run(
        con,
        "START TRANSACTION",  # one large transaction: never split across batches
        "UPDATE rivc_cdc.orders SET amount = amount + 1 WHERE id > 1000",
        "INSERT INTO rivc_cdc.orders SELECT seq, 'bulk', 1, NOW(6), NOW(6), 1, REPEAT('x', 400), "
        "NULL FROM seq_6000_to_55999",
        "COMMIT",
    )
    # more log than mysql-cdc keeps in memory: the rest waits in a file for the commit
    assert log_end(con)[1] - begun[1] > SPOOL_BYTES
    killed = run_rivc(root, "after-landing")  # landed, no consumer ran
    assert killed.returncode == -9, killed.stderr[-2000:]
    again = run_rivc(root)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    want = source_rows(con)
    assert delta_rows(root) == want == iceberg_rows(root) == mirror_rows(mirror)
    assert want[5001][4] == 18446744073709551615 and want[5001][5] == "ünïcode 🚀"
    assert want[5002][2] == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert want[5001][6] == b"\x00\xff\x10" and want[5002][1] is None and want[5002][5] == ""

    run(con, "UPDATE rivc_cdc.orders SET status = 'late' WHERE id < 100")
    killed = run_rivc(root, "after-staging")  # read, nothing landed
    assert killed.returncode == -9
    (root / ".rivc/state.db").unlink()  # the tables hold the place
    assert rivc(root, "run").exit_code == 0
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(mirror)
    history = landed_history(root)
    assert history_rows(root) == history  # every version once, across both kills
    assert {k: v for k, v, _, _, live in history if live} == source_rows(con)

    run(con, "UPDATE rivc_cdc.orders SET amount = 0 WHERE id BETWEEN 6000 AND 6100")
    killed = run_rivc(root, "between-sinks")  # one consumer committed, the others not yet
    assert killed.returncode == -9
    assert rivc(root, "run").exit_code == 0
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(mirror)
    assert history_rows(root) == landed_history(root)

    run(
        con,
        "TRUNCATE TABLE rivc_cdc.orders",
        "INSERT INTO rivc_cdc.orders (id, status) VALUES (1, 'again'), (2, 'new')",
    )
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(mirror)
    assert len(source_rows(con)) == 2
    assert history_rows(root) == landed_history(root)
    quiet = rivc(root, "run")  # nothing new: no batch
    assert quiet.exit_code == 0 and "no new changes" in quiet.output
    status = rivc(root, "cdc", "status", "--json")
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.output)["cdc"]
    assert row["held"] == row["log_end"] and row["table"] == "source:my.orders"
    shown = rivc(root, "state", "show", "--json")  # read from the tables
    assert shown.exit_code == 0, shown.output
    (source,) = json.loads(shown.output)["sources"]
    assert source["cursor"] == row["held"]
    assert source["log_behind"] == 0  # the quiet run read to the log's end; nothing since
    ran = json.loads(rivc(root, "metrics", "--json").output)["node runs"]
    assert [r["log_behind"] for r in ran if r["node"] == "source:my.orders"][0] == 0
    kept = rivc(root, "cdc", "drop", "my")
    assert kept.exit_code == 2 and "keeps nothing on the server" in kept.output

    run(con, "SET GLOBAL binlog_format = 'MIXED'")
    refused = rivc(root, "run")
    assert (
        refused.exit_code == 1 and "binlog_format is MIXED: mysql-cdc needs ROW" in refused.output
    )
    run(con, "SET GLOBAL binlog_format = 'ROW'")

    with con.cursor() as cur:  # the log the table holds a position in, gone
        run(con, "INSERT INTO rivc_cdc.orders (id) VALUES (3)", "FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        (current, *_) = cur.fetchone()
        for _ in range(50):  # a file a replica connection still reads is kept a moment
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")
            cur.execute("SHOW BINARY LOGS")
            if [r[0] for r in cur.fetchall()] == [current]:
                break
            time.sleep(0.2)
    gone = rivc(root, "run")
    assert gone.exit_code == 1 and "the log between is gone" in gone.output, gone.output
    refreshed = rivc(root, "run", "--full-refresh")
    assert refreshed.exit_code == 0, refreshed.output
    assert delta_rows(root) == source_rows(con) == iceberg_rows(root) == mirror_rows(mirror)
    assert {k: v for k, v, _, _, live in history_rows(root) if live} == source_rows(con)


def test_changes_while_the_snapshot_reads_are_neither_lost_nor_doubled(tmp_path, binlog_mariadb):
    """A writer commits updates, inserts and deletes all through the first run (its snapshot
    of 50,000 rows) and the second: the merged table ends equal to the source, and the landed
    changes hold each committed insert once."""
    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_busy",
        "CREATE DATABASE rivc_busy",
        "USE rivc_busy",
        "CREATE TABLE rivc_busy.t (id int PRIMARY KEY, v int)",
        "INSERT INTO rivc_busy.t SELECT seq, 0 FROM seq_1_to_50000",
    )
    root = write_files(
        tmp_path / "busy",
        {
            "rivc_project.yml": "name: busy\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_busy}}\n",
            "sources/my.yml": "sources:\n  - name: my\n    connector: mysql-cdc\n"
            "    connection: db\n    tables: [{name: t, table: rivc_busy.t}]\n",
            "sinks/out.yml": f"sinks:\n  - name: lake\n    from: source:my.t\n{UNWRAP}"
            "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n",
        },
    )

    def step(mine, key: int, new: int, gone: int) -> None:
        run(
            mine,
            f"UPDATE rivc_busy.t SET v = v + 1 WHERE id = {key}",
            f"INSERT INTO rivc_busy.t VALUES ({new}, 1)",
            f"DELETE FROM rivc_busy.t WHERE id = {gone}",
        )

    try:
        runs_while_busy(root, lambda: connect(binlog_mariadb), step)
        with con.cursor() as cur:
            cur.execute("SELECT id, v FROM rivc_busy.t")
            assert_merged_once(root, "out/t", "my.t", dict(cur.fetchall()))
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_busy")
        con.close()


def test_an_added_column_flows_to_the_sinks_that_evolve_and_other_shape_changes_are_refused(
    tmp_path, binlog_mariadb
):
    """As for postgres-cdc: rows are mapped to the table's columns by name, so a column added
    lands from the first row that has it and reaches sinks with `schema_evolution:
    add_columns`; a column added with a value for the rows already there (a default), a dropped
    column and a renamed table are refused by name."""
    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_shape",
        "CREATE DATABASE rivc_shape",
        "CREATE TABLE rivc_shape.t (id int PRIMARY KEY, v varchar(20))",
        "INSERT INTO rivc_shape.t VALUES (1, 'v1'), (2, 'v2'), (3, 'v3')",
    )
    sources = (
        "sources:\n  - name: s\n    connector: mysql-cdc\n    connection: db\n"
        "    tables:\n      - {name: t, table: rivc_shape.t}\n"
    )
    sinks = (
        f"sinks:\n  - name: lake\n    from: source:s.t\n{UNWRAP}    connector: delta\n"
        "    config: {table_uri: out/t, mode: merge, merge_keys: [id], "
        "schema_evolution: add_columns}\n"
        f"  - name: history\n    from: source:s.t\n{UNWRAP}    connector: delta\n"
        "    config: {table_uri: out/h, mode: scd2, merge_keys: [id], "
        "schema_evolution: add_columns}\n"
    )
    root = write_files(
        tmp_path / "shape",
        {
            "rivc_project.yml": "name: myshape\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_shape}}\n",
            "sources/s.yml": sources,
            "sinks/out.yml": sinks,
        },
    )

    def table() -> dict[int, tuple]:
        with con.cursor() as cur:
            cur.execute("SELECT * FROM rivc_shape.t")
            return {r[0]: tuple(r[1:]) for r in cur.fetchall()}

    def delta(path: str) -> list[dict]:
        return DeltaTable(str(root / path)).to_pyarrow_table().to_pylist()

    try:
        assert rivc(root, "run").exit_code == 0
        run(
            con,
            "INSERT INTO rivc_shape.t VALUES (4, 'before the column')",
            "ALTER TABLE rivc_shape.t ADD COLUMN note varchar(20)",
            "INSERT INTO rivc_shape.t VALUES (5, 'v5', 'n5')",
            "UPDATE rivc_shape.t SET note = 'n1' WHERE id = 1",
            "DELETE FROM rivc_shape.t WHERE id = 3",
        )
        done = rivc(root, "run")
        assert done.exit_code == 0, done.output
        want = table()
        assert want[1] == ("v1", "n1") and want[4] == ("before the column", None)
        assert {r["id"]: (r["v"], r["note"]) for r in delta("out/t")} == want
        history = delta("out/h")
        assert {r["id"]: (r["v"], r["note"]) for r in history if r["is_current"]} == want
        assert len(history) == 3 + 1 + 1 + 1  # the snapshot, 4, 5, the update

        run(con, "ALTER TABLE rivc_shape.t ADD COLUMN qty int NOT NULL DEFAULT 7")
        defaulted = rivc(root, "run")
        assert defaulted.exit_code == 1
        assert "added a column with a value for the rows already there" in defaulted.output

        run(con, "ALTER TABLE rivc_shape.t DROP COLUMN qty, DROP COLUMN note")
        refreshed = rivc(root, "run", "--full-refresh")  # past both
        assert refreshed.exit_code == 0, refreshed.output
        run(con, "INSERT INTO rivc_shape.t VALUES (6, 'v6')")
        assert rivc(root, "run").exit_code == 0
        assert {r["id"]: r["v"] for r in delta("out/t")} == {k: v[0] for k, v in table().items()}

        run(con, "ALTER TABLE rivc_shape.t ADD COLUMN note varchar(20)")
        run(con, "UPDATE rivc_shape.t SET note = 'x' WHERE id = 6")
        run(con, "ALTER TABLE rivc_shape.t DROP COLUMN note")
        dropped = rivc(root, "run")  # the update's row has a column the table no longer has
        assert dropped.exit_code == 1
        assert "column note is in the log but no longer in the table" in dropped.output

        assert rivc(root, "run", "--full-refresh").exit_code == 0
        run(con, "RENAME TABLE rivc_shape.t TO rivc_shape.t_old")
        run(con, "RENAME TABLE rivc_shape.t_old TO rivc_shape.t")
        renamed = rivc(root, "run")
        assert renamed.exit_code == 1
        assert "dropped, renamed or replaced the table" in renamed.output, renamed.output
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_shape")
        con.close()


def log_and_query(path, port: int, database: str):
    """A project reading `database`.t twice: by its log (mysql-cdc source `my`, merged into a
    Delta table at out/t) and by a query (the `mysql` source `q`). Its root."""
    sources = (
        "sources:\n  - name: my\n    connector: mysql-cdc\n    connection: db\n"
        f"    tables: [{{name: t, table: {database}.t}}]\n"
        "  - name: q\n    connector: mysql\n    connection: db\n"
        f"    tables: [{{name: t, table: {database}.t}}]\n"
    )
    return write_files(
        path,
        {
            "rivc_project.yml": f"name: {database}\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {port}, user: root, database: {database}}}\n",
            "sources/s.yml": sources,
            "sinks/out.yml": f"sinks:\n  - name: lake\n    from: source:my.t\n{UNWRAP}"
            "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n",
        },
    )


def queried(root) -> dict[int, dict]:
    """The rows of the query-based source's newest batch, by id."""
    landed = DeltaTable(str(root / "warehouse/_rivc/landing/q.t")).to_pyarrow_table()
    newest = max(landed.column("_rivc_batch").to_pylist())
    rows = [r for r in landed.to_pylist() if r.pop("_rivc_batch") == newest]
    return {r["id"]: r for r in rows}


def merged(root) -> dict[int, dict]:
    """The rows of the log's Delta merge, by id."""
    return {r["id"]: r for r in DeltaTable(str(root / "out/t")).to_pyarrow_table().to_pylist()}


def test_enum_time_and_bit_columns_arrive_as_the_mysql_source_delivers_them(
    tmp_path, binlog_mariadb
):
    """The snapshot (a query) and the log (the binlog's own encoding) give enum, time and bit
    values differently; both land as the query-based `mysql` source delivers them, compared with
    that source over the same table. A set column, whose empty value the log gives as NULL, is
    refused by name."""
    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_kinds",
        "CREATE DATABASE rivc_kinds",
        "CREATE TABLE rivc_kinds.t (id int PRIMARY KEY, e enum('x', 'y', 'zz'), tm time(6), "
        "b1 bit(1), b5 bit(5), b64 bit(64))",
        "INSERT INTO rivc_kinds.t VALUES (1, 'y', '-838:59:59', 1, b'00101', "
        "b'1111111111111111111111111111111111111111111111111111111111111111'), "
        "(2, NULL, NULL, NULL, NULL, NULL), (3, 'x', '-00:00:00.5', 0, b'0', 0)",
    )
    root = log_and_query(tmp_path / "rivc_kinds", binlog_mariadb, "rivc_kinds")

    try:
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        assert merged(root) == queried(root)  # the snapshot
        assert merged(root)[1]["tm"] == "-PT838H59M59S" and merged(root)[1]["b1"] is True
        assert merged(root)[3]["tm"] == "-PT0H0M0.5S"  # from the snapshot's query: exact
        run(
            con,
            "INSERT INTO rivc_kinds.t VALUES (4, 'zz', '838:59:59.999999', 0, b'11111', 1), "
            "(5, 'x', '-00:00:01', 1, b'10000', NULL)",
            "UPDATE rivc_kinds.t SET e = 'zz', tm = '12:30:00', b5 = b'01010' WHERE id = 1",
            "UPDATE rivc_kinds.t SET e = 'x', tm = '-01:00:00', b1 = 1 WHERE id = 2",
        )
        changed = rivc(root, "run")
        assert changed.exit_code == 0, changed.output
        assert merged(root) == queried(root)  # the log
        assert merged(root)[5]["tm"] == "-PT0H0M1S" and merged(root)[4]["b5"] == "11111"

        # negative times with a fraction, from the log's own encoding (sign, whole, fraction)
        run(
            con,
            "INSERT INTO rivc_kinds.t (id, tm) VALUES (6, '-00:00:00.000001'), "
            "(7, '-838:59:58.999999'), (8, '-00:00:01.5')",
        )
        fractions = rivc(root, "run")
        assert fractions.exit_code == 0, fractions.output
        assert merged(root) == queried(root)
        assert [merged(root)[i]["tm"] for i in (6, 7, 8)] == [
            "-PT0H0M0.000001S",
            "-PT838H59M58.999999S",
            "-PT0H0M1.5S",
        ]

        run(con, "ALTER TABLE rivc_kinds.t ADD COLUMN s set('a', 'b')")
        refused = rivc(root, "run", "--select", "source:my.t")
        assert refused.exit_code == 1
        assert "column s has type set" in refused.output, refused.output
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_kinds")
        con.close()


# every column type mysql-cdc reads from the binlog, at its edges (rivc decodes the log itself)
TYPES = (
    "id int PRIMARY KEY, ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned, "
    "mi mediumint, mu mediumint unsigned, i int, iu int unsigned, bi bigint, bu bigint unsigned, "
    "f float, d double, d1 decimal(5, 0), d2 decimal(18, 4), d3 decimal(65, 30), "
    "c char(5), vc varchar(300) CHARACTER SET utf8mb4, vl varchar(10) CHARACTER SET latin1, "
    "tx text CHARACTER SET utf8mb4, vb varbinary(20), bl blob, bn binary(4), dt date, "
    "t0 datetime, t3 datetime(3), t6 datetime(6), ts0 timestamp NULL, ts2 timestamp(2) NULL, "
    "ts4 timestamp(4) NULL, tm0 time, tm1 time(1), tm3 time(3), tm5 time(5), y year, "
    "e enum('a', 'bb', 'ccc'), b bit(12)"
)
EDGES = (
    "(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, "
    "-9223372036854775808, 18446744073709551615, -3.4e38, -1.7976931348623157e308, -99999, "
    "-99999999999999.9999, -99999999.999999999999999999999999999999, "
    "'ab', 'zwölf 🙂 ünï', 'café', 'snow ☃', x'00ff10', x'deadbeef00', x'0102', '1000-01-01', "
    "'1000-01-01 00:00:00', '1000-01-01 00:00:00.001', '9999-12-31 23:59:59.999999', "
    "'1970-01-01 00:00:01', '2038-01-19 03:14:07.99', '2000-02-29 12:00:00.0001', "
    "'-838:59:59', '-00:00:00.1', '-12:34:56.789', '838:59:58.99999', 1901, 'a', b'0')",
    "(2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0, 1.5, 0.1, 99999, "
    "99999999999999.9999, 0.000000000000000000000000000001, '', '', '', '', x'', x'', x'00', "
    "'9999-12-31', '9999-12-31 23:59:59', '2024-02-29 23:59:59.999', '1970-01-01 00:00:00', "
    "'2038-01-19 03:14:07', '1970-01-01 00:00:01.01', '2024-06-30 23:59:59.9999', '838:59:59', "
    "'00:00:00.9', '-00:00:00.001', '-00:00:00.00001', 2155, 'ccc', b'111111111111')",
    "(3, 0, 1, -1, 1, -1, 1, -1, 1, -1, 1, 0, -0.0, 0, -0.0001, -1.5, 'x', 'NULL', NULL, '\\\\N', "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '00:00:00', '-00:00:01.5', "
    "NULL, NULL, 0, NULL, b'100000000001')",
    "(4" + ", NULL" * 36 + ")",
)


def test_every_type_from_the_binlog_equals_the_query_at_its_edges(tmp_path, binlog_mariadb):
    """rivc decodes the binlog itself. Each column type mysql-cdc reads, at its edges (integer
    extremes signed and unsigned, decimals of 5, 18 and 65 digits, text in utf8mb4 and latin1,
    binary, every fractional precision of datetime, timestamp and time, negative times with a
    fraction, year, enum, bit, NULL), lands from the log (inserts, then each row's image
    before and after an update) exactly as the query-based `mysql` source reads the same rows."""
    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_types",
        "CREATE DATABASE rivc_types",
        f"CREATE TABLE rivc_types.t ({TYPES})",
        "INSERT INTO rivc_types.t (id) VALUES (0)",
    )
    root = log_and_query(tmp_path / "rivc_types", binlog_mariadb, "rivc_types")

    def landed() -> list[dict]:
        return DeltaTable(str(root / "warehouse/_rivc/landing/my.t")).to_pyarrow_table().to_pylist()

    try:
        first = rivc(root, "run")
        assert first.exit_code == 0, first.output
        run(con, "INSERT INTO rivc_types.t VALUES " + ", ".join(EDGES))
        inserted = rivc(root, "run")
        assert inserted.exit_code == 0, inserted.output
        for key, want in queried(root).items():
            got = merged(root)[key]
            assert {k: v for k, v in got.items() if want[k] != v} == {}, key
        assert merged(root) == queried(root) and len(merged(root)) == 5
        after_insert = queried(root)
        run(con, "UPDATE rivc_types.t SET ti = -ti WHERE id BETWEEN 1 AND 4 AND ti > -128")
        run(con, "UPDATE rivc_types.t SET ti = 0 WHERE id = 1")
        updated = rivc(root, "run")
        assert updated.exit_code == 0, updated.output
        assert merged(root) == queried(root)
        # the update's before images are the rows as they were inserted, column by column
        changes = [r for r in landed() if r["op"] == "u"]
        assert sorted(r["before"]["id"] for r in changes) == [1, 2]
        for change in changes:
            assert change["before"] == after_insert[change["before"]["id"]]
        assert (
            merged(root)[1]["tm1"] == "-PT0H0M0.1S" and merged(root)[2]["tm5"] == "-PT0H0M0.00001S"
        )
        assert merged(root)[3]["vc"] == "NULL" and merged(root)[3]["tx"] == "\\N"  # text
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_types")
        con.close()


def test_the_binlog_decoder_reads_random_decimals_and_temporals_as_the_query_does(binlog_mariadb):
    """rivc's binlog decoder against pymysql's query of the same rows: 600 rows of random
    decimals of nine precisions and scales, and times, datetimes and timestamps of every
    fractional precision (negative times too), read from the log's row events."""
    import random

    from rivc.adapters.connectors.mysql.stream import ROWS, BinlogDump, BinlogStream

    decimals = [(1, 0), (5, 0), (9, 0), (10, 10), (12, 2), (18, 4), (19, 9), (38, 20), (65, 30)]
    columns = [f"d{p}_{s} decimal({p}, {s})" for p, s in decimals]
    columns += [f"t{f} time({f}), dt{f} datetime({f}), ts{f} timestamp({f}) NULL" for f in range(7)]
    rnd = random.Random(46)

    def number(p: int, s: int) -> str:
        digits = str(rnd.randrange(10 ** rnd.randint(1, p)))
        digits = digits.rjust(s + 1, "0")
        sign = rnd.choice(["", "-"])
        return (
            f"{sign}{digits[: len(digits) - s]}.{digits[len(digits) - s :]}" if s else sign + digits
        )

    def fraction(f: int) -> str:
        return "." + str(rnd.randrange(10**f)).rjust(f, "0") if f else ""

    def row(i: int) -> str:
        values = [str(i)] + [number(p, s) for p, s in decimals]
        for f in range(7):
            hours = rnd.choice([0, 0, 1, 23, 100, 838])
            clock = f"{hours}:{rnd.randrange(60):02}:{rnd.randrange(60 if hours < 838 else 59):02}"
            values.append(f"'{rnd.choice(['', '-'])}{clock}{fraction(f)}'")
            day = f"{rnd.randint(1000, 9999)}-{rnd.randint(1, 12):02}-{rnd.randint(1, 28):02}"
            values.append(f"'{day} {rnd.randrange(24):02}:{rnd.randrange(60):02}:00{fraction(f)}'")
            stamp = rnd.randint(1, 2**31 - 2)
            values.append(f"FROM_UNIXTIME({stamp}{fraction(f)})")
        return "(" + ", ".join(values) + ")"

    con = connect(binlog_mariadb)
    run(con, "DROP DATABASE IF EXISTS rivc_random", "CREATE DATABASE rivc_random")
    try:
        run(con, f"CREATE TABLE rivc_random.t (id int PRIMARY KEY, {', '.join(columns)})")
        start = log_end(con)
        for chunk in range(6):
            rows = ", ".join(row(chunk * 100 + i) for i in range(100))
            run(con, f"INSERT INTO rivc_random.t VALUES {rows}")
        with con.cursor() as cur:
            cur.execute("SELECT * FROM rivc_random.t ORDER BY id")
            queried = [list(r) for r in cur.fetchall()]
        reader = pymysql.connect(host="127.0.0.1", port=binlog_mariadb, user="root")
        logged = []
        dump = BinlogDump(reader, 4646, start, None)
        for kind, _, _, what in BinlogStream(dump, ("rivc_random", "t"), "t"):
            if kind == ROWS:
                logged += [after for _, after in what.images()]
        reader.close()
        assert len(logged) == 600
        for got, want in zip(sorted(logged, key=lambda r: r[0]), queried, strict=True):
            assert got == want
            for g, w in zip(got, want, strict=True):  # a decimal's scale too
                assert str(g) == str(w)
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_random")
        con.close()


def test_a_large_transaction_waits_on_disk_for_its_commit_and_lands_whole_in_pieces(
    tmp_path, binlog_mariadb, monkeypatch
):
    """A transaction's row events wait for its commit (whose place in the log orders it): past
    SPOOL_BYTES in a temporary file, then decoded PIECE changes at a time. Made small here (4 KB
    and 50 changes), one transaction of 2,000 inserts, five updates of one key, a moved key,
    deletes and a re-insert lands whole in one batch, every change in its place in the
    transaction, and the merge equals the table read with pymysql."""
    import tempfile

    from rivc.adapters.connectors.mysql import log as mylog

    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_big",
        "CREATE DATABASE rivc_big",
        "USE rivc_big",
        "CREATE TABLE rivc_big.t (id int PRIMARY KEY, v varchar(40), n int)",
        "INSERT INTO rivc_big.t SELECT seq, 'start', 0 FROM seq_1_to_10",
    )
    root = write_files(
        tmp_path / "big",
        {
            "rivc_project.yml": "name: big\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_big}}\n",
            "sources/s.yml": "sources:\n  - name: my\n    connector: mysql-cdc\n"
            "    connection: db\n    tables: [{name: t, table: rivc_big.t}]\n",
            "sinks/out.yml": f"sinks:\n  - name: lake\n    from: source:my.t\n{UNWRAP}"
            "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n",
        },
    )
    spilled = []
    real = tempfile.TemporaryFile

    def spy(*args, **kwargs):
        spilled.append(kwargs.get("prefix"))
        return real(*args, **kwargs)

    try:
        assert rivc(root, "run").exit_code == 0
        monkeypatch.setattr(mylog, "SPOOL_BYTES", 4096)
        monkeypatch.setattr(mylog, "PIECE", 50)
        monkeypatch.setattr(tempfile, "TemporaryFile", spy)
        con.begin()
        run(
            con,
            "INSERT INTO rivc_big.t SELECT seq, md5(seq), seq FROM seq_100_to_2099",
            *[f"UPDATE rivc_big.t SET n = n + 1, v = 'v{k}' WHERE id = 1" for k in range(5)],
            "UPDATE rivc_big.t SET id = 5000 WHERE id = 2",
            "DELETE FROM rivc_big.t WHERE id BETWEEN 3 AND 7",
            "INSERT INTO rivc_big.t VALUES (3, 'again', 33)",
        )
        con.commit()
        landed = rivc(root, "run")
        assert landed.exit_code == 0, landed.output
        assert spilled == ["rivc-binlog-"]
        with con.cursor() as cur:
            cur.execute("SELECT id, v, n FROM rivc_big.t")
            table = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
        merged = DeltaTable(str(root / "out/t")).to_pyarrow_table().to_pylist()
        assert {r["id"]: (r["v"], r["n"]) for r in merged} == table and len(table) == 2006
        changes = DeltaTable(str(root / "warehouse/_rivc/landing/my.t")).to_pyarrow_table()
        newest = max(changes.column("_rivc_batch").to_pylist())
        batch = sorted(
            (r for r in changes.to_pylist() if r["_rivc_batch"] == newest),
            key=lambda r: (r["seq"], r["op"] == "c"),
        )
        assert len({r["binlog_pos"] for r in batch}) == 1  # one transaction, one commit
        first = batch[0]["seq"]
        assert [int(r["seq"] - first) for r in batch] == [*range(2006), 2005, *range(2006, 2012)]
        ops = [r["op"] for r in batch]
        assert ops == ["c"] * 2000 + ["u"] * 5 + ["d", "c"] + ["d"] * 5 + ["c"]
        assert [r["after"]["v"] for r in batch[2000:2005]] == [f"v{k}" for k in range(5)]
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_big")
        con.close()


def test_a_key_changed_many_times_between_runs_reaches_the_merge_and_the_history_whole(
    tmp_path, binlog_mariadb
):
    """Between two runs, each in its own transaction: one key updated three times while its
    200,000-character column is left alone, a key moved, a key deleted and inserted again. The
    merge equals the table read with pymysql key by key, and the scd2 history holds each
    version of each key once, the long value whole in every one."""
    con = connect(binlog_mariadb)
    long = "ü" + "x" * 199_999
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_many",
        "CREATE DATABASE rivc_many",
        "CREATE TABLE rivc_many.t (id int PRIMARY KEY, v varchar(20), body mediumtext, n int) "
        "CHARSET utf8mb4",
        f"INSERT INTO rivc_many.t VALUES (1, 'start', '{long}', 0), (2, 'two', 'b2', 2), "
        "(3, 'three', 'b3', 3), (4, 'four', NULL, 4)",
    )
    root = write_files(
        tmp_path / "many",
        {
            "rivc_project.yml": "name: many\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_many}}\n",
            "sources/s.yml": "sources:\n  - name: my\n    connector: mysql-cdc\n"
            "    connection: db\n    tables: [{name: t, table: rivc_many.t}]\n",
            "sinks/out.yml": "sinks:\n"
            + "".join(
                f"  - name: {name}\n    from: source:my.t\n{UNWRAP}    connector: delta\n"
                f"    config: {{table_uri: out/{name}, mode: {mode}, merge_keys: [id]}}\n"
                for name, mode in (("lake", "merge"), ("hist", "scd2"))
            ),
        },
    )

    def table() -> dict[int, tuple]:
        with con.cursor() as cur:
            cur.execute("SELECT id, v, body, n FROM rivc_many.t")
            return {r[0]: r[1:] for r in cur.fetchall()}

    try:
        assert rivc(root, "run").exit_code == 0
        versions = {k: [v] for k, v in table().items()}
        for statement in (
            "UPDATE rivc_many.t SET v = 'a' WHERE id = 1",
            "UPDATE rivc_many.t SET v = 'b' WHERE id = 1",
            "UPDATE rivc_many.t SET n = n + 1 WHERE id = 1",
            "UPDATE rivc_many.t SET id = 20 WHERE id = 2",
            "DELETE FROM rivc_many.t WHERE id = 3",
            "INSERT INTO rivc_many.t VALUES (3, 'back', 'b3 again', 33)",
        ):
            run(con, statement)  # autocommit: each its own transaction
            now = table()
            for k, v in now.items():
                if versions.setdefault(k, [])[-1:] != [v]:
                    versions[k].append(v)
        done = rivc(root, "run")
        assert done.exit_code == 0, done.output
        want = table()
        merged = DeltaTable(str(root / "out/lake")).to_pyarrow_table().to_pylist()
        assert {r["id"]: (r["v"], r["body"], r["n"]) for r in merged} == want
        history = DeltaTable(str(root / "out/hist")).to_pyarrow_table().to_pylist()
        current = {r["id"]: (r["v"], r["body"], r["n"]) for r in history if r["is_current"]}
        assert current == want
        held = {}
        for r in sorted(history, key=lambda r: (r["id"], r["valid_from"])):
            held.setdefault(r["id"], []).append((r["v"], r["body"], r["n"]))
        assert held == versions
        assert [v[1] == long for v in held[1]] == [True] * 4
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_many")
        con.close()


def test_a_followed_binlog_reaches_the_table_pass_by_pass_until_ctrl_c(tmp_path, binlog_mariadb):
    """As for postgres-cdc: a `processing_time` trigger below a mysql-cdc table makes the run
    follow the binlog; changes made while it runs reach the merged table, and Ctrl-C stops it
    after the pass with exit 130."""
    import signal

    con = connect(binlog_mariadb)
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_follow",
        "CREATE DATABASE rivc_follow",
        "CREATE TABLE rivc_follow.t (id int PRIMARY KEY, v varchar(20))",
        "INSERT INTO rivc_follow.t VALUES (1, 'v1'), (2, 'v2'), (3, 'v3')",
    )
    root = write_files(
        tmp_path / "follow",
        {
            "rivc_project.yml": "name: myfollow\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_follow}}\n",
            "sources/s.yml": "sources:\n  - name: s\n    connector: mysql-cdc\n    connection: db\n"
            "    tables: [{name: t, table: rivc_follow.t}]\n",
            "sinks/out.yml": f"sinks:\n  - name: lake\n    from: source:s.t\n{UNWRAP}"
            "    connector: delta\n    config: {table_uri: out/t, mode: merge, merge_keys: [id]}\n"
            '    trigger: {processing_time: "500 milliseconds"}\n',
        },
    )

    def table() -> dict[int, str]:
        with con.cursor() as cur:
            cur.execute("SELECT id, v FROM rivc_follow.t")
            return dict(cur.fetchall())

    def merged() -> dict[int, str] | None:
        if not (root / "out/t/_delta_log").exists():
            return None
        rows = DeltaTable(str(root / "out/t")).to_pyarrow_table().to_pylist()
        return {r["id"]: r["v"] for r in rows}

    proc = start_rivc(root)
    try:
        wait_for(proc, lambda: merged() == table())
        for n in range(3):
            run(
                con,
                f"INSERT INTO rivc_follow.t VALUES ({10 + n}, 'new')",
                f"UPDATE rivc_follow.t SET v = 'pass {n}' WHERE id = 1",
                f"DELETE FROM rivc_follow.t WHERE id = {10 + n - 1}",
            )
            wait_for(proc, lambda: merged() == table())
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 130, out[-3000:]
        assert "pass " in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        run(con, "DROP DATABASE IF EXISTS rivc_follow")
        con.close()


def test_after_a_failover_to_a_replica_the_table_reads_on_from_its_gtids(
    tmp_path, binlog_mariadb, mariadb_replica, shop
):
    """The table lands from the primary; the replica (its own binlog files and offsets, the
    same GTIDs) takes over with changes of its own: the next run on the replica reads on from
    the GTIDs the table holds, every change once, sequenced after the landed ones, so the
    merged tables and the history equal the replica's table."""
    con, replica = shop, connect(mariadb_replica)

    def profile(port: int) -> str:
        return (
            "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {port}, user: root, database: rivc_cdc}}\n"
        )

    root = write_files(
        tmp_path / "failover",
        {
            "rivc_project.yml": "name: failover\n",
            "profiles.yml": profile(binlog_mariadb),
            "sources/my.yml": SOURCES,
            "sinks/out.yml": SINKS,
        },
    )
    # the primary's files numbered past the replica's: its positions sort after the replica's
    run(con, *["FLUSH BINARY LOGS"] * 5)
    assert rivc(root, "run").exit_code == 0
    run(
        con,
        "UPDATE rivc_cdc.orders SET status = 'one' WHERE id <= 100",
        "INSERT INTO rivc_cdc.orders (id, status) VALUES (3001, 'new'), (3002, 'new')",
        "DELETE FROM rivc_cdc.orders WHERE id BETWEEN 50 AND 59",
    )
    assert rivc(root, "run").exit_code == 0
    landed = DeltaTable(str(root / "warehouse/_rivc/landing/my.orders"))
    before = max(landed.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())
    held = json.loads(landed.history(limit=1)[0]["rivc"])["position"]["cdc"]
    assert held["gtid"].startswith("0-1-")  # domain 0, the primary's server id

    run(con, "UPDATE rivc_cdc.orders SET status = 'replicated' WHERE id BETWEEN 200 AND 300")
    with con.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (primary_at,) = cur.fetchone()
    with replica.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, 120)", (primary_at,))
        assert cur.fetchone()[0] == 0  # the replica has everything the primary wrote
    run(
        replica,
        "STOP SLAVE",
        "RESET SLAVE ALL",  # the failover: the replica takes writes of its own
        "UPDATE rivc_cdc.orders SET status = 'after', amount = 1.5 WHERE id BETWEEN 400 AND 500",
        "INSERT INTO rivc_cdc.orders (id, status) VALUES (4001, 'replica')",
        "UPDATE rivc_cdc.orders SET status = 'again' WHERE id <= 10",  # landed from the primary
        "DELETE FROM rivc_cdc.orders WHERE id BETWEEN 60 AND 69",
    )
    (root / "profiles.yml").write_text(profile(mariadb_replica))
    moved = rivc(root, "run")
    assert moved.exit_code == 0, moved.output
    want = source_rows(replica)
    assert delta_rows(root) == want == iceberg_rows(root)
    assert want[250][0] == "replicated" and want[450][0] == "after" and 65 not in want
    assert history_rows(root) == landed_history(root)
    assert {k: v for k, v, _, _, live in history_rows(root) if live} == want
    landed = DeltaTable(str(root / "warehouse/_rivc/landing/my.orders")).to_pyarrow_table()
    read = [c["after"]["id"] for c in landed.to_pylist() if c["op"] in ("c", "r")]
    assert len(read) == len(set(read))  # nothing landed twice across the move
    after = [c["seq"] for c in landed.to_pylist() if c["gtid"] and not c["gtid"].startswith("0-1-")]
    assert after and min(after) > before  # the replica's own changes follow every landed one
    quiet = rivc(root, "run")
    assert quiet.exit_code == 0 and "no new changes" in quiet.output
    (row,) = json.loads(rivc(root, "cdc", "status", "--json").output)["cdc"]
    assert row["held"] == row["log_end"] and row["gtid"].startswith("0-2-")  # the replica's
    replica.close()


def test_a_source_of_three_tables_reads_the_binlog_once_each_table_from_its_own_position(
    tmp_path, binlog_mariadb, monkeypatch
):
    """Three tables of one source land in one run from one read of the server's log
    (mysql/sharedread.py), though they hold different positions: one left out of the last run
    by a partial selection, one landed in it, and a run killed after the first table landed
    from its read. A transaction over several tables, a key changed several times, a moved
    key, a truncate, a key deleted and inserted again, and a table of the same name in another
    database whose changes must reach no one; each merge equals its table read with pymysql,
    and every landed change is there once."""
    from rivc.adapters.connectors.mysql import stream

    dumps: list[tuple[str, int] | None] = []
    real = stream.BinlogDump.__init__

    def counted(self, db, server_id, start, gtid):  # type: ignore[no-untyped-def]
        dumps.append(start)
        real(self, db, server_id, start, gtid)

    monkeypatch.setattr(stream.BinlogDump, "__init__", counted)
    con = connect(binlog_mariadb)
    names = ("a", "b", "c")
    long = "ü" + "x" * 199_999
    run(
        con,
        "DROP DATABASE IF EXISTS rivc_three",
        "DROP DATABASE IF EXISTS rivc_three_other",
        "CREATE DATABASE rivc_three",
        "CREATE DATABASE rivc_three_other",
        "CREATE TABLE rivc_three_other.a (id int PRIMARY KEY, v varchar(20))",
        *(
            f"CREATE TABLE rivc_three.{t} (id int PRIMARY KEY, v varchar(20), body mediumtext) "
            "CHARSET utf8mb4"
            for t in names
        ),
        *(f"INSERT INTO rivc_three.{t} VALUES (1, '{t}1', NULL), (2, '{t}2', NULL)" for t in names),
        f"UPDATE rivc_three.a SET body = '{long}' WHERE id = 1",  # left alone from here on
    )
    root = write_files(
        tmp_path / "three",
        {
            "rivc_project.yml": "name: three\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: mysql, host: 127.0.0.1, "
            f"port: {binlog_mariadb}, user: root, database: rivc_three}}\n",
            "sources/s.yml": "sources:\n  - name: my\n    connector: mysql-cdc\n"
            "    connection: db\n    tables:\n"
            + "".join(f"      - {{name: {t}, table: rivc_three.{t}}}\n" for t in names),
            "sinks/out.yml": "sinks:\n"
            + "".join(
                f"  - name: lake_{t}\n    from: source:my.{t}\n{UNWRAP}    connector: delta\n"
                f"    config: {{table_uri: out/{t}, mode: merge, merge_keys: [id]}}\n"
                for t in names
            )
            + f"  - name: hist_a\n    from: source:my.a\n{UNWRAP}    connector: delta\n"
            "    config: {table_uri: out/hist_a, mode: scd2, merge_keys: [id]}\n",
        },
    )

    def table(t: str) -> dict[int, str]:
        with con.cursor() as cur:
            cur.execute(f"SELECT id, v FROM rivc_three.{t}")
            return dict(cur.fetchall())

    def merged(t: str) -> dict[int, str]:
        rows = DeltaTable(str(root / f"out/{t}")).to_pyarrow_table().to_pylist()
        return {r["id"]: r["v"] for r in rows}

    def rows_a() -> dict[int, tuple]:
        with con.cursor() as cur:
            cur.execute("SELECT id, v, body FROM rivc_three.a")
            return {r[0]: r[1:] for r in cur.fetchall()}

    versions: dict[int, list[tuple]] = {}

    def change_a(*statements: str) -> None:  # each its own transaction; a's versions noted
        for statement in ("", *statements):
            if statement:
                run(con, statement)
            for k, v in rows_a().items():
                if versions.setdefault(k, [])[-1:] != [v]:
                    versions[k].append(v)

    def changes(t: str) -> list[tuple]:
        path = root / f"warehouse/_rivc/landing/my.{t}"
        rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        return [(r["op"], r["seq"]) for r in rows]

    try:
        assert rivc(root, "run").exit_code == 0  # three snapshots
        change_a()
        change_a("UPDATE rivc_three.a SET v = 'a-x' WHERE id = 1")
        run(
            con,
            "INSERT INTO rivc_three_other.a VALUES (1, 'not ours'), (7, 'nor this')",
            "INSERT INTO rivc_three.b VALUES (3, 'b3', NULL)",
        )
        only_b = rivc(root, "run", "--select", "lake_b")  # a and c stay behind b
        assert only_b.exit_code == 0, only_b.output
        assert merged("b") == table("b") and merged("a") != table("a")
        run(
            con,
            "START TRANSACTION",
            "UPDATE rivc_three.a SET v = 'a-y' WHERE id = 1",
            "UPDATE rivc_three.a SET v = 'a-z' WHERE id = 1",
            "UPDATE rivc_three.b SET id = 30 WHERE id = 3",
            "DELETE FROM rivc_three.c WHERE id = 2",
            "UPDATE rivc_three_other.a SET v = 'still not ours' WHERE id = 1",
            "COMMIT",
            "TRUNCATE TABLE rivc_three.c",
            "INSERT INTO rivc_three.c VALUES (5, 'c5', NULL)",
            "DELETE FROM rivc_three.c WHERE id = 5",  # deleted and inserted again, one batch
            "INSERT INTO rivc_three.c VALUES (5, 'c5 again', NULL)",
            "UPDATE rivc_three.b SET v = 'b-last' WHERE id = 1",
        )
        change_a(
            "UPDATE rivc_three.a SET v = 'a-p' WHERE id = 2",
            "UPDATE rivc_three.a SET v = 'a-q' WHERE id = 2",
            "UPDATE rivc_three.a SET id = 3 WHERE id = 2",  # a moved key
            "UPDATE rivc_three.a SET v = 'a-after' WHERE id = 3",
        )
        # killed once the first table landed from the shared read, the others not yet; the
        # next run resumes it: the landed table's batch as it is, the others read once
        killed = run_rivc(root, "after-landing")
        assert killed.returncode == -9, killed.stderr[-2000:]
        dumps.clear()
        both = rivc(root, "run", "--threads", "2")
        assert "landed by the run this one resumes" in both.output
        assert both.exit_code == 0, both.output
        assert len(dumps) == 1, dumps  # one read of the log for the three tables
        for t in names:
            assert merged(t) == table(t), t
            landed = [c for c in changes(t) if c[0] != "r"]
            assert len(landed) == len(set(landed)), t  # no change landed twice
        assert merged("a") == {1: "a-z", 3: "a-after"}  # not the other database's a
        # the merge and the scd2 history of a, key by key, the long value whole in each version
        lake = DeltaTable(str(root / "out/a")).to_pyarrow_table().to_pylist()
        assert {r["id"]: (r["v"], r["body"]) for r in lake} == rows_a()
        history = DeltaTable(str(root / "out/hist_a")).to_pyarrow_table().to_pylist()
        held: dict[int, list[tuple]] = {}
        for r in sorted(history, key=lambda r: (r["id"], r["valid_from"])):
            held.setdefault(r["id"], []).append((r["v"], r["body"]))
        versions[1].insert(2, ("a-y", long))  # a-y and a-z: one transaction, two changes
        assert held == versions
        assert {r["id"] for r in history if r["is_current"]} == {1, 3}
        assert merged("c") == {5: "c5 again"}
        # b's insert once, though the read began at a's older position; its moved key's halves
        landed = sorted((seq, op) for op, seq in changes("b") if op != "r")
        assert [op for _, op in landed] == ["c", "c", "d", "u"]
    finally:
        run(con, "DROP DATABASE IF EXISTS rivc_three", "DROP DATABASE IF EXISTS rivc_three_other")
        con.close()
