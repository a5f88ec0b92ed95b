"""A run's lineage as OpenLineage events (docs/running.md, "Lineage for OpenLineage"): after
every `rivc run`, `build` and `test` when the profile asks, a START and a COMPLETE (or FAIL)
event per source, model, seed, snapshot and sink that ran, each a child of the rivc run, with
its input and output datasets, their schemas, the rows and bytes written, and the column
lineage rivc computed at compile time (OpenLineage's columnLineage facet). Sent to an HTTP
endpoint (Marquez's `/api/v1/lineage`) and/or appended to a file as JSON lines.

Never fails a run: its tables are committed by then; a send that fails is a warning."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rivc.compiler.emit.manifest import Manifest, ManifestNode
from rivc.compiler.loading.specs import OpenLineageSpec
from rivc.compiler.registry import connector
from rivc.compiler.version import VERSION

PRODUCER = f"https://github.com/rivc/rivc/tree/{VERSION}"
SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
FACETS = "https://openlineage.io/spec/facets"
KINDS = ("source", "model", "seed", "snapshot", "sink")
# how rivc's lineage names a column's origin -> OpenLineage's transformation
HOW = {
    "copied": ("DIRECT", "IDENTITY"),
    "transformed": ("DIRECT", "TRANSFORMATION"),
    "aggregated": ("DIRECT", "AGGREGATION"),
}
FAILED = ("error", "fail")


def _facet(name: str, version: str, **fields: Any) -> dict[str, Any]:
    return {"_producer": PRODUCER, "_schemaURL": f"{FACETS}/{version}/{name}.json", **fields}


def events(manifest: Manifest, report: Any) -> Iterator[dict[str, Any]]:
    """START and COMPLETE/FAIL of each node the run ran, in the order they finished."""
    namespace = f"rivc://{manifest.project}"
    parent_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/run/{report.run_id}"))
    parent = _facet(
        "ParentRunFacet",
        "1-1-0",
        run={"runId": parent_id},
        job={"namespace": namespace, "name": f"{manifest.project}.{report.command}"},
    )
    ended = datetime.fromisoformat(report.started_at) + timedelta(seconds=report.elapsed_s)
    for result in report.results:
        node = manifest.nodes.get(result.node)
        if node is None or node.kind not in KINDS or result.status == "skipped":
            continue
        run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/run/{report.run_id}/{node.id}"))
        job = {"namespace": namespace, "name": node.id}
        inputs = [
            _dataset(namespace, manifest.nodes[d]) for d in node.depends_on if d in manifest.nodes
        ]
        output = _output(namespace, manifest, node, result)
        start = ended - timedelta(seconds=result.duration_s)
        base = {"producer": PRODUCER, "schemaURL": SPEC, "job": job, "inputs": inputs}
        yield {
            **base,
            "eventType": "START",
            "eventTime": _time(start),
            "run": {"runId": run_id, "facets": {"parent": parent}},
            "outputs": [_dataset(namespace, node, output["name"], output["namespace"])],
        }
        facets: dict[str, Any] = {"parent": parent}
        if result.status in FAILED:
            message = result.error or result.message or result.status
            facets["errorMessage"] = _facet(
                "ErrorMessageRunFacet", "1-0-1", message=message, programmingLanguage="python"
            )
        yield {
            **base,
            "eventType": "FAIL" if result.status in FAILED else "COMPLETE",
            "eventTime": _time(ended),
            "run": {"runId": run_id, "facets": facets},
            "outputs": [output],
        }


def _time(at: datetime) -> str:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


def _dataset(
    namespace: str, node: ManifestNode, name: str | None = None, where: str | None = None
) -> dict[str, Any]:
    """A node as a dataset: its id in the project's namespace, and its schema when known."""
    out: dict[str, Any] = {"namespace": where or namespace, "name": name or node.id}
    if node.columns:
        fields = [{"name": c, "type": t or "unknown"} for c, t in node.columns.items()]
        out["facets"] = {"schema": _facet("SchemaDatasetFacet", "1-1-1", fields=fields)}
    return out


def _output(namespace: str, manifest: Manifest, node: ManifestNode, result: Any) -> dict[str, Any]:
    """What the node wrote: a sink's target (its connector's location), or the node's table;
    with the column lineage and the rows and bytes written."""
    if node.kind == "sink":
        where = node.sink.connector
        info = connector("sink", where)
        name = (info.dataset(node.sink.config) if info else None) or node.id
        origin = node.sink.from_
        source = manifest.nodes.get(origin if ":" in origin else f"model:{origin}")
        columns = source.columns if source is not None else None
        lineage = {c: [(source.id, c, "copied")] for c in columns} if source and columns else None
        out = _dataset(namespace, source or node, name, where)
    else:
        lineage, out = node.lineage, _dataset(namespace, node)
    facets = out.setdefault("facets", {})
    if lineage:
        fields = {
            column: {
                "inputFields": [
                    {
                        "namespace": namespace,
                        "name": origin,
                        "field": field,
                        "transformations": [{"type": HOW[how][0], "subtype": HOW[how][1]}],
                    }
                    for origin, field, how in origins
                    if how in HOW
                ]
            }
            for column, origins in lineage.items()
        }
        filtered = [
            {
                "namespace": namespace,
                "name": origin,
                "field": field,
                "transformations": [{"type": "INDIRECT", "subtype": "FILTER"}],
            }
            for origin, field in node.filters
        ]
        facets["columnLineage"] = _facet(
            "ColumnLineageDatasetFacet", "1-2-0", fields=fields, dataset=filtered
        )
    if result.rows is not None:
        stats = {"rowCount": result.rows, **({"size": result.bytes} if result.bytes else {})}
        out["outputFacets"] = {
            "outputStatistics": _facet("OutputStatisticsOutputDatasetFacet", "1-0-2", **stats)
        }
    if not facets:
        del out["facets"]
    return out


def export(
    settings: OpenLineageSpec,
    root: Path,
    manifest: Manifest,
    report: Any,
    warn: Callable[[str], None],
) -> None:
    """Send and/or append the run's events, as the profile's `openlineage:` asks."""
    if not settings.url and not settings.file:
        return
    sent = list(events(manifest, report))
    if settings.file:
        path = root / settings.file
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in sent)
    if settings.url:
        import urllib.request

        url = f"{settings.url.rstrip('/')}/{settings.endpoint.lstrip('/')}"
        try:
            for event in sent:
                request = urllib.request.Request(url, json.dumps(event).encode(), method="POST")
                request.add_header("Content-Type", "application/json")
                with urllib.request.urlopen(request, timeout=10):
                    pass
        except OSError as exc:  # URLError, a refused connection, a timeout
            warn(f"openlineage: sending to {url} failed ({exc}); the run's tables are committed")
