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

from rivc.compiler.registry import CONNECTORS
from rivc_testing import rivc, write_files

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]

# rivc in a process of its own with the plugin registered, killed at RIVC_FAULT
RUNNER = """
import sys
sys.path.insert(0, sys.argv[1])
from plugins.journal import ENTRY
from rivc.compiler.registry import CONNECTORS
CONNECTORS[("source", "journal")] = ENTRY
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
    monkeypatch.setitem(CONNECTORS, ("source", "journal"), ENTRY)
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
            "    config: {table_uri: out/orders, mode: merge, merge_keys: [id]}\n",
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
    killed_run(root, "after-staging:jr.orders", "--select", "source:jr.orders")
    assert landed_ops(root) == ["r"] * 5  # staged, never committed
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    assert merged(root) == replayed(journal)
    assert landed_ops(root) == sorted(["r"] * 5 + ["u", "d", "c", "d", "c"])

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
    assert ops.count("c") == 3 and ops.count("d") == 2 + 5  # the truncate: a delete per key

    idle = rivc(root, "run")
    assert idle.exit_code == 0 and "no new changes (at line 6)" in idle.output, idle.output
    status = rivc(root, "cdc", "status", "--json")
    assert json.loads(status.output)["cdc"] == [
        {"table": "source:jr.orders", "held": "line 6", "log_end": 6}
    ]
    refused = rivc(root, "cdc", "drop", "jr")
    assert refused.exit_code == 2 and "keeps nothing on the server" in refused.output

    refreshed = rivc(root, "run", "--full-refresh")
    assert refreshed.exit_code == 0, refreshed.output
    assert merged(root) == replayed(journal)
    assert landed_ops(root) == ["r"]  # a new snapshot replaces the landed changes
