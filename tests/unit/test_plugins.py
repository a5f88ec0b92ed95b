"""Connectors from other packages (the rivc.connectors entry point group): an installed plugin
compiles without Spark and joins the compile fingerprint; a broken one is named with its
distribution, never skipped in silence and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rivc_testing import install_plugin, write_files

PROJECT = {
    "rivc_project.yml": "name: plug\n",
    "sources/gen.yml": "sources:\n  - name: gen\n    connector: datagen\n    tables:\n"
    "      - {name: orders, config: {pattern: orders, max_events: 5, seed: 1}}\n",
    "models/big.sql": "select order_id, total from {{ source('gen', 'orders') }}\n",
}
LEDGER = (
    "sinks/out.yml",
    "sinks:\n  - {name: book, from: big, connector: ledger, config: {path: b}}\n",
)

# compile in a process where importing pyspark fails, asserting at exit that none was imported
NO_SPARK = (
    "import sys; sys.modules['pyspark'] = None\n"
    "from rivc.adapters.cli import main\n"
    "try:\n    main()\nexcept SystemExit as e:\n"
    "    assert 'pyspark' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    "    raise\n"
)


def cli(site: Path | None, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-c", NO_SPARK, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def fake_distribution(site: Path, name: str, entry: str, modules: dict[str, str]) -> Path:
    """An installed distribution as pip leaves one: a dist-info folder naming its entry point in
    rivc.connectors, and its modules."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[rivc.connectors]\n{entry}\n")
    for rel, text in modules.items():
        (site / rel).write_text(textwrap.dedent(text))
    return site


def test_an_installed_plugin_compiles_without_spark_and_joins_the_fingerprint(tmp_path):
    root = write_files(tmp_path / "p", dict([*PROJECT.items(), LEDGER]))
    site = tmp_path / "site"
    refused = cli(site, "compile", "--project-dir", str(root))
    assert refused.returncode == 2
    assert (
        "sinks/out.yml:2:29: error: unknown sink connector 'ledger'"
        in refused.stderr + refused.stdout
    )

    install_plugin(site)
    done = cli(site, "compile", "--project-dir", str(root))
    assert done.returncode == 0, done.stderr
    again = cli(site, "compile", "--project-dir", str(root))
    assert "up to date" in again.stdout, again.stdout
    # an upgraded plugin may accept other configs: compile runs again
    install_plugin(site)
    upgraded = cli(site, "compile", "--project-dir", str(root))
    assert upgraded.returncode == 0 and "up to date" not in upgraded.stdout, upgraded.stdout
    listed = cli(site, "connectors")
    assert listed.returncode == 0, listed.stderr
    assert "ledger" in listed.stdout and "(from rivc-ledger 0.1.0)" in listed.stdout


BROKEN = {
    "missing module": (
        "gone = rivc_gone.spec:ENTRIES",
        {},
        "plugin 'gone' (rivc-gone 1.0) did not load: ModuleNotFoundError: No module named 'rivc_gone'",
    ),
    "not an entry": (
        "gone = rivc_gone:ENTRIES",
        {"rivc_gone.py": "ENTRIES = ({'name': 'ledger'},)\n"},
        "did not load: TypeError: rivc_gone:ENTRIES holds dict, not a ConnectorInfo",
    ),
    "a name taken": (
        "gone = rivc_gone:ENTRIES",
        {
            "rivc_gone.py": """
                from rivc.adapters.connectors.delta.spec import ENTRIES as DELTA
                ENTRIES = [e for e in DELTA if e.kind == "sink"]
            """
        },
        "did not load: sink 'delta' is already taken",
    ),
    "its own code fails": (
        "gone = rivc_gone:ENTRIES",
        {"rivc_gone.py": "raise RuntimeError('no licence key')\n"},
        "did not load: RuntimeError: no licence key",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_plugin_is_named_with_its_distribution(tmp_path, case):
    entry, modules, reason = BROKEN[case]
    site = fake_distribution(tmp_path / "site", "rivc-gone", entry, modules)
    listed = cli(site, "connectors")
    assert listed.returncode == 2 and reason in listed.stderr, listed.stderr
    assert "Traceback" not in listed.stderr
    assert "delta" in listed.stdout  # the built-in connectors are still listed

    # a project that names a connector the plugin would have added is told why it is unknown
    root = write_files(tmp_path / "p", dict([*PROJECT.items(), LEDGER]))
    refused = cli(site, "compile", "--project-dir", str(root))
    out = refused.stdout + refused.stderr
    assert refused.returncode == 2 and "unknown sink connector 'ledger'" in out, out
    assert reason in out and "Traceback" not in out
    # one that does not compiles
    (root / LEDGER[0]).unlink()
    assert cli(site, "compile", "--project-dir", str(root)).returncode == 0
