"""The lint rules: the table of stable ids, and one constructor per rule.

Every finding is made here, where its id, name and severity are written once; the checks
(compiler/analysis/workers.py, compiler/nodes/, compiler/analysis/validate.py) call the constructor of the rule
they enforce with the error they found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import (
    GraphError,
    ProjectError,
    RenderError,
    RivcError,
    ShapeError,
    SourceLocation,
    SqlError,
)

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    name: str
    summary: str


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem found in the project: a stable rule id, its severity and the error itself."""

    rule: str
    severity: Severity
    error: RivcError

    @property
    def location(self) -> SourceLocation | None:
        return self.error.location

    def __str__(self) -> str:
        loc = f"{self.location}: " if self.location else ""
        return f"{loc}{self.severity}: {self.error.message} [{self.rule}]"


RULES = {
    r.id: r
    for r in (
        Rule("RV001", "syntax", "SQL does not parse, or a model is not exactly one SELECT"),
        Rule(
            "RV002", "unknown-reference", "ref(), source(), a sink's from or a test names nothing"
        ),
        Rule("RV003", "unbound-parameter", "a ${name} placeholder has no value"),
        Rule(
            "RV004",
            "key-column",
            "a cursor, chunk, time, unique, merge or partition column is not in the query's output",
        ),
        Rule("RV005", "star-into-sink", "SELECT * in a model that feeds a sink"),
        Rule("RV006", "merge-without-key", "incremental merge without unique_key"),
        Rule(
            "RV007",
            "nondeterministic-incremental-filter",
            "rand(), now() and friends in an incremental filter",
        ),
        Rule("RV008", "cross-join", "a join without ON or USING"),
        Rule("RV009", "unknown-column", "a column that no input relation has"),
        Rule("RV010", "unsafe-source-query", "a source query that is not one read-only SELECT"),
        Rule("RV011", "render", "Jinja, var(), env_var() or config() failed"),
        Rule("RV012", "not-run", "a dbt resource rivc reads and does not run (docs/dbt.md)"),
        Rule(
            "RV013",
            "breaking-change",
            "since --state, a column a sink delivers was removed, retyped or redefined",
        ),
    )
}


def syntax(error: SqlError) -> Finding:
    return Finding("RV001", "error", error)


def unknown_reference(error: GraphError) -> Finding:
    return Finding("RV002", "error", error)


def unbound_parameter(name: str, location: SourceLocation) -> Finding:
    return Finding(
        "RV003",
        "error",
        RenderError(
            f"parameter ${{{name}}} is not bound: add it to params in rivc_project.yml "
            f"or pass --param {name}=...",
            location,
        ),
    )


def key_column(error: SqlError, severity: Severity = "error") -> Finding:
    """An error, or a warning where the column may still appear at run time."""
    return Finding("RV004", severity, error)


def star_into_sink(error: SqlError) -> Finding:
    return Finding("RV005", "warning", error)


def merge_without_key(error: SqlError) -> Finding:
    return Finding("RV006", "error", error)


def nondeterministic_incremental_filter(error: SqlError) -> Finding:
    return Finding("RV007", "warning", error)


def cross_join(error: SqlError) -> Finding:
    return Finding("RV008", "warning", error)


def unknown_column(error: SqlError) -> Finding:
    return Finding("RV009", "error", error)


def unsafe_source_query(error: SqlError) -> Finding:
    return Finding("RV010", "error", error)


def render(error: RivcError) -> Finding:
    return Finding("RV011", "error", error)


def not_run(error: ProjectError) -> Finding:
    return Finding("RV012", "warning", error)


def breaking_change(error: RivcError) -> Finding:
    return Finding("RV013", "error", error)


def source_query(error: SqlError) -> Finding:
    """A source query that does not parse (RV001) or is not one read-only SELECT (RV010)."""
    return unsafe_source_query(error) if isinstance(error, ShapeError) else syntax(error)


def from_error(error: RivcError) -> Finding:
    """The finding for a failure while rendering or parsing one file."""
    if isinstance(error, GraphError):
        return unknown_reference(error)
    if isinstance(error, SqlError):
        return syntax(error)
    return render(error)
