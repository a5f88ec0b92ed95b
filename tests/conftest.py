from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

BASE_FILES = {
    "rivc_project.yml": "name: t\nparams: {region: eu, limit_n: 10}\nvars: {v: 1}\n",
    "sources/demo.yml": """
        sources:
          - name: demo
            connector: datagen
            tables:
              - name: orders
                config: {pattern: orders, max_events: 10, seed: 1}
    """,
    "models/stg.sql": "select order_id, customer_id, total from {{ source('demo', 'orders') }}\n",
}

MakeProject = Callable[..., Path]


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    """make_project({path: text}) writes a project (BASE_FILES unless base=False) into tmp_path."""

    def make(files: dict[str, str], base: bool = True) -> Path:
        root = tmp_path / "proj"
        merged = {**(BASE_FILES if base else {}), **files}
        for rel, text in merged.items():
            if text is None:
                continue
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"))
        return root

    return make
