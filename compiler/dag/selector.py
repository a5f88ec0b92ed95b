"""dbt's selection grammar: `orders+`, `+orders`, `2+orders`, `@orders`, `tag:x`, unions,
intersections, and `result:error` over the last run's results."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import SelectionError, did_you_mean
from ..loading.specs import NodeId
from .graph import Node, ProjectGraph
from .statediff import CHANGES

_ATOM = re.compile(
    r"^(?P<at>@)?(?:(?P<up_depth>\d*)(?P<up>\+))?(?:(?P<method>[a-z_]+(?:\.[a-z_]+)?):)?"
    r"(?P<value>[^+@]+?)(?:(?P<down>\+)(?P<down_depth>\d*))?$"
)
METHODS = ("tag", "path", "source", "sink", "config", "resource_type", "result", "state")
_EMPTY_OK = ("result", "state")  # may match nothing: nothing failed, nothing changed
STATES = ("new", "modified", *(f"modified.{c}" for c in CHANGES))
RESULTS = "target/run_results.json"  # where `result:` reads the last run's statuses


@dataclass(frozen=True, slots=True)
class Atom:
    method: str  # "" for a plain name
    value: str
    up: int | None = None  # None: no parents; -1: all
    down: int | None = None
    at: bool = False


def parse_atom(text: str) -> Atom:
    m = _ATOM.match(text)
    if not m:
        raise SelectionError(f"invalid selector {text!r}")
    method = m["method"] or ""
    if method and method.split(".")[0] not in METHODS:
        raise SelectionError(
            f"unknown selector method {method!r} in {text!r}{did_you_mean(method, METHODS)}"
        )
    up = (int(m["up_depth"]) if m["up_depth"] else -1) if m["up"] else None
    down = (int(m["down_depth"]) if m["down_depth"] else -1) if m["down"] else None
    if m["at"] and (up is not None or down is not None):
        raise SelectionError(f"invalid selector {text!r}: @ does not combine with +")
    return Atom(method, m["value"], up, down, bool(m["at"]))


def select(
    graph: ProjectGraph,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    results: Mapping[NodeId, str] | None = None,
    changed: Mapping[NodeId, set[str]] | None = None,
) -> set[NodeId]:
    """Node ids matching the selection (everything when `include` is empty), minus `exclude`.
    `results` is each node's status in the last run, for `result:<status>` (None: there was
    no run); `changed` what changed in each node since the `--state` compile, for
    `state:new|modified[.change]` (None: no --state).

    Tests whose every parent is selected come along, as dbt's indirect selection does.
    """
    pick = _Picker(graph, results, changed)
    inc = [t for s in include for t in s.split()]
    chosen = set(graph.nodes) if not inc else set().union(*(pick.intersect(t) for t in inc))
    exc = [t for s in exclude for t in s.split()]
    if exc:
        chosen -= set().union(*(pick.intersect(t) for t in exc))
    for node in graph.nodes.values():
        tested = (  # a unit test reads no node: it goes with the model it tests
            [f"model:{node.config['model']}"]
            if node.kind == "test" and node.config.get("test") == "unit"
            else node.depends_on
        )
        if (
            node.kind == "test"
            and node.id not in chosen
            and tested
            and all(d in chosen for d in tested)
            and not any(node.id in pick.intersect(t) for t in exc)
        ):
            chosen.add(node.id)
    return chosen


@dataclass(frozen=True)
class _Picker:
    graph: ProjectGraph
    results: Mapping[NodeId, str] | None
    changed: Mapping[NodeId, set[str]] | None

    def intersect(self, token: str) -> set[NodeId]:
        parts = [p for p in token.split(",") if p]
        if not parts:
            raise SelectionError(f"invalid selector {token!r}")
        result = _atom_nodes(self, parse_atom(parts[0]))
        for p in parts[1:]:
            result &= _atom_nodes(self, parse_atom(p))
        return result


def _atom_nodes(pick: _Picker, atom: Atom) -> set[NodeId]:
    graph = pick.graph
    base = _match(pick, atom)
    out = set(base)
    for nid in base:
        if atom.at:
            down = graph.downstream(nid)
            out |= down
            for d in (nid, *down):
                out |= graph.upstream(d)
            continue
        if atom.up is not None:
            out |= graph.upstream(nid, None if atom.up < 0 else atom.up)
        if atom.down is not None:
            out |= graph.downstream(nid, None if atom.down < 0 else atom.down)
    return out


def _match(pick: _Picker, atom: Atom) -> set[NodeId]:
    graph, results = pick.graph, pick.results
    nodes = graph.nodes.values()
    value = atom.value
    method, _, key = atom.method.partition(".")

    def glob(name: str) -> bool:
        return fnmatch.fnmatchcase(name, value)

    found: set[NodeId]
    candidates: list[str]
    if method == "":  # a versioned model's name selects its versions, as in dbt
        found = {
            n.id
            for n in nodes
            if n.kind != "source" and (glob(n.name) or (n.versioned and glob(n.versioned)))
        }
        candidates = [n.name for n in nodes if n.kind != "source"]
    elif method == "tag":
        found = {n.id for n in nodes if any(glob(t) for t in n.tags)}
        candidates = sorted({t for n in nodes for t in n.tags})
    elif method == "path":
        want = PurePosixPath(value.rstrip("/"))
        found = {
            n.id
            for n in nodes
            if n.kind != "source"
            and (
                PurePosixPath(n.path.as_posix()) == want
                or want in PurePosixPath(n.path.as_posix()).parents
            )
        }
        candidates = sorted({p.as_posix() for n in nodes for p in (n.path, *n.path.parents[:-1])})
    elif method == "source":
        src, _, table = value.partition(".")
        found = {
            n.id
            for n in nodes
            if n.kind == "source"
            and fnmatch.fnmatchcase(n.name.split(".")[0], src)
            and (not table or fnmatch.fnmatchcase(n.name.split(".")[1], table))
        }
        candidates = sorted(
            {n.name for n in nodes if n.kind == "source"}
            | {n.name.split(".")[0] for n in nodes if n.kind == "source"}
        )
    elif method == "resource_type":  # dbt's: model, seed, source, sink, test
        found = {n.id for n in nodes if glob(n.kind)}
        candidates = sorted({n.kind for n in nodes})
    elif method == "result":  # dbt's: the status each node had in the last run
        if results is None:
            raise SelectionError(
                f"selector 'result:{value}' needs the last run's results: {RESULTS} is "
                "missing: run first"
            )
        found = {n for n, status in results.items() if n in graph.nodes and glob(status)}
        candidates = sorted(set(results.values()))
    elif method == "state":  # dbt's: changed since the --state compile
        if pick.changed is None:
            raise SelectionError(
                f"selector 'state:{value}' needs --state DIR (the target/ of an earlier compile)"
            )
        if value not in STATES:
            raise SelectionError(
                f"unknown state selector 'state:{value}'{did_you_mean(value, STATES)}"
            )
        kind = value.partition(".")[2]
        found = {
            n
            for n, why in pick.changed.items()
            if value == "modified" or (kind in why if kind else "new" in why)
        }
        candidates = list(STATES)
    elif method == "sink":
        found = {n.id for n in nodes if n.kind == "sink" and glob(n.name)}
        candidates = [n.name for n in nodes if n.kind == "sink"]
    else:  # config.<key>
        found = {n.id for n in nodes if _config_matches(n, key, value)}
        candidates = sorted({str(n.config.get(key)) for n in nodes if key in n.config})
    if not found and method not in _EMPTY_OK:
        shown = f"{atom.method}:{value}" if atom.method else value
        raise SelectionError(f"selector {shown!r} matches nothing{did_you_mean(value, candidates)}")
    return found


def _config_matches(node: Node, key: str, value: str) -> bool:
    if key not in node.config:
        return False
    have = node.config[key]
    items = have if isinstance(have, list | tuple) else [have]
    return any(str(i).lower() == value.lower() for i in items)
