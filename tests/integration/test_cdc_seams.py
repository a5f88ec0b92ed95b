"""postgres-cdc where two features meet: a TOASTed column left alone by several updates of one
row between runs, by an update that moves the row's key (onto a new key, and onto a key
deleted just before), in one transaction and in several; every consumer (the landing table,
Delta merge, Iceberg upsert, Delta scd2) read back with deltalake and pyiceberg and compared
with the source key by key, and every landed version with the values the row held."""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from rivc.adapters.ingest import changes
from rivc_testing import iceberg_catalog, landed_versions, rivc, write_files

pytestmark = pytest.mark.integration

UNWRAP = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"


def project(root: Path, port: int, slot: str, tables: dict[str, str]) -> Path:
    """A postgres-cdc source `pg` of `tables` through slot and publication `slot`, and for
    each table a Delta merge, an Iceberg upsert and a Delta scd2 sink."""
    listed = "".join(f"      - {{name: {n}, table: {t}}}\n" for n, t in tables.items())
    sinks = "".join(
        f"  - name: merge_{n}\n    from: source:pg.{n}\n{UNWRAP}    connector: delta\n"
        f"    config: {{table_uri: out/{n}, mode: merge, merge_keys: [id]}}\n"
        f"  - name: ice_{n}\n    from: source:pg.{n}\n{UNWRAP}    connector: iceberg\n"
        f"    config: {{namespace: seams, table: {n}, mode: upsert, key_fields: [id]}}\n"
        f"  - name: history_{n}\n    from: source:pg.{n}\n{UNWRAP}    connector: delta\n"
        f"    config: {{table_uri: out/{n}_history, mode: scd2, merge_keys: [id]}}\n"
        for n in tables
    )
    return write_files(
        root,
        {
            "rivc_project.yml": f"name: {root.name}\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: 127.0.0.1, "
            f"port: {port}, user: postgres, database: postgres}}\n",
            "sources/s.yml": "sources:\n  - name: pg\n    connector: postgres-cdc\n"
            f"    connection: db\n    config: {{slot_name: {slot}, publication_name: {slot}}}\n"
            f"    tables:\n{listed}",
            "sinks/out.yml": "sinks:\n" + sinks,
        },
    )


@pytest.fixture
def pg(logical_pg):
    """A connection to the logical cluster; the slot, publication and tables the test names
    in `pg.made` are dropped after it."""
    con = psycopg.connect(
        f"host=127.0.0.1 port={logical_pg} user=postgres dbname=postgres", autocommit=True
    )
    con.made = []  # type: ignore[attr-defined]
    yield con
    for slot, tables in con.made:  # type: ignore[attr-defined]
        con.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        )
        con.execute(f"DROP PUBLICATION IF EXISTS {slot}")
        con.execute(f"DROP TABLE IF EXISTS {', '.join(tables)}")
    con.close()


def toasted(con, table: str, rows: int) -> None:
    """`table` (id, n, body) with `rows` rows whose body (9,600 characters of hex, which do not
    compress) is stored out of line."""
    con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, body text)")
    con.execute(
        f"INSERT INTO {table} SELECT g, 0, (SELECT string_agg(md5(g::text || x::text), '') "
        "FROM generate_series(1, 300) x) FROM generate_series(1, %s) g",
        (rows,),
    )
    external = con.execute(
        "SELECT count(*) FROM (SELECT pg_column_size(body) AS size FROM "
        f"{table}) s WHERE size < 9600"
    ).fetchone()[0]
    assert external == 0, "the bodies must not be compressed inline"


def source(con, table: str) -> dict[int, tuple]:
    return {r[0]: r[1:] for r in con.execute(f"SELECT id, n, body FROM {table}").fetchall()}


def consumers(root: Path, name: str) -> list[dict[int, tuple]]:
    """The merged tables of `name`: Delta (deltalake), Iceberg (pyiceberg), the scd2 history's
    current versions."""
    delta = DeltaTable(str(root / f"out/{name}")).to_pyarrow_table().to_pylist()
    ice = iceberg_catalog(root).load_table(f"seams.{name}").scan().to_arrow().to_pylist()
    history = DeltaTable(str(root / f"out/{name}_history")).to_pyarrow_table().to_pylist()
    return [
        {r["id"]: (r["n"], r["body"]) for r in rows}
        for rows in (delta, ice, [r for r in history if r["is_current"]])
    ]


