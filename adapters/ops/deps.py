"""`rivc deps`: install the packages packages.yml asks for into dbt_packages/ (docs/dbt.md).

A `local:` package is copied; a `git:` package is cloned (any URL git reaches, file:// too) at
its `revision`; a hub package (`package: dbt-labs/dbt_utils`) is looked up on hub.getdbt.com and
cloned from the repository the hub names. What cannot be fetched (no network) is said plainly,
one line each, with what to do instead; the others are still installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import yaml

from rivc.compiler.dbt.packages import Wanted, wanted

HUB = "https://hub.getdbt.com/api/v1"
TIMEOUT_S = 60


class Unfetched(Exception):
    """A package that could not be installed, with what to do instead."""


def install(root: Path, folder: str) -> tuple[list[str], list[str]]:
    """Install every package; returns (what was installed, what could not be) as lines."""
    done, failed = [], []
    target = root / folder
    for item in wanted(root):
        try:
            name = _install(root, target, item)
        except Unfetched as exc:
            failed.append(f"{item.file}:{item.line}: {exc}")
        else:
            done.append(f"installed {name} ({item.kind}: {item.where})")
    return done, failed


def _install(root: Path, target: Path, item: Wanted) -> str:
    with tempfile.TemporaryDirectory(prefix="rivc-deps-") as tmp:
        if item.kind == "local":  # linked, as dbt does: edits to it apply at once
            source = (root / item.where).resolve()
            if not (source / "dbt_project.yml").is_file():
                raise Unfetched(f"local: {item.where} has no dbt_project.yml")
            name = _name(source)
            _clear(target / name)
            target.mkdir(parents=True, exist_ok=True)
            (target / name).symlink_to(source, target_is_directory=True)
            return name
        else:
            url, revision = (item.where, item.revision) if item.kind == "git" else _from_hub(item)
            source = Path(tmp) / "repo"
            _clone(url, revision, source)
            if item.subdirectory:
                source = source / item.subdirectory
            if not (source / "dbt_project.yml").is_file():
                raise Unfetched(
                    f"{url} has no dbt_project.yml{' in ' + item.subdirectory if item.subdirectory else ''}"
                )
        name = _name(source)
        _clear(target / name)
        shutil.copytree(source, target / name, ignore=shutil.ignore_patterns(".git"))
        return name


def _name(package: Path) -> str:
    data = yaml.safe_load((package / "dbt_project.yml").read_text()) or {}
    return str(data.get("name") or package.name)


def _clear(dest: Path) -> None:
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)


def _clone(url: str, revision: str | None, dest: Path) -> None:
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )

    try:
        cloned = git("clone", "--quiet", url, str(dest))
        if cloned.returncode == 0 and revision:
            cloned = git("-C", str(dest), "checkout", "--quiet", revision)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unfetched(f"cannot fetch {url}: {exc}") from None
    if cloned.returncode != 0:
        why = (cloned.stderr.strip().splitlines() or ["git failed"])[-1]
        raise Unfetched(
            f"cannot fetch {url}{'@' + revision if revision else ''}: {why}; without network, "
            "copy the package into dbt_packages/ or point packages.yml at it with local:"
        )


def _from_hub(item: Wanted) -> tuple[str, str | None]:
    """The git URL and revision of a hub package's version."""
    org, _, name = item.where.partition("/")
    try:
        with urllib.request.urlopen(f"{HUB}/{org}/{name}.json", timeout=10) as response:
            index = json.load(response)
    except (OSError, ValueError) as exc:
        raise Unfetched(
            f"cannot reach hub.getdbt.com for {item.where} ({exc}); without network, copy the "
            f"package into dbt_packages/ or use git: or local: in {item.file}"
        ) from None
    versions = index.get("versions") or {}
    version = (item.revision or index.get("latest") or "").split(",")[0].lstrip(">=<~ ")
    info = versions.get(version) or {}
    url = (info.get("downloads") or {}).get("git") or index.get("git")
    if not url:
        raise Unfetched(f"{item.where} {version}: not on hub.getdbt.com")
    return str(url), version or None
