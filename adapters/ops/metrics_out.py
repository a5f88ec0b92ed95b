"""A run's node results for a monitoring system (docs/running.md, "Metrics for Prometheus"):
Prometheus's text format, written to a file node_exporter's textfile collector reads, and/or
pushed to a Pushgateway, after every `rivc run`, `build` and `test` when the profile asks.

Never fails a run: its tables are committed by then; a push that fails is a warning."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rivc.compiler.loading.specs import MetricsSpec

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


# name, help, the StateStore.batch_totals field it reports
LIVE_METRICS = (
    ("rivc_sink_batches_total", "batches the sink took in this run, replays included", "batches"),
    ("rivc_sink_replayed_total", "replayed batches the target already held (skipped)", "replayed"),
    ("rivc_sink_rows_total", "rows the sink wrote in this run", "rows"),
    ("rivc_sink_bytes_total", "bytes the sink wrote in this run", "bytes"),
    ("rivc_sink_files_total", "data files the sink wrote in this run", "files"),
    ("rivc_sink_commits_total", "commits the sink made in this run", "commits"),
    ("rivc_sink_commit_seconds_total", "time the sink spent committing in this run", "commit_ms"),
    ("rivc_sink_retries_total", "write attempts the sink retried in this run", "retries"),
    (
        "rivc_sink_restarts_total",
        "times the sink's stream failed and was started again",
        "restarts",
    ),
)


def live_text(
    project: str,
    run_id: str,
    totals: dict[str, dict[str, int]],
    lags: dict[str, int | None],
) -> str:
    """The running run's sinks (node id -> StateStore.batch_totals) and its stream sources'
    messages waiting for their sink (node id -> count, None when unknown), in Prometheus's
    format."""
    lines = [
        "# HELP rivc_run_info the run being served",
        "# TYPE rivc_run_info gauge",
        f"rivc_run_info{_labels({'project': project, 'run_id': run_id})} 1",
    ]
    for name, help_, key in LIVE_METRICS:
        lines.extend((f"# HELP {name} {help_}", f"# TYPE {name} counter"))
        for node, t in sorted(totals.items()):
            value = t[key] / 1000 if key == "commit_ms" else t[key]
            lines.append(f"{name}{_labels({'project': project, 'node': node})} {_number(value)}")
    known = {n: v for n, v in sorted(lags.items()) if v is not None}
    if known:
        name = "rivc_source_lag_messages"
        lines.append(f"# HELP {name} messages the broker holds that the source's sink has not")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(
            f"{name}{_labels({'project': project, 'node': n})} {v}" for n, v in known.items()
        )
    return "\n".join(lines) + "\n"


def serve(settings: MetricsSpec, text: Callable[[], str], warn: Callable[[str], None]) -> Any:
    """A thread answering GET /metrics with `text()` on the profile's port, until its
    `shutdown()`; None when none is asked for (or the port is taken: a warning)."""
    if settings.port is None:
        return None
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    try:
        server = ThreadingHTTPServer((settings.listen, settings.port), Handler)
    except OSError as e:
        warn(f"metrics: cannot listen on {settings.listen}:{settings.port} ({e}); no endpoint")
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="rivc-metrics", daemon=True).start()
    return server


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))
