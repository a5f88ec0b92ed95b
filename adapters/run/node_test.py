"""Test nodes: a query whose rows are failures."""

from __future__ import annotations

import json

from rivc.compiler.manifest import ManifestNode

from ..state import NodeResult
from .runtime import Runtime

SAMPLE_ROWS = 5  # failing rows a test prints


def run_test(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    df = rt.spark.sql(rt.plan.sql(nid))
    failures = df.count()
    if not failures:
        return NodeResult(nid, "test", "pass", rows=0)
    sample = [r.asDict() for r in df.limit(SAMPLE_ROWS).collect()]
    shown = "; ".join(json.dumps(r, default=str) for r in sample)
    severity = node.severity
    return NodeResult(
        nid,
        "test",
        "fail" if severity == "error" else "warn",
        rows=failures,
        error=f"{failures} failing row{'s' if failures != 1 else ''}: {shown}",
    )