def assert_consumers_equal_source(
    root: Path, con, name: str, table: str, refreshed: bool = False
) -> None:
    """Every consumer of `name` equals the source table; the scd2 history holds every version
    the landed changes describe (exactly those, unless a full refresh `refreshed` the landing
    table: the history keeps the versions before it too); no landed body is NULL."""
    want = source(con, table)
    for got in consumers(root, name):
        assert got == want
    versions = landed_versions(root, f"pg.{name}", lambda i: (i["n"], i["body"]))
    assert all(body is not None for _, (_, body), *_ in versions), "a landed body is NULL"
    history = DeltaTable(str(root / f"out/{name}_history")).to_pyarrow_table().to_pylist()
    held = {(r["id"], r["n"], r["body"], r["valid_from"]) for r in history}
    landed = {(k, n, body, since) for k, (n, body), since, *_ in versions}
    assert landed <= held if refreshed else landed == held


def test_a_toasted_value_survives_several_updates_of_its_row_between_runs(
    tmp_path, logical_pg, pg, monkeypatch
):
    """Three rows; id 1 updated twice in two transactions and id 2 twice in one, none
    touching the TOASTed body; then id 3 updated, its body changed, and updated again: every
    version of every row keeps its body, in every consumer. The batch is written three
    changes a file, so a row's last value is in the batch's rows at hand or in a file of it
    written before."""
    monkeypatch.setattr(changes, "ROWS_PER_FILE", 3)
    pg.made.append(("rivc_seam_toast", ["seam_toast"]))
    toasted(pg, "seam_toast", 3)
    root = project(tmp_path / "toast", logical_pg, "rivc_seam_toast", {"t": "public.seam_toast"})
    first = rivc(root, "run")
    assert first.exit_code == 0, first.output

    pg.execute("UPDATE seam_toast SET n = n + 1 WHERE id = 1")
    pg.execute("UPDATE seam_toast SET n = n + 1 WHERE id = 1")
    with pg.transaction():
        pg.execute("UPDATE seam_toast SET n = n + 1 WHERE id = 2")
        pg.execute("UPDATE seam_toast SET n = n + 1 WHERE id = 2")
        pg.execute("UPDATE seam_toast SET n = n + 1 WHERE id = 2")
    pg.execute("UPDATE seam_toast SET n = 7 WHERE id = 3")
    pg.execute("UPDATE seam_toast SET body = repeat(md5('new'), 400) WHERE id = 3")
    pg.execute("UPDATE seam_toast SET n = 8 WHERE id = 3")
    second = rivc(root, "run")
    assert second.exit_code == 0, second.output
    assert_consumers_equal_source(root, pg, "t", "seam_toast")
    assert source(pg, "seam_toast")[3] == (8, hashlib.md5(b"new").hexdigest() * 400)


