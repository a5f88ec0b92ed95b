"""A differential test of the whole change-capture pipeline: a Hypothesis rule-based state
machine whose steps are DML on PostgreSQL (a logical-WAL cluster of the tests' own) and MariaDB
(a binlog server of the tests' own), interleaved with `rivc run` under random selections,
`rivc snapshot`, kills at fault points, a lost `.rivc/` and the warm server. After every run
each consumer is compared with a model the machine computes from its own operations:

- merging consumers (Delta merge, Iceberg upsert, a postgres sink, a table model) hold the
  table as landed: each key's last image, deletes applied;
- the scd2 history holds every version of every key, in order, the current one open;
- appending consumers (a Delta append, a files sink, an incremental model) hold every change
  once, with its kind;
- a dbt snapshot of the table model holds its rows as the snapshot saw them, and the sink fed
  by the snapshot holds the snapshot's table.

Used by tests/integration/test_differential.py (a short fixed-seed pass in CI) and by
bench/cdc_soak.py (an hour of new seeds). A failure prints the seed and the steps to replay.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pymysql
from deltalake import DeltaTable
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from rivc_testing import RIVC, iceberg_catalog, rivc, write_files

Image = tuple[Any, Any, Any]  # (n, note, body)
UNWRAP_APPLY = "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
UNWRAP_KEEP = "    transforms: [{type: unwrap_cdc, deletes: keep}]\n"
FAULTS = ("after-staging", "after-landing", "before-slot-advance", "before-commit", "between-sinks")


@dataclass
class Table:
    """One captured table: the database's rows now, and every change since the first snapshot
    as a consumer that keeps deletes sees it (a delete's image is its before-image: the key
    alone under PostgreSQL's default identity)."""

    fqn: str  # source.table
    db: str  # pg | my
    name: str  # the database table
    full_before: bool  # deletes carry the whole old row
    rows: dict[int, Image] = field(default_factory=dict)
    baseline: dict[int, Image] = field(default_factory=dict)
    log: list[tuple[str, int, Image]] = field(default_factory=list)
    landed: int = 0  # how much of `log` the landing table holds
    gone: set[int] = field(default_factory=set)  # keys deleted (for re-inserts and moves)
    landings: list[int] = field(default_factory=list)  # `landed` after each run that landed
    moves: list[tuple[int, bool]] = field(default_factory=list)  # (place in log, onto deleted)

    def deleted_image(self, image: Image) -> Image:
        return image if self.full_before else (None, None, None)

    def state(self, upto: int) -> dict[int, Image]:
        rows = dict(self.baseline)
        for op, key, image in self.log[:upto]:
            if op == "delete":
                rows.pop(key, None)
            else:
                rows[key] = image
        return rows

    def versions(self, upto: int) -> dict[int, list[tuple[Image, bool]]]:
        """Each key's versions in order: (image, current)."""
        out: dict[int, list[tuple[Image, bool]]] = {
            k: [(v, True)] for k, v in self.baseline.items()
        }
        for op, key, image in self.log[:upto]:
            mine = out.setdefault(key, [])
            if mine and mine[-1][1]:
                mine[-1] = (mine[-1][0], False)
            if op != "delete":
                mine.append((image, True))
        return out

    def changes(self, upto: int) -> Counter[tuple[str, int, Image]]:
        every = [("insert", k, v) for k, v in self.baseline.items()] + self.log[:upto]
        return Counter(every)


# consumers: name -> (table fqn, kind); kinds: table (merged), history (scd2), changes (every
# change once)
CONSUMERS = {
    "merge_pgt": ("pg.t", "table"),
    "ice_pgt": ("pg.t", "table"),
    "hist_pgt": ("pg.t", "history"),
    "append_pgt": ("pg.t", "changes"),
    "files_pgt": ("pg.t", "changes"),
    "db_pgt": ("pg.t", "table"),
    "tbl_pg": ("pg.t", "table"),
    "inc_pg": ("pg.t", "changes"),
    "merge_pgf": ("pg.f", "table"),
    "hist_pgf": ("pg.f", "history"),
    "merge_myt": ("my.t", "table"),
    "hist_myt": ("my.t", "history"),
    "append_myt": ("my.t", "changes"),
}
MODELS = {
    "tbl_pg": """{{ config(materialized='table') }}
select after.id, after.n, after.note, after.body from (
  select *, row_number() over (partition by coalesce(after.id, before.id) order by seq desc) as rn
  from {{ source('pg', 't') }}
) where rn = 1 and op <> 'd'
""",
    "inc_pg": """{{ config(materialized='incremental') }}
select seq, case op when 'd' then 'delete' when 'u' then 'update' else 'insert' end as _op,
       coalesce(after.id, before.id) as id,
       case when op = 'd' then before.n else after.n end as n,
       case when op = 'd' then before.note else after.note end as note,
       case when op = 'd' then before.body else after.body end as body
from {{ source('pg', 't') }}
{% if is_incremental() %} where seq > (select max(seq) from {{ this }}) {% endif %}
""",
}
SNAPSHOT = """{% snapshot snap_pg %}
{{ config(unique_key='id', strategy='check', check_cols='all') }}
select * from {{ ref('tbl_pg') }}
{% endsnapshot %}
"""


def sinks_yaml(mirror: str) -> str:
    def sink(name: str, src: str, transforms: str, body: str) -> str:
        return f"  - name: {name}\n    from: {src}\n{transforms}{body}"

    return "sinks:\n" + "".join(
        (
            sink(
                "merge_pgt",
                "source:pg.t",
                UNWRAP_APPLY,
                "    connector: delta\n"
                "    config: {table_uri: out/merge_pgt, mode: merge, merge_keys: [id]}\n",
            ),
            sink(
                "ice_pgt",
                "source:pg.t",
                UNWRAP_APPLY,
                "    connector: iceberg\n"
                "    config: {namespace: diff, table: pgt, mode: upsert, key_fields: [id]}\n",
            ),
            sink(
                "hist_pgt",
                "source:pg.t",
                UNWRAP_APPLY,
                "    connector: delta\n"
                "    config: {table_uri: out/hist_pgt, mode: scd2, merge_keys: [id]}\n",
            ),
            sink(
                "append_pgt",
                "source:pg.t",
                UNWRAP_KEEP,
                "    connector: delta\n    config: {table_uri: out/append_pgt, mode: append}\n",
            ),
            sink(
                "files_pgt",
                "source:pg.t",
                UNWRAP_KEEP,
                "    connector: files\n    config: {path: out/files_pgt, format: parquet}\n",
            ),
            sink(
                "db_pgt",
                "source:pg.t",
                UNWRAP_APPLY,
                "    connector: postgres\n"
                f"    config: {{connection: pg, table: {mirror}, mode: upsert, "
                "key_columns: [id]}\n",
            ),
            sink(
                "snapsink",
                "snap_pg",
                "",
                "    connector: delta\n    config: {table_uri: out/snapsink, mode: overwrite}\n",
            ),
            sink(
                "merge_pgf",
                "source:pg.f",
                UNWRAP_APPLY,
                "    connector: delta\n"
                "    config: {table_uri: out/merge_pgf, mode: merge, merge_keys: [id]}\n",
            ),
            sink(
                "hist_pgf",
                "source:pg.f",
                UNWRAP_APPLY,
                "    connector: delta\n"
                "    config: {table_uri: out/hist_pgf, mode: scd2, merge_keys: [id]}\n",
            ),
            sink(
                "merge_myt",
                "source:my.t",
                UNWRAP_APPLY,
                "    connector: delta\n"
                "    config: {table_uri: out/merge_myt, mode: merge, merge_keys: [id]}\n",
            ),
            sink(
                "hist_myt",
                "source:my.t",
                UNWRAP_APPLY,
                "    connector: delta\n"
                "    config: {table_uri: out/hist_myt, mode: scd2, merge_keys: [id]}\n",
            ),
            sink(
                "append_myt",
                "source:my.t",
                UNWRAP_KEEP,
                "    connector: delta\n    config: {table_uri: out/append_myt, mode: append}\n",
            ),
        )
    )


def body_value(draw: Any) -> str | None:
    """A body: NULL, empty, short, or 9,600 characters of hex (stored out of line)."""
    kind = draw(st.sampled_from(["big", "big", "short", "empty", "null"]))
    if kind == "big":
        return secrets.token_hex(4800)
    return {"short": secrets.token_hex(4), "empty": "", "null": None}[kind]


class Pipeline(RuleBasedStateMachine):
    """The machine. The class attributes are set by the test that runs it (ports, a base
    folder, whether slow steps — kills, the warm server — may be drawn)."""

    pg_port: int = 0
    my_port: int = 0
    base: Path = Path("/tmp")
    slow: bool = True
    examples: int = 0
    # dry: only the model moves (no database, no rivc): for finding a seed whose program
    # draws every kind of step (the program depends on the model alone)
    dry: bool = False
    steps: Counter[str] = Counter()  # the steps the last program took, by rule
    last: Pipeline | None = None  # the last program's machine, after its teardown

    def __init__(self) -> None:
        super().__init__()
        Pipeline.examples += 1
        tag = f"{os.getpid()}_{Pipeline.examples}_{secrets.token_hex(3)}"
        self.slot = f"rivc_diff_{tag}"
        self.mydb = f"rivc_diff_{tag}"
        self.mirror = f"mirror_{tag}.diff_t"
        self.root = self.base / f"diff-{tag}"
        self.next_id = 1
        self.snap_expected: dict[int, Image] | None = None
        self.consumer_upto: dict[str, int] = {}
        self.server = False
        Pipeline.steps = Counter()
        if self.dry:
            self.pg = self.my = None
        else:
            self._connect()
        self.tables = {
            "pg.t": Table("pg.t", "pg", f"diff_t_{tag}", full_before=False),
            "pg.f": Table("pg.f", "pg", f"diff_f_{tag}", full_before=True),
            "my.t": Table("my.t", "my", f"{self.mydb}.diff_t", full_before=True),
        }

    def _connect(self) -> None:
        self.pg = psycopg.connect(
            f"host=127.0.0.1 port={self.pg_port} user=postgres dbname=postgres", autocommit=True
        )
        self.my = pymysql.connect(host="127.0.0.1", port=self.my_port, user="root", autocommit=True)

    # ------------------------------------------------------------------ set up and tear down

    @initialize(data=st.data())
    def create(self, data: Any) -> None:
        # Hypothesis tries the simplest example first (every choice its least: the same
        # cheapest rule, step after step); rejected here before anything is made, it costs
        # nothing and leaves room for the random ones
        assume(data.draw(st.booleans(), label="a random program"))
        t, f = self.tables["pg.t"].name, self.tables["pg.f"].name
        if not self.dry:
            self._create_tables(t, f)
        for table in self.tables.values():
            for _ in range(data.draw(st.integers(3, 6), label=f"{table.fqn} rows")):
                self._insert(table, self.next_id, (0, "start", body_value(data.draw)))
                self.next_id += 1
            table.baseline, table.log = dict(table.rows), []
        if not self.dry:
            self._write_project(t, f)
        self._run(None, exclude=("snapsink",))  # the first snapshot of every table, consumers
        self.snapshot()  # the dbt snapshot the sink `snapsink` reads
        Pipeline.steps = Counter()

    def _create_tables(self, t: str, f: str) -> None:
        self.pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int, note text, body text)")
        self.pg.execute(f"CREATE TABLE {f} (id int PRIMARY KEY, n int, note text, body text)")
        self.pg.execute(f"ALTER TABLE {f} REPLICA IDENTITY FULL")
        with self.my.cursor() as cur:
            cur.execute(f"CREATE DATABASE {self.mydb}")
            cur.execute(
                f"CREATE TABLE {self.mydb}.diff_t (id int PRIMARY KEY, n int, "
                "note varchar(64), body longtext)"
            )

    def _write_project(self, t: str, f: str) -> None:
        write_files(
            self.root,
            {
                "rivc_project.yml": "name: diff\n",
                "profiles.yml": "default:\n  connections:\n"
                f"    pg: {{type: postgres, host: 127.0.0.1, port: {self.pg_port}, "
                "user: postgres, database: postgres}\n"
                f"    my: {{type: mysql, host: 127.0.0.1, port: {self.my_port}, user: root, "
                f"database: {self.mydb}}}\n",
                "sources/s.yml": "sources:\n"
                "  - name: pg\n    connector: postgres-cdc\n    connection: pg\n"
                f"    config: {{slot_name: {self.slot}, publication_name: {self.slot}}}\n"
                f"    tables:\n      - {{name: t, table: public.{t}}}\n"
                f"      - {{name: f, table: public.{f}}}\n"
                "  - name: my\n    connector: mysql-cdc\n    connection: my\n"
                f"    tables:\n      - {{name: t, table: {self.mydb}.diff_t}}\n",
                "sinks/out.yml": sinks_yaml(self.mirror),
                **{f"models/{name}.sql": sql for name, sql in MODELS.items()},
                "snapshots/snap_pg.sql": SNAPSHOT,
            },
        )

    def teardown(self) -> None:
        """A last run of everything (what the steps left unlanded reaches every consumer and
        is checked), then the databases, the slot and the folder go."""
        Pipeline.last = self
        if self.dry:
            return
        try:
            if self.consumer_upto:  # made: the program ran past its first run
                self._run(None)
        finally:
            self._drop()

    def _drop(self) -> None:
        if self.server:
            self._cli("server", "stop")
        self.pg.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (self.slot,),
        )
        self.pg.execute(f"DROP PUBLICATION IF EXISTS {self.slot}")
        for table in ("pg.t", "pg.f"):
            self.pg.execute(f"DROP TABLE IF EXISTS {self.tables[table].name}")
        self.pg.execute(f"DROP SCHEMA IF EXISTS {self.mirror.split('.')[0]} CASCADE")
        self.pg.close()
        with self.my.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {self.mydb}")
        self.my.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ the databases

    def _exec(self, table: Table, sql: str, args: tuple[Any, ...] = ()) -> None:
        if self.dry:
            return
        if table.db == "pg":
            self.pg.execute(sql.replace("?", "%s"), args)
        else:
            with self.my.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), args)

    def _insert(self, table: Table, key: int, image: Image) -> None:
        self._exec(table, f"INSERT INTO {table.name} VALUES (?, ?, ?, ?)", (key, *image))
        table.rows[key] = image
        table.gone.discard(key)
        table.log.append(("insert", key, image))

    def _update(self, table: Table, key: int, image: Image) -> None:
        """The columns that change, and only those: a body set to itself would be a new value
        in PostgreSQL's log, not one left alone."""
        if image[2] == table.rows[key][2]:
            sql, args = f"UPDATE {table.name} SET n = ?, note = ? WHERE id = ?", (*image[:2], key)
        else:
            sql, args = (
                f"UPDATE {table.name} SET n = ?, note = ?, body = ? WHERE id = ?",
                (*image, key),
            )
        self._exec(table, sql, args)
        table.rows[key] = image
        table.log.append(("update", key, image))

    def _delete(self, table: Table, key: int) -> None:
        self._exec(table, f"DELETE FROM {table.name} WHERE id = ?", (key,))
        image = table.rows.pop(key)
        table.gone.add(key)
        table.log.append(("delete", key, table.deleted_image(image)))

    def _move(self, table: Table, key: int, to: int, n: int) -> None:
        """`UPDATE SET id = to, n = n WHERE id = key`: the body left alone."""
        self._exec(table, f"UPDATE {table.name} SET id = ?, n = ? WHERE id = ?", (to, n, key))
        was = table.rows.pop(key)
        table.log.append(("delete", key, table.deleted_image(was)))
        table.gone.add(key)
        table.gone.discard(to)
        table.rows[to] = (n, was[1], was[2])
        table.log.append(("insert", to, table.rows[to]))

    def _txn(self, table: Table, many: bool) -> _Txn:
        return _Txn(self, table, many)

    def _live(self, table: Table, data: Any) -> int | None:
        if not table.rows:
            return None
        return int(data.draw(st.sampled_from(sorted(table.rows)), label="key"))

    @rule(data=st.data())
    def insert(self, data: Any) -> None:
        Pipeline.steps["insert"] += 1
        table = self.tables[data.draw(st.sampled_from(sorted(self.tables)), label="table")]
        reinsert = table.gone and data.draw(st.booleans(), label="reinsert a deleted key")
        if reinsert:
            key = data.draw(st.sampled_from(sorted(table.gone)), label="key")
        else:
            key, self.next_id = self.next_id, self.next_id + 1
        n = data.draw(st.integers(0, 9), label="n")
        self._insert(table, key, (n, "new", body_value(data.draw)))

    @rule(data=st.data())
    def update_several_times(self, data: Any) -> None:
        """One row updated 1–3 times, in one transaction or in several; the body (TOASTed or
        not) touched or left alone."""
        Pipeline.steps["update_several_times"] += 1
        table = self.tables[data.draw(st.sampled_from(sorted(self.tables)), label="table")]
        key = self._live(table, data)
        if key is None:
            return
        times = data.draw(st.integers(1, 3), label="times")
        with self._txn(table, data.draw(st.booleans(), label="one transaction")):
            for _ in range(times):
                n, note, body = table.rows[key]
                if data.draw(st.sampled_from([False, False, True]), label="touch the body"):
                    body = body_value(data.draw)
                self._update(table, key, ((n or 0) + 1, note, body))

    @rule(data=st.data())
    def move_key(self, data: Any) -> None:
        """A key moved onto a new key, or onto a key deleted just before (in the same
        transaction or not); the body left alone."""
        Pipeline.steps["move_key"] += 1
        table = self.tables[data.draw(st.sampled_from(sorted(self.tables)), label="table")]
        if len(table.rows) < 2:
            return
        keys = sorted(table.rows)
        key = data.draw(st.sampled_from(keys), label="moved key")
        onto_deleted = data.draw(st.booleans(), label="onto a key deleted just before")
        with self._txn(table, data.draw(st.booleans(), label="one transaction")):
            if onto_deleted:
                victim = data.draw(st.sampled_from([k for k in keys if k != key]), label="victim")
                self._delete(table, victim)
                to = victim
            else:
                to, self.next_id = self.next_id, self.next_id + 1
            table.moves.append((len(table.log), onto_deleted))
            self._move(table, key, to, data.draw(st.integers(0, 9), label="n"))

    @rule(data=st.data())
    def delete(self, data: Any) -> None:
        Pipeline.steps["delete"] += 1
        table = self.tables[data.draw(st.sampled_from(sorted(self.tables)), label="table")]
        key = self._live(table, data)
        if key is not None:
            self._delete(table, key)

    @rule(data=st.data())
    def truncate(self, data: Any) -> None:
        """Every row goes: deletes of their last images."""
        Pipeline.steps["truncate"] += 1
        table = self.tables[data.draw(st.sampled_from(sorted(self.tables)), label="table")]
        self._exec(table, f"TRUNCATE {table.name}")
        for key, image in sorted(table.rows.items()):
            table.log.append(("delete", key, image))
            table.gone.add(key)
        table.rows.clear()

    # ------------------------------------------------------------------ rivc

    @rule(data=st.data())
    def run(self, data: Any) -> None:
        """`rivc run` of the whole project, or of a random selection of sources and
        consumers."""
        Pipeline.steps["run"] += 1
        if data.draw(st.booleans(), label="whole project"):
            self._run(None)
            return
        names = ["source:pg", "source:my", *CONSUMERS, "snapsink"]
        picked = data.draw(
            st.lists(st.sampled_from(names), min_size=1, unique=True), label="select"
        )
        self._run(picked)

    @rule()
    def snapshot(self) -> None:
        """`rivc snapshot`: the dbt snapshot of the table model, as that table holds it now."""
        Pipeline.steps["snapshot"] += 1
        done = self._cli("snapshot")
        if self.dry:
            return
        assert done.exit_code == 0, done.output
        # hard_deletes: ignore (dbt's default): a key the table lost keeps its open version
        now = delta_images(self.root / "warehouse/tbl_pg")
        self.snap_expected = {**(self.snap_expected or {}), **now}
        current = {
            r["id"]: (r["n"], r["note"], r["body"])
            for r in delta_rows(self.root / "warehouse/snap_pg")
            if r["dbt_valid_to"] is None
        }
        assert current == self.snap_expected, _differ(current, self.snap_expected)

    @rule()
    def lose_rivc(self) -> None:
        """The whole .rivc/ lost (the record, the default Iceberg catalog and its table: the
        upsert sink makes it again from every landed change at its next run)."""
        Pipeline.steps["lose_rivc"] += 1
        shutil.rmtree(self.root / ".rivc", ignore_errors=True)
        self.consumer_upto.pop("ice_pgt", None)

    @precondition(lambda self: self.slow)
    @rule(fault=st.sampled_from(FAULTS))
    def kill_and_rerun(self, fault: str) -> None:
        """`rivc run` killed at a fault point (its own process), then run again."""
        Pipeline.steps["kill_and_rerun"] += 1
        if self.dry:
            return
        env = {k: v for k, v in os.environ.items() if k != "RIVC_FAULT"}
        env["RIVC_FAULT"] = fault
        killed = subprocess.run(
            [RIVC, "run"], cwd=self.root, env=env, capture_output=True, text=True, timeout=900
        )
        assert killed.returncode in (0, -signal.SIGKILL), killed.stdout[-3000:]
        self._run(None)

    @precondition(lambda self: self.slow and not self.server)
    @rule()
    def warm_server(self) -> None:
        """From now on, runs go through the warm server (`spark: {server: auto}`)."""
        Pipeline.steps["warm_server"] += 1
        self.server = True
        if self.dry:
            return
        profile = self.root / "profiles.yml"
        profile.write_text(
            profile.read_text() + "  spark: {server: auto, server_idle: 30 minutes}\n"
        )
        self._run(None)

    def _cli(self, *args: str) -> Any:
        if self.dry:
            return _Done(0, "")
        if self.server:  # each run a process of its own, as a user's; Spark is the server's
            done = subprocess.run(
                [RIVC, *args], cwd=self.root, capture_output=True, text=True, timeout=900
            )
            return _Done(done.returncode, done.stdout + done.stderr)
        return rivc(self.root, *args)

    def _run(self, select: list[str] | None, exclude: tuple[str, ...] = ()) -> None:
        before = {fqn: len(t.log) for fqn, t in self.tables.items()}
        args = ["--select", *select] if select else []
        args += ["--exclude", *exclude] if exclude else []
        done = self._cli("run", *args)
        assert done.exit_code == 0, done.output
        ran = (set(CONSUMERS) | {"snapsink"} if select is None else set(select)) - set(exclude)
        # a run extracts what it selects and every change log a selected node reads
        # (docs/running.md): `--select merge_myt` lands my.t's changes first
        upstream = {CONSUMERS[n][0] for n in ran if n in CONSUMERS}
        upstream |= {"pg.t"} if "snapsink" in ran else set()
        for fqn, table in self.tables.items():
            if f"source:{fqn.split('.')[0]}" in ran or fqn in upstream:
                table.landed = before[fqn]
                table.landings.append(table.landed)
        for name, (fqn, _) in CONSUMERS.items():
            if name in ran:
                self.consumer_upto[name] = self.tables[fqn].landed
        self._check(ran)

    def _check(self, ran: set[str]) -> None:
        if self.dry:
            return
        for name, (fqn, kind) in CONSUMERS.items():
            if name not in self.consumer_upto:
                continue
            table, upto = self.tables[fqn], self.consumer_upto[name]
            if kind == "table":
                assert self._table(name) == table.state(upto), name
            elif kind == "history":
                assert self._history(name) == table.versions(upto), name
            else:
                assert self._changes(name) == table.changes(upto), name
        if "snapsink" in ran and (self.root / "warehouse/snap_pg").exists():
            sink = Counter(_hashable(r) for r in delta_rows(self.root / "out/snapsink"))
            snap = Counter(_hashable(r) for r in delta_rows(self.root / "warehouse/snap_pg"))
            assert sink == snap, "snapsink"

    def _table(self, name: str) -> dict[int, Image]:
        root = self.root
        if name == "ice_pgt":
            rows = iceberg_catalog(root).load_table("diff.pgt").scan().to_arrow().to_pylist()
            return {r["id"]: (r["n"], r["note"], r["body"]) for r in rows}
        if name == "db_pgt":
            found = self.pg.execute(f"SELECT id, n, note, body FROM {self.mirror}").fetchall()
            return {r[0]: (r[1], r[2], r[3]) for r in found}
        if name == "tbl_pg":
            return delta_images(root / "warehouse/tbl_pg")
        return delta_images(root / f"out/{name}")

    def _history(self, name: str) -> dict[int, list[tuple[Image, bool]]]:
        rows = sorted(delta_rows(self.root / f"out/{name}"), key=lambda r: r["valid_from"])
        out: dict[int, list[tuple[Image, bool]]] = {}
        ends: dict[int, Any] = {}
        for r in rows:
            key = r["id"]
            if key in ends and ends[key] is not None:
                assert ends[key] <= r["valid_from"], f"{name}: versions of {key} overlap"
            ends[key] = r["valid_to"]
            assert r["is_current"] == (r["valid_to"] is None), f"{name}: {key}"
            out.setdefault(key, []).append(((r["n"], r["note"], r["body"]), r["is_current"]))
        return out

    def _changes(self, name: str) -> Counter[tuple[str, int, Image]]:
        root = self.root
        if name == "files_pgt":
            import pyarrow.dataset as ds

            rows = ds.dataset(str(root / "out/files_pgt"), format="parquet").to_table().to_pylist()
        elif name == "inc_pg":
            rows = delta_rows(root / "warehouse/inc_pg")
        else:
            rows = delta_rows(root / f"out/{name}")
        return Counter((r["_op"], r["id"], (r["n"], r["note"], r["body"])) for r in rows)


