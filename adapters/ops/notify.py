"""A run's failures posted to a chat webhook (docs/running.md, "Notifications"): after every
`rivc run`, `build`, `test`, `seed` and `snapshot` when the profile's `notify:` asks, one message
per run in Slack's incoming-webhook format (`{"text": ...}`), naming each node that failed or
whose columns changed, with the first line of its error.

Never fails a run: its tables are committed by then; a post that fails is a warning."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from rivc.compiler.loading.secrets import mask_url
from rivc.compiler.loading.specs import NotifySpec

FAILED = ("error", "fail")
MOST = 20  # nodes named in one message; the rest are counted
LINE = 300  # characters of an error shown


def message(project: str, report: Any, on: tuple[str, ...]) -> str | None:
    """The message for this run, or None when nothing it is asked about happened."""
    failed = [r for r in report.results if r.status in FAILED] if "failure" in on else []
    changed = [r for r in report.results if r.schema == "CHANGED"] if "schema_change" in on else []
    if not failed and not changed:
        return None
    ran = len(report.results)
    head = f"rivc {report.command} in {project}"
    if failed:
        head += f" failed: {len(failed)} of {ran} nodes"
    else:
        head += f": the columns of {len(changed)} of {ran} nodes changed"
    lines = [f"{head} (run {report.run_id})"]
    for r in failed[:MOST]:
        first = (r.error or r.message or "").strip().splitlines()[:1]
        why = first[0][:LINE] if first else ""
        lines.append(f"• {r.node}: {r.status}" + (f": {why}" if why else ""))
    for r in changed[: max(0, MOST - len(failed))]:
        lines.append(f"• {r.node}: its columns changed")
    shown = min(len(failed), MOST) + min(len(changed), max(0, MOST - len(failed)))
    if len(failed) + len(changed) > shown:
        lines.append(f"… and {len(failed) + len(changed) - shown} more (target/run_results.json)")
    return "\n".join(lines)


def export(settings: NotifySpec, project: str, report: Any, warn: Callable[[str], None]) -> None:
    """Post the run's message where the profile's `notify:` says, if there is one."""
    url = settings.url or (os.environ.get(settings.url_env) if settings.url_env else None)
    if settings.url_env and not url:
        warn(f"notify: ${settings.url_env} is not set; no message was sent")
        return
    if not url:
        return
    text = message(project, report, settings.on)
    if text is None:
        return
    import urllib.request

    request = urllib.request.Request(url, json.dumps({"text": text}).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass
    except OSError as exc:  # URLError, HTTPError, a refused connection, a timeout
        reason = getattr(exc, "reason", None) or type(exc).__name__
        warn(f"notify: posting to {mask_url(url, True)} failed ({reason})")
