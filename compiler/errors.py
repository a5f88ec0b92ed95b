"""Errors users see: one class per phase, each with a location inside the project."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True, order=True)
class SourceLocation:
    """A place in a project file; `path` is relative to the project root, line/col are 1-based."""

    path: Path
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        return ":".join(
            str(p) for p in (self.path.as_posix(), self.line, self.col) if p is not None
        )


class RivcError(Exception):
    """The user's problem (bad project, bad command line); anything else is a bug."""

    def __init__(self, message: str, location: SourceLocation | None = None) -> None:
        super().__init__(message)
        self.message, self.location = message, location

    def __str__(self) -> str:
        return (
            f"{self.location}: error: {self.message}" if self.location else f"error: {self.message}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, SourceLocation | None]]:  # keep the location
        return (type(self), (self.message, self.location))


class ProjectError(RivcError):
    """rivc_project.yml, profiles.yml or a spec file is missing or invalid."""


class RenderError(RivcError):
    """Jinja rendering or parameter binding failed."""


class SqlError(RivcError):
    """A model, source query or expression does not parse or does not validate."""


class ShapeError(SqlError):
    """A query parses but is not what it must be: one SELECT (and read-only, for sources)."""


class GraphError(RivcError):
    """The DAG has a cycle, or a reference names nothing."""


class SelectionError(RivcError):
    """A --select/--exclude expression is invalid or names nothing."""


class ConnectorError(RivcError):
    """A connector is unknown, misconfigured, or failed to reach its system."""


class EnvironmentFault(RivcError):
    """The machine cannot run what was asked (no Java, Spark does not start): the whole
    command stops with this one line and exit code 2, rather than failing node by node."""


class StateError(RivcError):
    """The state store is locked by another run or cannot be used."""


class CompileFailed(RivcError):
    """Several errors found in one compile; each keeps its own class and location."""

    def __init__(self, errors: Iterable[RivcError]) -> None:
        flat: list[RivcError] = []
        for err in errors:  # nested failures are kept one by one
            flat += err.errors if isinstance(err, CompileFailed) else [err]
        self.errors: list[RivcError] = sorted(flat, key=_sort_key)
        super().__init__(f"{len(self.errors)} error(s)")

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def __reduce__(self) -> tuple[type, tuple[list[RivcError]]]:  # type: ignore[override]
        return (type(self), (self.errors,))


def _sort_key(err: RivcError) -> tuple[str, int, int, str]:
    loc = err.location
    if loc is None:
        return ("", 0, 0, err.message)
    return (loc.path.as_posix(), loc.line or 0, loc.col or 0, err.message)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ", did you mean 'x'?" suffix for the closest candidate, or "" when none is close."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f", did you mean {matches[0]!r}?" if matches else ""
