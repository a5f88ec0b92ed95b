"""`rivc init`: write a project from templates/init/<name>/, never overwriting a file."""

from __future__ import annotations

import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

from rivc.compiler.errors import ProjectError, did_you_mean

# Scaffold templates hold Jinja models themselves, so their own placeholders use [[ ]].
_ENV = jinja2.Environment(
    variable_start_string="[[",
    variable_end_string="]]",
    block_start_string="[%",
    block_end_string="%]",
    comment_start_string="[#",
    comment_end_string="#]",
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
    autoescape=False,
)


def _walk(node: Traversable, prefix: Path) -> list[tuple[Path, Traversable]]:
    out = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            out += _walk(child, prefix / child.name)
        elif child.name.endswith(".j2"):
            name = child.name.removesuffix(".j2")
            out.append((prefix / (f".{name[4:]}" if name.startswith("dot_") else name), child))
    return out


def project_name(directory: Path) -> str:
    name = re.sub(r"\W+", "_", directory.resolve().name).strip("_").lower()
    return name if name and not name[0].isdigit() else f"project_{name}"


def scaffold(directory: Path, template: str = "default") -> tuple[list[Path], list[Path]]:
    """Write the scaffold into `directory`; return (written, kept because they exist)."""
    root = files("rivc.templates").joinpath("init")
    names = [c.name for c in root.iterdir() if c.is_dir()]
    if template not in names:
        raise ProjectError(
            f"unknown template {template!r}{did_you_mean(template, names)}"
            f" (available: {', '.join(sorted(names))})"
        )
    context = {"project_name": project_name(directory)}
    written, skipped = [], []
    for rel, source in _walk(root.joinpath(template), Path()):
        dest = directory / rel
        if dest.exists():
            skipped.append(dest)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = _ENV.from_string(source.read_text(encoding="utf-8")).render(context)
        with open(dest, "x", encoding="utf-8") as fh:  # "x": never replace a file made meanwhile
            fh.write(text)
        written.append(dest)
    return written, skipped
