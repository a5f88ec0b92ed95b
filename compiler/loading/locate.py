"""Where project files are; kept free of heavy imports for the CLI's up-to-date check."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import ProjectError

PROJECT_FILE = "rivc_project.yml"
DBT_PROJECT_FILE = "dbt_project.yml"  # a dbt project, read as it is when it has no PROJECT_FILE
TARGET_ENV = "RIVC_TARGET"  # the profile output to use; what --target sets
TARGET_DIR = "target"  # what compile writes: manifest, compiled SQL, jobs
STATE_DIR = ".rivc"  # what runs keep: the state store, staged copies, checkpoints, logs
SPARK_LOG = "spark.log"  # under STATE_DIR: the JVM's own output
PROFILES_FILE = "profiles.yml"
PROFILES_DIR_ENV = "RIVC_PROFILES_DIR"  # --profiles-dir
DEFAULT_PATHS = {
    "models": "models",
    "sources": "sources",
    "sinks": "sinks",
    "macros": "macros",
    "tests": "tests",
    "seeds": "seeds",
    "snapshots": "snapshots",
    "packages": "dbt_packages",
}


MAX_FILE_BYTES = 8 << 20  # a project file larger than this is refused (docs/project.md)
MAX_SEED_BYTES = 256 << 20  # seeds are data: larger, but still a file kept in git


def read_project_file(root: Path, rel: Path, limit: int = MAX_FILE_BYTES) -> str:
    """A project file's text: UTF-8, no NUL bytes, at most `limit` bytes; else a ProjectError
    with the position of the first bad byte."""
    path = rel if rel.is_absolute() else root / rel
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ProjectError(
            f"{rel}: larger than {limit >> 20} MiB; project files are text a person edits"
        )

    def position(offset: int) -> tuple[int, int]:
        line_start = data.rfind(b"\n", 0, offset) + 1
        return data.count(b"\n", 0, offset) + 1, offset - line_start + 1

    from ..errors import SourceLocation

    if b"\0" in data:
        line, col = position(data.index(b"\0"))
        raise ProjectError("not a text file (a NUL byte)", SourceLocation(rel, line, col))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = position(exc.start)
        raise ProjectError(
            f"not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded; save the file as UTF-8",
            SourceLocation(rel, line, col),
        ) from None


def find_project_root(start: Path) -> Path:
    """The nearest directory at or above `start` holding rivc_project.yml or dbt_project.yml."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / PROJECT_FILE).is_file() or (folder / DBT_PROJECT_FILE).is_file():
            return folder
    raise ProjectError(
        f"no {PROJECT_FILE} (or {DBT_PROJECT_FILE}) found in {start} or any parent directory"
    )


def project_file(root: Path) -> Path:
    """The project's own file: rivc_project.yml, else a dbt project's dbt_project.yml."""
    if not (root / PROJECT_FILE).is_file() and (root / DBT_PROJECT_FILE).is_file():
        return Path(DBT_PROJECT_FILE)
    return Path(PROJECT_FILE)


def find_profiles(root: Path, env: Mapping[str, str]) -> Path | None:
    """profiles.yml where dbt looks for it, first found: the folder --profiles-dir or
    $RIVC_PROFILES_DIR names, $DBT_PROFILES_DIR, the project, ~/.rivc/ (not ~/.dbt/, which
    holds dbt's targets for its other adapters)."""
    candidates = [Path(env[v]) for v in (PROFILES_DIR_ENV, "DBT_PROFILES_DIR") if env.get(v)]
    candidates += [root, Path.home() / ".rivc"]
    return next((c / PROFILES_FILE for c in candidates if (c / PROFILES_FILE).is_file()), None)


def list_project_files(root: Path, paths: Mapping[str, str]) -> list[Path]:
    """Every project file compile reads, relative to root, sorted."""
    files = [project_file(root)]
    files += [
        Path(name) for name in ("packages.yml", "dependencies.yml") if (root / name).is_file()
    ]
    if (root / PROFILES_FILE).is_file():
        files.append(Path(PROFILES_FILE))
    yml = ("*.yml", "*.yaml")
    for key, patterns in (
        ("sources", yml),
        ("sinks", yml),
        ("models", ("**/*.sql", "**/*.py", "**/*.yml", "**/*.yaml")),
        ("macros", ("**/*.sql",)),
        ("tests", ("**/*.sql", "**/fixtures/**/*.csv")),
        ("seeds", ("**/*.csv", "**/*.yml", "**/*.yaml")),
        ("snapshots", ("**/*.sql", "**/*.yml", "**/*.yaml")),
        ("packages", ("**/*.sql", "*/dbt_project.yml")),
    ):
        base = root / paths.get(key, key)
        if base.is_dir():
            for pattern in patterns:
                files += [f.relative_to(root) for f in base.glob(pattern) if f.is_file()]
    return sorted(set(files))
