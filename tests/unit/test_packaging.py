from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = {v: k for k, v in config["package-dir"].items()}
    found = set()
    for top, name in dirs.items():
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / top)
            found.add(".".join([name, *rel.parts]))
    assert found == listed


def test_no_import_by_folder_name():
    """`import compiler` passes tests from the checkout and fails users: always rivc.compiler."""
    for top in ("compiler", "adapters", "tests", "bench"):
        for path in (REPO / top).rglob("*.py"):
            imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", path.read_text(), re.M)
            assert not [m for m in imports if m.split(".")[0] in ("compiler", "adapters")], path


SPEC = re.compile(r"^rivc\.adapters\.connectors\.\w+\.spec$")  # a connector's compile half


def test_compiler_never_imports_adapters_or_pyspark():
    """The compile half (compiler/ and each connector package's spec) imports no runtime."""
    specs = (REPO / "adapters" / "connectors").glob("*/spec.py")
    for path in [*(REPO / "compiler").rglob("*.py"), *specs]:
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", path.read_text(), re.M)
        runtime = [m for m in imports if m.startswith("rivc.adapters") and not SPEC.match(m)]
        assert not [m for m in imports if m.startswith("pyspark")] + runtime, path
