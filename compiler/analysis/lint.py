"""`rivc lint`: the compile findings (rules in rules.py), with rivc_project.yml's disabled rules,
`-- noqa` lines and a path filter applied, in text, JSON or GitHub format."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from ..driver import CompiledProject
from .rules import RULES, Finding

_NOQA = re.compile(r"--\s*noqa(?::\s*(?P<ids>[A-Z0-9, ]+))?", re.I)


def lint_findings(compiled: CompiledProject, paths: Iterable[str] = ()) -> list[Finding]:
    """Findings left after rules disabled in rivc_project.yml, `-- noqa` lines and the path filter."""
    disabled = set(compiled.project.spec.lint.disable)
    wanted = [Path(p).as_posix().rstrip("/") for p in paths]
    root = compiled.project.root
    lines_cache: dict[Path, list[str]] = {}
    out = []
    for f in compiled.findings:
        if f.rule in disabled:
            continue
        loc = f.location
        if wanted and (
            loc is None
            or not any(
                loc.path.as_posix() == w or loc.path.as_posix().startswith(w + "/")
                for w in _relative(wanted, root)
            )
        ):
            continue
        if loc is not None and loc.line and loc.path.suffix == ".sql":
            if loc.path not in lines_cache:
                try:
                    lines_cache[loc.path] = (
                        (root / loc.path).read_text(encoding="utf-8").splitlines()
                    )
                except OSError:
                    lines_cache[loc.path] = []
            lines = lines_cache[loc.path]
            if 0 < loc.line <= len(lines) and _suppressed(lines[loc.line - 1], f.rule):
                continue
        out.append(f)
    return out


def _relative(paths: list[str], root: Path) -> list[str]:
    out = []
    for p in paths:
        path = Path(p)
        if path.is_absolute() or Path.cwd() != root:
            try:
                path = (Path.cwd() / path).resolve().relative_to(root)
            except ValueError:
                pass
        out.append(path.as_posix())
    return out


def _suppressed(line: str, rule: str) -> bool:
    m = _NOQA.search(line)
    if not m:
        return False
    ids = m.group("ids")
    return ids is None or rule in {i.strip().upper() for i in ids.split(",")}


def format_findings(findings: list[Finding], fmt: str) -> str:
    """text (path:line:col: severity: message [RVnnn]), json, or GitHub annotations."""
    if fmt == "json":
        return json.dumps(
            [
                {
                    "rule": f.rule,
                    "name": RULES[f.rule].name,
                    "severity": f.severity,
                    "message": f.error.message,
                    "path": f.location.path.as_posix() if f.location else None,
                    "line": f.location.line if f.location else None,
                    "col": f.location.col if f.location else None,
                }
                for f in findings
            ],
            indent=2,
        )
    if fmt == "github":
        lines = []
        for f in findings:
            level = "error" if f.severity == "error" else "warning"
            where = ""
            if f.location:
                parts = [f"file={f.location.path.as_posix()}"]
                if f.location.line:
                    parts.append(f"line={f.location.line}")
                if f.location.col:
                    parts.append(f"col={f.location.col}")
                where = " " + ",".join(parts)
            message = f.error.message.replace("%", "%25").replace("\n", "%0A")
            lines.append(f"::{level}{where},title={f.rule}::{message}")
        return "\n".join(lines)
    return "\n".join(str(f) for f in findings)