def test_a_moved_key_keeps_its_toasted_value_and_never_takes_a_deleted_rows(
    tmp_path, logical_pg, pg, monkeypatch
):
    """`UPDATE SET id = 107 WHERE id = 7` leaves the body alone: the row under 107 has 7's
    body (landed under 7 by the snapshot). `DELETE id = 40; UPDATE SET id = 40 WHERE id = 50`:
    row 40 has 50's body, never the deleted row's. Within one batch, a row updated and then
    moved, and a row moved twice, keep theirs too, the batch written two changes a file (a
    move's delete and insert never apart)."""
    monkeypatch.setattr(changes, "ROWS_PER_FILE", 2)
    pg.made.append(("rivc_seam_move", ["seam_move"]))
    toasted(pg, "seam_move", 60)
    root = project(tmp_path / "move", logical_pg, "rivc_seam_move", {"t": "public.seam_move"})
    assert rivc(root, "run").exit_code == 0

    pg.execute("UPDATE seam_move SET id = 107 WHERE id = 7")
    pg.execute("DELETE FROM seam_move WHERE id = 40")
    pg.execute("UPDATE seam_move SET id = 40 WHERE id = 50")
    pg.execute("UPDATE seam_move SET n = 1 WHERE id = 11")
    pg.execute("UPDATE seam_move SET id = 211, n = 2 WHERE id = 11")
    pg.execute("UPDATE seam_move SET id = 212 WHERE id = 12")
    pg.execute("UPDATE seam_move SET id = 312 WHERE id = 212")
    with pg.transaction():
        pg.execute("DELETE FROM seam_move WHERE id = 13")
        pg.execute("UPDATE seam_move SET id = 13 WHERE id = 14")
        pg.execute("UPDATE seam_move SET n = 3 WHERE id = 13")
    moved = rivc(root, "run")
    assert moved.exit_code == 0, moved.output
    assert_consumers_equal_source(root, pg, "t", "seam_move")
    want = source(pg, "seam_move")
    assert 7 not in want and 50 not in want and want[40][1] != want[107][1]

    pg.execute("UPDATE seam_move SET n = 9 WHERE id IN (107, 40, 13)")  # from the landed moves
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    assert_consumers_equal_source(root, pg, "t", "seam_move")


def published(con, publication: str) -> set[str]:
    rows = con.execute(
        "SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (publication,)
    ).fetchall()
    return {r[0] for r in rows}


def test_a_table_without_a_replica_identity_is_refused_by_name_and_never_published(
    tmp_path, logical_pg, pg
):
    """A published table without a replica identity makes the application's own UPDATE and
    DELETE fail. `rivc check` and `rivc run` refuse such a table (no primary key, a DEFERRABLE
    one) by name with the fix; it is never published (one an earlier version published is
    taken out), while its siblings (a key; REPLICA IDENTITY FULL) land; the fix lands it."""
    tables = ["seam_key", "seam_nokey", "seam_deferred", "seam_full"]
    pg.made.append(("rivc_seam_ident", tables))
    for t in tables:
        pg.execute(f"DROP TABLE IF EXISTS {t}")
    pg.execute("CREATE TABLE seam_key (id int PRIMARY KEY, n int)")
    pg.execute("CREATE TABLE seam_nokey (id int, n int)")
    pg.execute("CREATE TABLE seam_deferred (id int PRIMARY KEY DEFERRABLE, n int)")
    pg.execute("CREATE TABLE seam_full (id int, n int)")
    pg.execute("ALTER TABLE seam_full REPLICA IDENTITY FULL")
    for t in tables:
        pg.execute(f"INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 10) g")
    pg.execute("CREATE PUBLICATION rivc_seam_ident FOR TABLE seam_nokey")  # as before the fix
    root = write_files(
        tmp_path / "ident",
        {
            "rivc_project.yml": "name: ident\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: 127.0.0.1, "
            f"port: {logical_pg}, user: postgres, database: postgres}}\n",
            "sources/s.yml": "sources:\n  - name: pg\n    connector: postgres-cdc\n"
            "    connection: db\n"
            "    config: {slot_name: rivc_seam_ident, publication_name: rivc_seam_ident}\n"
            "    tables:\n"
            + "".join(f"      - {{name: {t[5:]}, table: public.{t}}}\n" for t in tables),
        },
    )
    check = rivc(root, "check")
    assert check.exit_code == 1, check.output
    lines = check.output.splitlines()
    verdicts = {
        lines[i].strip(): lines[i + 2].strip() for i, line in enumerate(lines) if line[:3] == "pg."
    }
    assert verdicts["pg.key"] == verdicts["pg.full"] == "verdict:     READY"
    assert "public.seam_nokey has no primary key" in verdicts["pg.nokey"]
    assert "public.seam_deferred has a DEFERRABLE primary key" in verdicts["pg.deferred"]
    assert "REPLICA IDENTITY FULL" in verdicts["pg.nokey"]

    ran = rivc(root, "run")
    assert ran.exit_code == 1
    assert "public.seam_nokey has no primary key" in ran.output
    assert "ALTER TABLE public.seam_deferred REPLICA IDENTITY FULL" in ran.output
    assert published(pg, "rivc_seam_ident") == {"seam_key", "seam_full"}
    for t in tables:  # the application's own writes still work
        pg.execute(f"UPDATE {t} SET n = n + 1 WHERE id = 1")
        pg.execute(f"DELETE FROM {t} WHERE id = 2")
    landed = DeltaTable(str(root / "warehouse/_rivc/landing/pg.full")).to_pyarrow_table()
    assert landed.num_rows == 10
    pg.execute("ALTER TABLE seam_nokey REPLICA IDENTITY FULL")
    fixed = rivc(root, "run", "--select", "source:pg.nokey", "source:pg.full")
    assert fixed.exit_code == 0, fixed.output
    assert published(pg, "rivc_seam_ident") == {"seam_key", "seam_full", "seam_nokey"}
    full = DeltaTable(str(root / "warehouse/_rivc/landing/pg.full")).to_pyarrow_table()
    assert sorted(full.column("op").to_pylist()) == ["d"] + ["r"] * 10 + ["u"]


