"""Writing target/: artifacts, the per-model compile cache and the whole-project fingerprint.

The fingerprint lets an unchanged project skip compiling without importing sqlglot or Jinja.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import site
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rivc.compiler.loading.locate import (
    DEFAULT_PATHS,
    TARGET_DIR,
    find_profiles,
    list_project_files,
)
from rivc.compiler.version import VERSION

CACHE_DIR = (
    "cache"  # target/cache/: the compile cache and fingerprint (not .rivc/, which is run state)
)
FINGERPRINT = "fingerprint.json"
CACHE = "compile_cache.pickle"
# 2: the cache keeps seeds' inferred types; 3: each model's column lineage; 4: its vars, macros
FORMAT = 5


def _env_digest(env: Mapping[str, str], names: list[str]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(names):
        h.update(f"{name}={env.get(name)!r}\0".encode())  # values are hashed, never stored
    return h.hexdigest()


def _installed() -> list[tuple[str, int]]:
    """Where packages are installed, each with the time its folder last changed: an install, an
    upgrade or a removal (a connector plugin's, sqlglot's) changes it, so compile runs again. A
    stat per folder: the fast path reads no package metadata."""
    places = [*site.getsitepackages(), site.getusersitepackages()]
    places += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    out = []
    for place in places:
        try:
            out.append((place, os.stat(place).st_mtime_ns))
        except OSError:
            continue
    return out


def fingerprint(
    root: Path, paths: Mapping[str, str], command: Any, env: Mapping[str, str], env_names: list[str]
) -> str:
    """A hash over every project file, the profile, the command's options, the env vars read and
    the installed packages."""
    h = hashlib.blake2b(digest_size=16)
    head = [FORMAT, VERSION, command, _installed()]
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    for rel in list_project_files(root, paths):
        h.update(rel.as_posix().encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    profiles = find_profiles(root, env)
    if profiles is not None and not profiles.is_relative_to(root):
        h.update(str(profiles).encode() + b"\0" + profiles.read_bytes())
    h.update(_env_digest(env, env_names).encode())
    return h.hexdigest()


def up_to_date(
    target: Path, root: Path, command: Any, env: Mapping[str, str]
) -> dict[str, Any] | None:
    """The stored summary when nothing changed since the last identical command, else None."""
    try:
        stored = json.loads((target / CACHE_DIR / FINGERPRINT).read_text())
    except (OSError, ValueError):
        return None
    try:
        paths = stored.get("paths", DEFAULT_PATHS)
        if stored.get("digest") != fingerprint(root, paths, command, env, stored["env"]):
            return None
    except (OSError, KeyError):
        return None
    if not all((target / f).is_file() for f in stored.get("outputs", ())):
        return None
    summary: dict[str, Any] = stored.get("summary", {})
    return summary


def save_fingerprint(
    target: Path,
    root: Path,
    paths: Mapping[str, str],
    command: Any,
    env: Mapping[str, str],
    env_names: list[str],
    outputs: list[str],
    summary: dict[str, Any],
) -> None:
    data = {
        "digest": fingerprint(root, paths, command, env, env_names),
        "paths": dict(paths),
        "env": sorted(env_names),
        "outputs": outputs,
        "summary": summary,
    }
    (target / CACHE_DIR).mkdir(parents=True, exist_ok=True)
    _atomic_write(target / CACHE_DIR / FINGERPRINT, json.dumps(data))


def load_cache(target: Path) -> Any:
    from rivc.compiler import CompileCache

    try:
        with open(target / CACHE_DIR / CACHE, "rb") as fh:
            version, cache = pickle.load(fh)
        if version == FORMAT and isinstance(cache, CompileCache):
            return cache
    except (
        OSError,
        pickle.UnpicklingError,
        EOFError,
        AttributeError,
        ValueError,
        TypeError,
        ImportError,
    ):  # a cache of another version: its classes moved or changed
        pass
    return CompileCache()


def save_cache(target: Path, cache: Any) -> None:
    path = target / CACHE_DIR / CACHE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump((FORMAT, cache), fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def write_artifacts(target: Path, files: Mapping[str, str]) -> None:
    """Make target/ hold `files`: unchanged files are left alone, stale compiled files removed.

    Creating files dominates a cold compile of a large project, so a recompile after a small
    change rewrites only what changed.
    """
    compiled = target / "compiled"
    if compiled.exists():
        for old in compiled.rglob("*"):
            if old.is_file() and old.relative_to(target).as_posix() not in files:
                old.unlink()
    made: set[Path] = set()
    for rel, text in files.items():
        path = target / rel
        try:
            if path.read_text(encoding="utf-8") == text:
                continue
        except OSError:
            pass
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        _atomic_write(path, text)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def analyze_project(root: Path, options: Any) -> Any:
    """Load the project and analyze it with the per-model cache kept under target/."""
    from rivc.compiler import load_project
    from rivc.compiler.driver import analyze

    target = root / TARGET_DIR
    cache = load_cache(target)
    compiled = analyze(load_project(root), options, cache)
    save_cache(target, cache)
    return compiled


def compile_to_target(
    root: Path, options: Any, on_warning: Callable[[str], None] = lambda text: None
) -> tuple[Any, dict[str, str]]:
    """Compile and write target/: the one way `compile`, `run`, `build`, `test` and `show` do
    it. Returns the compiled project and the files written (path under target/ -> text)."""
    from rivc.compiler.driver import no_cyclic_gc
    from rivc.compiler.emit.codegen import artifacts
    from rivc.compiler.errors import CompileFailed

    with no_cyclic_gc():
        compiled = analyze_project(root, options)
        for warning in compiled.warnings:
            on_warning(str(warning))
        if compiled.errors:
            raise CompileFailed(f.error for f in compiled.errors)
        files = artifacts(compiled)
        write_artifacts(root / TARGET_DIR, files)
    return compiled, files
