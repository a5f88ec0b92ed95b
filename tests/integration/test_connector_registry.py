"""A connector from another package: tests/plugins/rivc-ledger, built and installed the way a user
installs one (pip), adds its sink through the rivc.connectors entry point; compile, run,
`rivc connectors`, `rivc doctor`, selection, show and maintain all take it as a built-in one."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rivc.adapters.cli import main
from rivc.compiler import registry
from rivc_testing import install_plugin, rivc, write_files

pytestmark = pytest.mark.integration


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The installed plugin's folder, on this process's path once the test puts it there; the
    registry is read anew before and after (it is read once per process)."""
    target = install_plugin(tmp_path / "site")
    registry.catalog.cache_clear()
    yield target
    monkeypatch.undo()
    for name in [m for m in sys.modules if m.split(".")[0] == "rivc_ledger"]:
        del sys.modules[name]
    registry.catalog.cache_clear()


FILES = {
    "rivc_project.yml": "name: reg\n",
    "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
    "      - {name: orders, config: {pattern: orders, max_events: 20, seed: 3,"
    " events_per_second: 0.001}}\n",
    "models/big.sql": "select order_id, total from {{ source('gen', 'orders') }} where total > 0\n",
    "sinks/out.yml": "sinks:\n  - {name: book, from: big, connector: ledger,"
    " config: {path: out/book}}\n"
    "  - {name: latest, from: big, connector: ledger,"
    " config: {path: out/latest, mode: merge, key: order_id}}\n",
}


def test_an_installed_connector_compiles_runs_and_is_listed(
    spark, tmp_path, monkeypatch, plugin_path
):
    root = write_files(tmp_path / "p", FILES)
    refused = rivc(root, "compile")
    assert refused.exit_code == 2
    assert "unknown sink connector 'ledger'" in refused.output

    monkeypatch.syspath_prepend(str(plugin_path))
    registry.catalog.cache_clear()
    listed = CliRunner().invoke(main, ["connectors"])
    assert listed.exit_code == 0, listed.output
    assert "ledger" in listed.output and "each batch as one JSON line" in listed.output
    assert "(from rivc-ledger 0.1.0)" in listed.output
    bad = write_files(
        tmp_path / "bad",
        {
            **FILES,
            "sinks/out.yml": FILES["sinks/out.yml"].replace("path: out/book", "paht: out/book"),
        },
    )
    result = rivc(bad, "compile")
    assert result.exit_code == 2 and "sinks/out.yml:2:" in result.output, result.output

    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (root / "out/book/ledger.jsonl").read_text().splitlines()]
    assert [line["batch"] for line in lines] == [0]
    assert {r["order_id"] for r in lines[0]["rows"]} and all(
        float(r["total"]) > 0 for r in lines[0]["rows"]
    )
    # the next batch goes above what the sink holds
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (root / "out/book/ledger.jsonl").read_text().splitlines()]
    assert [line["batch"] for line in lines] == [0, 1]
    assert "sink book (ledger out/book)" in rivc(root, "doctor").output
    latest = json.loads((root / "out/latest/current.json").read_text())
    assert set(latest) == {str(r["order_id"]) for r in lines[0]["rows"] + lines[1]["rows"]}

    # what the built-in sinks get, through the same hooks: selection by mode, a preview read
    # back without Spark, housekeeping, and compile's checks of keys and types
    chosen = rivc(root, "ls", "-s", "config.mode:merge", "--output", "name")
    assert chosen.output.split() == ["sink:latest"]
    shown = rivc(root, "show", "sink:book", "--limit", "2")
    assert shown.exit_code == 0 and "order_id" in shown.output, shown.output
    kept = rivc(root, "maintain", "-s", "sink:book")
    assert "sink:book: dropped 1 ledger lines" in kept.output, kept.output
    assert len((root / "out/book/ledger.jsonl").read_text().splitlines()) == 1
    wrong = write_files(
        tmp_path / "wrong",
        {
            **FILES,
            "models/big.sql": "select order_id, interval 1 day as gap "
            "from {{ source('gen', 'orders') }}\n",
            "sinks/out.yml": FILES["sinks/out.yml"].replace("key: order_id", "key: order"),
        },
    )
    refused = rivc(wrong, "compile")
    assert refused.exit_code == 2
    assert "key 'order' is not a column of 'big'" in refused.output, refused.output
    assert "sink 'book' cannot hold column 'gap'" in refused.output