def seams(machine: Pipeline) -> set[str]:
    """The seams a program crossed (for a seed that crosses them all): in the table with
    PostgreSQL's default identity, a row updated twice in one batch with its TOASTed body left
    alone by the second; a row moved with its TOASTed body; a row moved onto a key deleted
    just before; and anywhere a deleted key inserted again."""
    table = machine.tables["pg.t"]
    found = set()
    bounds = [0, *table.landings]
    for key in {k for _, k, _ in table.log}:
        mine = [(i, op, image) for i, (op, k, image) in enumerate(table.log) if k == key]
        for (i, _, image), (j, op2, image2) in zip(mine, mine[1:], strict=False):
            same_batch = not any(i < b <= j for b in bounds)
            big = isinstance(image[2], str) and len(image[2]) > 2000
            if op2 == "update" and same_batch and big and image2[2] == image[2]:
                found.add("updated twice, the body left alone")
    for at, onto in table.moves:
        image = table.log[at + 1][2]
        if isinstance(image[2], str) and len(image[2]) > 2000:
            found.add("moved with its body")
        if onto:
            found.add("moved onto a deleted key")
    for t in machine.tables.values():
        inserted = [k for op, k, _ in t.log if op == "insert"]
        deleted = {k for op, k, _ in t.log if op == "delete"}
        if any(k in deleted or k in t.baseline for k in inserted):
            found.add("a deleted key inserted again")
    return found


