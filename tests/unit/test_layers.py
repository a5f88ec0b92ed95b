"""The import graph of rivc: no circles, every module on a level, and no import upward
(docs/architecture.md). Every import counts, including those inside functions and
TYPE_CHECKING blocks.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The levels, lowest first: a module imports modules of its own level or lower ones only.
LEVELS = (
    ("rivc.compiler",),  # project -> target/: no adapters, no Spark, no database driver
    ("rivc.adapters.util",),  # leaves: the filesystem layer, fault points, error text
    ("rivc.adapters.state",),  # the state store (a record) and the run lock
    ("rivc.adapters.plane",),  # what connectors get and give: contexts, Sink, task I/O
    ("rivc.adapters.lake",),  # the Delta table engine: read, write, commit, merge, history
    ("rivc.adapters.connectors",),  # each source and sink
    ("rivc.adapters.ops",),  # services of commands: target/, preflight, console report
    (  # the runtime, a room each: orchestration, models, ingestion, delivery, Spark
        "rivc.adapters.run",
        "rivc.adapters.models",
        "rivc.adapters.ingest",
        "rivc.adapters.delivery",
        "rivc.adapters.spark",
    ),
    ("rivc.adapters.cli", "rivc.adapters"),  # the commands
)


# A connector package (rivc.adapters.connectors.<name>) spans levels by module: its spec is read
# by compile, its change log (and the log's part of a run's shared read) drives a landing table
# as the ingestion room does.
CONNECTOR_PARTS = {
    "spec": "rivc.compiler",
    "log": "rivc.adapters.ingest",
    "sharedread": "rivc.adapters.ingest",
}


def level(module: str) -> int | None:
    """The level of a module: the longest prefix that names one (a connector package's spec
    and change log: the levels CONNECTOR_PARTS names)."""
    parts = module.split(".")
    if module.startswith("rivc.adapters.connectors.") and len(parts) == 5:
        if parts[-1] in CONNECTOR_PARTS:
            module = CONNECTOR_PARTS[parts[-1]]
    found = [
        (len(prefix), i)
        for i, prefixes in enumerate(LEVELS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(found)[1] if found else None


def modules() -> dict[str, Path]:
    out = {}
    for top in ("compiler", "adapters"):
        for path in (REPO / top).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(("rivc", *parts)).removesuffix(".__init__")
            out[name] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                candidates = [target, *(f"{target}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            found |= {c for c in candidates if c in mods and c != name}
        edges[name] = found
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert cycles(imports(modules())) == []


def test_every_module_has_a_level():
    assert [m for m in modules() if level(m) is None] == []


def test_no_upward_imports():
    upward = []
    for a, targets in imports(modules()).items():
        for b in targets:
            la, lb = level(a), level(b)
            if la is not None and lb is not None and lb > la:
                upward.append((a, b))
    assert sorted(upward) == []


def test_the_checker_sees_a_circle_and_an_upward_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    mods = modules()
    assert "rivc.adapters.run.runtime" in imports(mods)["rivc.adapters.run.scheduler"]
    assert "rivc.compiler.registry" in imports(mods)["rivc.adapters.plane.registry"]


def test_no_module_over_900_lines():
    """A smoke alarm: a module past this is likely two concepts; cut it by concept, never to
    meet the count."""
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > 900}
    assert long == {}


def test_no_module_holds_two_concepts_by_its_length():
    """A module over 900 lines is the alarm that it holds two concepts: cut it by concept."""
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > 900}
    assert long == {}
