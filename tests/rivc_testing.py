from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from rivc.adapters.cli import main
from rivc.compiler import CompileOptions
from rivc.compiler.driver import CompiledProject, analyze
from rivc.compiler.project import load_project
from rivc.compiler.rules import Finding


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Write {path under root: text}; returns root."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def analyze_dir(root: Path, **options: object) -> CompiledProject:
    return analyze(load_project(root, env={}), CompileOptions(**options), env={})  # type: ignore[arg-type]


def findings(root: Path, **options: object) -> list[Finding]:
    return analyze_dir(root, **options).findings


def only(items: list[Finding], rule: str) -> Finding:
    picked = [f for f in items if f.rule == rule]
    assert len(picked) == 1, [str(f) for f in items]
    return picked[0]


def rivc(root: Path, *args: str) -> Result:
    """`rivc ARGS --project-dir root` in this process (on the test session's SparkSession)."""
    return CliRunner().invoke(main, [*args, "--project-dir", str(root)], catch_exceptions=False)


def iceberg_catalog(root: Path) -> Any:
    """The project's default Iceberg catalog (SQLite under .rivc/iceberg), read by pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    home = root / ".rivc/iceberg"
    return SqlCatalog(
        "rivc", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri()
    )
