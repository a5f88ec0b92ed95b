"""Read YAML files keeping each value's line, and expand ${VAR} from the environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ProjectError, SourceLocation
from .locate import read_project_file

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader

YamlPath = tuple[str | int, ...]
_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Values holding SQL keep ${name}: there it is a parameter, bound at compile time (rendering/params.py).
SQL_KEYS = frozenset({"query", "condition", "expression", "sql"})


@dataclass
class YamlDoc:
    """A parsed YAML file: its data and the position of every key and item."""

    path: Path  # relative to the project root
    data: Any
    marks: dict[YamlPath, tuple[int, int]] = field(default_factory=dict)
    env_used: dict[str, str | None] = field(default_factory=dict)

    def location(self, path: YamlPath) -> SourceLocation:
        """The closest known position of `path` (or of its nearest parent)."""
        while path and path not in self.marks:
            path = path[:-1]
        line, col = self.marks.get(path, (1, 1))
        return SourceLocation(self.path, line, col)


class AnyEnv(dict[str, str]):
    """An environment in which every variable is set (to ""): a file whose ${VAR} values do not
    matter parses whatever the environment holds."""

    def get(self, key: str, default: object = None) -> str:
        return ""


def load_yaml(root: Path, rel: Path, env: Mapping[str, str] | None = None) -> YamlDoc:
    """Parse `root/rel`; raise ProjectError with file:line on bad YAML or a missing ${VAR}."""
    text = read_project_file(root, rel)
    return parse_yaml(text, rel, os.environ if env is None else env)


def parse_yaml(text: str, rel: Path, env: Mapping[str, str]) -> YamlDoc:
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_size(node, rel)  # before aliases are expanded into Python values
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        loc = SourceLocation(rel, mark.line + 1, mark.column + 1) if mark else SourceLocation(rel)
        raise ProjectError(f"invalid YAML: {exc.problem}", loc) from exc
    except yaml.YAMLError as exc:
        raise ProjectError(f"invalid YAML: {exc}", SourceLocation(rel)) from exc
    if node is not None:
        _check_size(node, rel)
    doc = YamlDoc(rel, data)
    if node is not None:
        _collect_marks(node, (), doc.marks)
    doc.data = _expand(data, (), doc, env)
    return doc


MAX_YAML_VALUES = 1_000_000  # values of one YAML document, with aliases expanded
MAX_YAML_BYTES = 16 << 20  # the text of its scalars, with aliases expanded


def _check_size(root: yaml.Node, rel: Path) -> None:
    """Refuse a document whose aliases expand to more than MAX_YAML_VALUES values or more than
    MAX_YAML_BYTES of text (an alias bomb grows exponentially; a few aliases of a long string
    grow by bytes): counted over the node graph, which shares aliased nodes, so nothing is
    expanded to count it."""
    sizes: dict[int, tuple[int, int]] = {}  # node -> (values, bytes) it expands to
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if done:
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            values = 1 + sum(sizes[id(c)][0] for c in children)
            size = own + sum(sizes[id(c)][1] for c in children)
            sizes[id(node)] = (values, size)
            if values > MAX_YAML_VALUES or size > MAX_YAML_BYTES:
                mark = node.start_mark
                what = (
                    f"more than {MAX_YAML_VALUES:,} values"
                    if values > MAX_YAML_VALUES
                    else f"more than {MAX_YAML_BYTES >> 20} MiB of text"
                )
                raise ProjectError(
                    f"YAML aliases expand to {what}",
                    SourceLocation(rel, mark.line + 1, mark.column + 1),
                )
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def _collect_marks(node: yaml.Node, path: YamlPath, marks: dict[YamlPath, tuple[int, int]]) -> None:
    marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            marks[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _collect_marks(value_node, (*path, key), marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect_marks(item, (*path, i), marks)


def _expand(value: Any, path: YamlPath, doc: YamlDoc, env: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            k: (v if str(k) in SQL_KEYS else _expand(v, (*path, str(k)), doc, env))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand(v, (*path, i), doc, env) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:
        return expand_env(value, env, doc, path)
    return value


def expand_env(text: str, env: Mapping[str, str], doc: YamlDoc, path: YamlPath) -> str:
    """Replace ${VAR} and ${VAR:-default}; `$${VAR}` stays literally `${VAR}`."""

    def sub(m: re.Match[str]) -> str:
        escaped, name, default = m.group(1), m.group(2), m.group(3)
        if escaped:
            return m.group(0)[1:]
        value = env.get(name)
        doc.env_used[name] = value
        if value is not None:
            return value
        if default is not None:
            return default
        raise ProjectError(
            f"environment variable {name} is not set (use ${{{name}:-default}} for a default)",
            doc.location(path),
        )

    return _ENV.sub(sub, text)
