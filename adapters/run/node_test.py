"""Test nodes: a query whose rows are failures."""

from __future__ import annotations

import json

from rivc.compiler.manifest import ManifestNode
from rivc.compiler.specs import failed

from ..state import NodeResult
from .runtime import Runtime

SAMPLE_ROWS = 5  # failing rows a test prints


def run_test(rt: Runtime, nid: str, node: ManifestNode) -> NodeResult:
    """Pass, warn or fail by the failing rows' count, as dbt decides: an `error` test fails when
    the count meets `error_if`, else warns when it meets `warn_if`; a `warn` test only warns."""
    df = rt.spark.sql(rt.plan.sql(nid))
    failures = df.count()
    error_if = str(node.config.get("error_if", "!= 0"))
    warn_if = str(node.config.get("warn_if", "!= 0"))
    if node.severity == "error" and failed(failures, error_if):
        status = "fail"
    elif failed(failures, warn_if):
        status = "warn"
    else:
        return NodeResult(nid, "test", "pass", rows=failures)
    sample = [r.asDict() for r in df.limit(SAMPLE_ROWS).collect()]
    shown = "; ".join(json.dumps(r, default=str) for r in sample)
    return NodeResult(
        nid,
        "test",
        status,
        rows=failures,
        error=f"{failures} failing row{'s' if failures != 1 else ''}: {shown}",
    )