def test_a_dropped_publication_is_refused_by_name_and_a_full_refresh_recovers(
    tmp_path, logical_pg, pg
):
    """A DBA drops the publication: the next run refuses naming the one command that
    recovers (it does not make the publication again behind the user's back), and that
    command, run on two threads over the source's two tables, makes publication and slot
    again and takes a new snapshot of each; the consumers end equal to the source. Dropped and
    made again at once: refused the same way, recovered the same way."""
    pg.made.append(("rivc_seam_pub", ["seam_pub_a", "seam_pub_b"]))
    toasted(pg, "seam_pub_a", 20)
    toasted(pg, "seam_pub_b", 20)
    root = project(
        tmp_path / "pub",
        logical_pg,
        "rivc_seam_pub",
        {"a": "public.seam_pub_a", "b": "public.seam_pub_b"},
    )
    assert rivc(root, "run").exit_code == 0
    pg.execute("UPDATE seam_pub_a SET n = 1 WHERE id = 1")
    pg.execute("DROP PUBLICATION rivc_seam_pub")
    pg.execute("UPDATE seam_pub_a SET n = 2 WHERE id = 2")
    pg.execute("DELETE FROM seam_pub_b WHERE id = 3")
    refused = rivc(root, "run")
    assert refused.exit_code == 1
    assert "publication rivc_seam_pub was dropped" in refused.output, refused.output
    assert "rivc run --full-refresh --select source:pg`" in refused.output
    assert not published(pg, "rivc_seam_pub")  # not made again behind the user's back
    again = rivc(root, "run")
    assert again.exit_code == 1 and "was dropped" in again.output

    recovered = rivc(root, "run", "--full-refresh", "--select", "source:pg", "--threads", "2")
    assert recovered.exit_code == 0, recovered.output
    pg.execute("UPDATE seam_pub_b SET n = 5 WHERE id = 5")
    after = rivc(root, "run")
    assert after.exit_code == 0, after.output
    for name in ("a", "b"):
        assert_consumers_equal_source(root, pg, name, f"seam_pub_{name}", refreshed=True)

    pg.execute("DROP PUBLICATION rivc_seam_pub")  # dropped and made again between two runs
    pg.execute("UPDATE seam_pub_a SET n = 6 WHERE id = 6")
    pg.execute("CREATE PUBLICATION rivc_seam_pub FOR TABLE seam_pub_a, seam_pub_b")
    pg.execute("UPDATE seam_pub_a SET n = 7 WHERE id = 7")
    remade = rivc(root, "run")
    assert remade.exit_code == 1
    assert "rivc run --full-refresh --select source:pg`" in remade.output, remade.output
    recovered = rivc(root, "run", "--full-refresh", "--select", "source:pg")
    assert recovered.exit_code == 0, recovered.output
    assert rivc(root, "run").exit_code == 0
    for name in ("a", "b"):
        assert_consumers_equal_source(root, pg, name, f"seam_pub_{name}", refreshed=True)