SEAMS = {
    "updated twice, the body left alone",
    "moved with its body",
    "moved onto a deleted key",
    "a deleted key inserted again",
}


class _Txn:
    """One transaction around a step's statements, or none (each statement its own)."""

    def __init__(self, machine: Pipeline, table: Table, many: bool) -> None:
        self.machine, self.table, self.many = machine, table, many

    def __enter__(self) -> None:
        if self.many:
            self.machine._exec(self.table, "BEGIN")

    def __exit__(self, *exc: Any) -> None:
        if self.many:
            self.machine._exec(self.table, "COMMIT" if exc[0] is None else "ROLLBACK")


@dataclass
class _Done:
    exit_code: int
    output: str


def delta_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return rows


def delta_images(path: Path) -> dict[int, Image]:
    return {r["id"]: (r["n"], r["note"], r["body"]) for r in delta_rows(path)}


def _hashable(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


def _differ(got: dict[Any, Any], want: dict[Any, Any]) -> str:
    """The keys two images disagree on, each side shortened (a body is thousands of chars)."""

    def short(image: Any) -> Any:
        return (
            None
            if image is None
            else tuple(
                f"{v[:12]}…({len(v)})" if isinstance(v, str) and len(v) > 20 else v for v in image
            )
        )

    keys = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
    return "; ".join(f"{k}: got {short(got.get(k))}, want {short(want.get(k))}" for k in keys)
