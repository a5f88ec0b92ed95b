"""A change log added the way docs/architecture.md says (tests/plugins/journal.py: a spec, a
ChangeLog, one registry entry) is landed, killed and resumed by the same driver as
postgres-cdc and mysql-cdc: every change lands once, and a merge sink ends equal to the log
replayed by hand, read back with deltalake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable
from plugins.journal import ENTRY

from rivc.compiler.registry import connectors
from rivc_testing import rivc, write_files

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]

# rivc in a process of its own with the plugin registered, killed at RIVC_FAULT
RUNNER = """
import sys
sys.path.insert(0, sys.argv[1])
from plugins.journal import ENTRY
from rivc.compiler.registry import connectors
connectors()[("source", "journal")] = ENTRY
from rivc.adapters.cli import main
main(sys.argv[2:])
"""


def killed_run(root: Path, fault: str, *args: str) -> None:
    env = {**os.environ, "RIVC_FAULT": fault}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(TESTS), "run", "--project-dir", str(root), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stdout + done.stderr  # SIGKILL at the fault point


def append(journal: Path, *changes: dict) -> None:
    with journal.open("a") as fh:
        line = {"time": "2024-05-01T10:00:00+00:00", "changes": list(changes)}
        fh.write(json.dumps(line) + "\n")


def replayed(journal: Path) -> dict[int, tuple]:
    """The table the journal describes, applied by hand."""
    rows: dict[int, tuple] = {}
    for text in journal.read_text().splitlines():
        for c in json.loads(text, parse_float=Decimal)["changes"]:
            if c["table"] != "orders":
                continue
            if c["op"] == "truncate":
                rows.clear()
            if c.get("before"):
                rows.pop(c["before"]["id"], None)
            if c.get("after"):
                rows[c["after"]["id"]] = (c["after"]["status"], c["after"]["amount"])
    return rows


def replayed_history(journal: Path, snapshot_at: int) -> set[tuple]:
    """The versions the scd2 sink must hold, worked out from the journal by hand: the rows of
    its first `snapshot_at` lines as read by the snapshot (seq 0), then each change at its
    line and place (seq = line * 1000 + place): (id, values, valid_from, valid_to, current)."""
    lines = [json.loads(t, parse_float=Decimal) for t in journal.read_text().splitlines()]
    live: dict[int, tuple] = {}
    for line in lines[:snapshot_at]:
        for c in line["changes"]:
            if c["table"] == "orders":
                live.pop((c.get("before") or {}).get("id"), None)
                live[c["after"]["id"]] = (c["after"]["status"], c["after"]["amount"])
    events: dict[int, list[tuple]] = {k: [(0, False, v)] for k, v in live.items()}
    for n, line in enumerate(lines[snapshot_at:], snapshot_at):
        for i, c in enumerate(line["changes"]):
            if c["table"] != "orders":
                continue
            seq = n * 1000 + i
            if c["op"] == "truncate":
                for key in list(live):
                    events[key].append((seq, True, live.pop(key)))
                continue
            before, after = c.get("before"), c.get("after")
            if before and (not after or before["id"] != after["id"]):  # a delete, a move
                events.setdefault(before["id"], []).append((seq, True, None))
                live.pop(before["id"], None)
            if after:
                image = (after["status"], after["amount"])
                events.setdefault(after["id"], []).append((seq, False, image))
                live[after["id"]] = image
    out = set()
    for key, mine in events.items():
        for m, (seq, deleted, image) in enumerate(mine):
            if not deleted:
                until = mine[m + 1][0] if m + 1 < len(mine) else None
                out.add((key, image, seq, until, until is None))
    return out


def history(root: Path) -> set[tuple]:
    rows = DeltaTable(str(root / "out/history")).to_pyarrow_table().to_pylist()
    return {
        (r["id"], (r["status"], r["amount"]), r["valid_from"], r["valid_to"], r["is_current"])
        for r in rows
    }


def merged(root: Path) -> dict[int, tuple]:
    table = DeltaTable(str(root / "out/orders")).to_pyarrow_table().to_pylist()
    assert len(table) == len({r["id"] for r in table})
    return {r["id"]: (r["status"], r["amount"]) for r in table}


def landed_ops(root: Path) -> list[str]:
    landing = DeltaTable(str(root / "warehouse/_rivc/landing/jr.orders"))
    return sorted(landing.to_pyarrow_table(columns=["op"]).column("op").to_pylist())


def row(i: int, status: str, amount: str) -> dict:
    return {"id": i, "status": status, "amount": float(amount)}


def test_a_plugin_log_lands_kills_and_resumes_through_the_change_log_driver(
    spark, tmp_path, monkeypatch
):
    monkeypatch.setitem(connectors(), ("source", "journal"), ENTRY)
    journal = tmp_path / "journal.jsonl"
    root = write_files(
        tmp_path / "jr",
        {
            "rivc_project.yml": "name: jr\n",
            "sources/s.yml": "sources:\n  - name: jr\n    connector: journal\n"
            f"    config: {{path: {journal}, key: id}}\n    tables:\n"
            "      - {name: orders, table: orders, columns: "
            "{id: bigint, status: string, amount: 'decimal(10,2)'}}\n",
            "sinks/out.yml": "sinks:\n  - name: lake\n    from: source:jr.orders\n"
            "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
            "    connector: delta\n"
            "    config: {table_uri: out/orders, mode: merge, merge_keys: [id]}\n"
            "  - name: history\n    from: source:jr.orders\n"
            "    transforms: [{type: unwrap_cdc, deletes: apply, sequence_by: seq}]\n"
            "    connector: delta\n"
            "    config: {table_uri: out/history, mode: scd2, merge_keys: [id]}\n",
        },
    )
    ins = [{"table": "orders", "op": "c", "after": row(i, "new", f"{i}.25")} for i in range(1, 6)]
    append(journal, *ins)
    append(journal, {"table": "orders", "op": "u", "after": row(2, "paid", "2.25")})
    append(journal, {"table": "other", "op": "c", "after": {"x": 1}})

    first = rivc(root, "run")
    assert first.exit_code == 0, first.output
    assert merged(root) == replayed(journal) and len(merged(root)) == 5
    assert landed_ops(root) == ["r"] * 5  # the snapshot, as of the journal's end

    # an update, a moved key (delete + insert with the row's values), a delete, an insert
    append(
        journal,
        {
            "table": "orders",
            "op": "u",
            "before": row(1, "new", "1.25"),
            "after": row(1, "new", "9.99"),
        },
        {
            "table": "orders",
            "op": "u",
            "before": row(3, "new", "3.25"),
            "after": row(30, "new", "3.25"),
        },
        {"table": "orders", "op": "d", "before": row(4, "new", "4.25")},
    )
    append(journal, {"table": "orders", "op": "c", "after": row(6, "late", "-0.01")})
    # one row updated in three transactions of one batch; a key deleted, then inserted again
    append(journal, {"table": "orders", "op": "u", "after": row(1, "paid", "9.99")})
    append(journal, {"table": "orders", "op": "u", "after": row(1, "paid", "10.50")})
    append(journal, {"table": "orders", "op": "d", "before": row(5, "new", "5.25")})
    append(journal, {"table": "orders", "op": "c", "after": row(5, "again", "5.55")})
    killed_run(root, "after-staging:jr.orders", "--select", "source:jr.orders")
    assert landed_ops(root) == ["r"] * 5  # staged, never committed
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    assert merged(root) == replayed(journal)
    assert landed_ops(root) == sorted(["r"] * 5 + ["u", "d", "c", "d", "c", "u", "u", "d", "c"])
    assert history(root) == replayed_history(journal, snapshot_at=3)

    # a truncate and an insert, killed once landed and before the sink took them
    append(
        journal,
        {"table": "orders", "op": "truncate"},
        {"table": "orders", "op": "c", "after": row(7, "fresh", "7.00")},
    )
    killed_run(root, "after-landing:jr.orders")
    assert merged(root) != replayed(journal)  # the sink has not taken the batch
    resumed = rivc(root, "run")
    assert resumed.exit_code == 0, resumed.output
    assert merged(root) == replayed(journal) == {7: ("fresh", Decimal("7.00"))}
    ops = landed_ops(root)
    assert ops.count("c") == 4 and ops.count("d") == 3 + 5  # the truncate: a delete per key
    assert history(root) == replayed_history(journal, snapshot_at=3)

    idle = rivc(root, "run")
    assert idle.exit_code == 0 and "no new changes (at line 10)" in idle.output, idle.output
    status = rivc(root, "cdc", "status", "--json")
    assert json.loads(status.output)["cdc"] == [
        {"table": "source:jr.orders", "held": "line 10", "log_end": 10}
    ]
    refused = rivc(root, "cdc", "drop", "jr")
    assert refused.exit_code == 2 and "keeps nothing on the server" in refused.output

    refreshed = rivc(root, "run", "--full-refresh")
    assert refreshed.exit_code == 0, refreshed.output
    assert merged(root) == replayed(journal)
    assert landed_ops(root) == ["r"]  # a new snapshot replaces the landed changes
