"""dbt packages: what `packages.yml` (or `dependencies.yml`) asks for and what `dbt_packages/`
holds (docs/dbt.md). As in dbt, a project reads its packages from the installed folder, which
`rivc deps` fills; each package's macros are a namespace (`dbt_utils.star`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ProjectError, SourceLocation
from ..loading.locate import read_project_file

FILES = ("packages.yml", "dependencies.yml")


@dataclass(frozen=True, slots=True)
class Wanted:
    """One entry of packages.yml: a hub package, a git repository or a local folder."""

    kind: str  # "package", "git" or "local"
    where: str  # org/name, a URL, or a path
    revision: str | None  # the hub version or git revision
    subdirectory: str | None
    line: int | None
    file: str


@dataclass(frozen=True, slots=True)
class Installed:
    name: str  # its dbt_project.yml name: the macros' namespace
    folder: Path  # relative to the project root
    macros: tuple[tuple[str, str], ...]  # (path, text), paths relative to the project root


def wanted(root: Path) -> list[Wanted]:
    """The packages the project asks for; none without a packages file."""
    out: list[Wanted] = []
    for name in FILES:
        if not (root / name).is_file():
            continue
        text = read_project_file(root, Path(name))
        try:
            data = yaml.compose(text)
        except yaml.YAMLError as exc:
            raise ProjectError(f"not valid YAML: {exc}", SourceLocation(Path(name))) from None
        entries = _entries(data, name)
        for node in entries:
            item = {k.value: v for k, v in node.value} if isinstance(node, yaml.MappingNode) else {}
            line = node.start_mark.line + 1
            kind = next((k for k in ("package", "git", "local") if k in item), None)
            if kind is None:
                raise ProjectError(
                    "a package needs package:, git: or local:", SourceLocation(Path(name), line)
                )
            revision = item.get("version") or item.get("revision")
            subdirectory = item.get("subdirectory")
            out.append(
                Wanted(
                    kind,
                    str(_scalar(item[kind])),
                    None if revision is None else str(_scalar(revision)),
                    None if subdirectory is None else str(_scalar(subdirectory)),
                    line,
                    name,
                )
            )
    return out


def _entries(data: Any, name: str) -> list[Any]:
    if data is None:
        return []
    if isinstance(data, yaml.MappingNode):
        for key, value in data.value:
            if key.value == "packages" and isinstance(value, yaml.SequenceNode):
                return list(value.value)
    raise ProjectError(f"{name} must hold `packages:`, a list", SourceLocation(Path(name), 1))


def _scalar(node: Any) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return ",".join(str(n.value) for n in node.value)
    return node.value


def installed(root: Path, folder: str) -> list[Installed]:
    """Every package under `folder` (dbt_packages/): its name and macro files."""
    base = root / folder
    if not base.is_dir():
        return []
    out = []
    for project in sorted(p for p in base.iterdir() if (p / "dbt_project.yml").is_file()):
        rel = project.relative_to(root)
        data = yaml.safe_load(read_project_file(root, rel / "dbt_project.yml")) or {}
        name = str(data.get("name") or project.name)
        paths = data.get("macro-paths") or ["macros"]
        files = []
        for macro_path in paths if isinstance(paths, list) else [paths]:
            for sql in sorted((project / str(macro_path)).glob("**/*.sql")):
                path = sql.relative_to(root)
                files.append((path.as_posix(), read_project_file(root, path)))
        out.append(Installed(name, rel, tuple(files)))
    return out


def check_installed(root: Path, folder: str, found: list[Installed]) -> None:
    """A packages file whose packages are not installed is an error that says what to run."""
    asked = wanted(root)
    if asked and not found:
        first = asked[0]
        raise ProjectError(
            f"{len(asked)} package{'s' if len(asked) != 1 else ''} asked for and none in "
            f"{folder}/: run `rivc deps`",
            SourceLocation(Path(first.file), first.line),
        )
