"""target/run_results.json in dbt's format (run results v6, as dbt-core 1.11 writes them), and
rivc's reading of it (`rivc retry`, `result:` selectors, `--defer`).

Each result is dbt's (`unique_id` as in target/manifest.json, `status`, `execution_time`,
`failures` of a test, `relation_name`); what rivc measured of the node (rows, files, bytes,
peak RSS, schema change, commits) is its `adapter_response.rivc`, and the run's own facts
(run id, status, warehouse, the options `rivc retry` runs again with) are under `args.rivc`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .dbt_manifest import dbt_metadata

RESULTS_FILE = "run_results.json"  # under target/
TESTS = ("pass", "fail", "warn")  # a data test's statuses: its `failures` are its rows


def dumps(
    *,
    project: str,
    ids: Mapping[str, str],
    relations: Mapping[str, str],
    command: str,
    run: Mapping[str, Any],
    options: Mapping[str, Any],
    results: list[dict[str, Any]],
    elapsed_s: float,
) -> str:
    """The run's results in dbt's format. `ids`: node id -> dbt's unique_id; `relations`: node
    id -> its relation name; `run`: the run's own facts (run_id, status, started_at,
    warehouse); `results`: rivc's node results (adapters/state/base.py: NodeResult)."""
    out = {
        "metadata": dbt_metadata("run-results/v6", str(run["run_id"])),
        "results": [_result(project, ids, relations, r) for r in results],
        "elapsed_time": round(elapsed_s, 3),
        "args": {"which": command, **options, "rivc": {**run, "command": command}},
    }
    return json.dumps(out, indent=2) + "\n"


def _result(
    project: str, ids: Mapping[str, str], relations: Mapping[str, str], r: dict[str, Any]
) -> dict[str, Any]:
    nid = str(r["node"])
    return {
        "status": r["status"],
        "timing": [],
        "thread_id": "main",
        "execution_time": float(r.get("duration_s") or 0.0),
        "adapter_response": {"_message": r["status"].upper(), "rivc": r}
        | ({} if r.get("rows") is None else {"rows_affected": r["rows"]}),
        "message": r.get("error") or r.get("message") or None,
        "failures": r.get("rows") if r.get("kind") == "test" and r["status"] in TESTS else None,
        "unique_id": ids.get(nid) or _operation(project, nid),
        "compiled": None,
        "compiled_code": None,
        "relation_name": relations.get(nid),
        "batch_results": r.get("batches"),
    }


def _operation(project: str, nid: str) -> str:
    """A hook's id as dbt gives it (`operation:on-run-start.0` -> operation.p.p-on-run-start-0)."""
    kind, _, name = nid.partition(":")
    return f"{kind}.{project}.{project}-{name.replace('.', '-')}"


def read(path: Path) -> dict[str, Any]:
    """The last run as rivc reads it back: its `command`, `status`, `warehouse`, `args` (the
    options it ran with) and `results` (rivc's node results, each with its node id and
    status). Raises OSError when there is none, ValueError when it is not rivc's."""
    data = json.loads(path.read_text(encoding="utf-8"))
    args = data.get("args") if isinstance(data, dict) else None
    if not isinstance(args, dict) or not isinstance(args.get("rivc"), dict):
        raise ValueError("not written by this rivc (no args.rivc): run the command again")
    own = args["rivc"]
    return {
        **own,
        "args": {k: v for k, v in args.items() if k not in ("which", "rivc")},
        "results": [r["adapter_response"]["rivc"] for r in data["results"]],
    }
