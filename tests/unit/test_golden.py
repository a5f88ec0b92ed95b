"""Compiled output of sample_project, compared file by file; RIVC_UPDATE_GOLDEN=1 rewrites it."""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

from rivc.compiler import CompileOptions
from rivc.compiler.driver import analyze
from rivc.compiler.emit.codegen import artifacts
from rivc.compiler.loading.project import load_project

REPO = Path(__file__).resolve().parents[2]
EXPECTED = REPO / "tests" / "golden" / "sample_project"


def test_sample_project_golden(tmp_path):
    root = tmp_path / "sample"
    shutil.copytree(
        REPO / "sample_project",
        root,
        ignore=shutil.ignore_patterns("target", ".rivc", "output", "warehouse"),
    )
    compiled = analyze(load_project(root, env={}), CompileOptions(), env={})
    assert not compiled.errors
    files = artifacts(compiled)
    # the manifests are one line: kept indented here, so that a change reads as a diff; dbt's
    # says when and by which invocation it was made
    files["rivc_manifest.json"] = json.dumps(json.loads(files["rivc_manifest.json"]), indent=2)
    dbt = json.loads(files["manifest.json"])
    assert dbt["metadata"].pop("generated_at") and dbt["metadata"].pop("invocation_id")
    files["manifest.json"] = json.dumps(dbt, indent=2)
    if os.environ.get("RIVC_UPDATE_GOLDEN"):
        shutil.rmtree(EXPECTED, ignore_errors=True)
        for rel, text in files.items():
            (EXPECTED / rel).parent.mkdir(parents=True, exist_ok=True)
            (EXPECTED / rel).write_text(text)
    expected = {
        p.relative_to(EXPECTED).as_posix(): p.read_text()
        for p in EXPECTED.rglob("*")
        if p.is_file()
    }
    assert sorted(files) == sorted(expected)
    for rel, text in files.items():
        assert text == expected[rel], rel
        if rel.endswith(".py"):
            ast.parse(text, rel)  # generated jobs are valid Python
