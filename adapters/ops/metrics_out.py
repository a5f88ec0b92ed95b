"""A run's node results for a monitoring system (docs/running.md, "Metrics for Prometheus"):
Prometheus's text format, written to a file node_exporter's textfile collector reads, and/or
pushed to a Pushgateway, after every `rivc run`, `build` and `test` when the profile asks.

Never fails a run: its tables are committed by then; a push that fails is a warning."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rivc.compiler.specs import MetricsSpec

OK = ("success", "pass", "warn")

# name, help, the NodeResult field it reports (None: the node's success)
NODE_METRICS = (
    ("rivc_node_success", "1 when the node succeeded (or passed) in the last run, else 0", None),
    ("rivc_node_rows", "rows the node wrote (a sink) or made (a model, a source)", "rows"),
    ("rivc_node_bytes", "bytes the node wrote", "bytes"),
    ("rivc_node_files", "data files the node wrote", "files"),
    ("rivc_node_duration_seconds", "the node's wall time", "duration_s"),
    ("rivc_node_commits", "table commits a sink made", "commits"),
    ("rivc_node_commit_seconds", "time a sink spent committing", "commit_ms"),
    ("rivc_node_retries", "write attempts retried", "retries"),
    ("rivc_node_log_behind_bytes", "bytes of change log past what the table holds", "log_behind"),
)


def prometheus_text(project: str, report: Any) -> str:
    """The last run of `project` in Prometheus's text exposition format."""
    base = {"project": project}
    lines: list[str] = []

    def family(name: str, help_: str, samples: Sequence[tuple[dict[str, str], float]]) -> None:
        if not samples:
            return
        lines.extend((f"# HELP {name} {help_}", f"# TYPE {name} gauge"))
        lines.extend(f"{name}{_labels(labels)} {_number(v)}" for labels, v in samples)

    family("rivc_run_success", "1 when the last run succeeded", [(base, 0 if report.failed else 1)])
    family("rivc_run_duration_seconds", "the last run's wall time", [(base, report.elapsed_s)])
    family("rivc_run_nodes", "nodes the last run ran", [(base, len(report.results))])
    for name, help_, attr in NODE_METRICS:
        samples: list[tuple[dict[str, str], float]] = []
        for r in report.results:
            labels = {**base, "node": r.node, "kind": r.kind}
            if attr is None:
                samples.append((labels, 1 if r.status in OK else 0))
                continue
            value = getattr(r, attr)
            if value is not None:
                samples.append((labels, value / 1000 if attr == "commit_ms" else value))
        family(name, help_, samples)
    return "\n".join(lines) + "\n"


def export(
    settings: MetricsSpec, root: Path, project: str, report: Any, warn: Callable[[str], None]
) -> None:
    """Write and/or push the run's metrics, as the profile's `metrics:` asks."""
    if not settings.textfile and not settings.pushgateway:
        return
    text = prometheus_text(project, report)
    if settings.textfile:
        path = root / settings.textfile
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # the collector never reads half a file
    if settings.pushgateway:
        import urllib.request
        from urllib.parse import quote

        url = f"{settings.pushgateway.rstrip('/')}/metrics/job/rivc/project/{quote(project, '')}"
        request = urllib.request.Request(url, text.encode(), method="PUT")
        request.add_header("Content-Type", "text/plain; version=0.0.4")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                answer.read()
        except OSError as e:  # the run's tables are committed: say so, and go on
            warn(f"metrics: the push to {settings.pushgateway} failed ({e}); the run is unaffected")


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))
