"""`rivc check` (EXPLAIN each extraction before running it) and `rivc doctor` (reach everything).

Thresholds follow Rivet's preflight tables: verdicts by scan type and row estimate, a tuning
profile recommendation, and warnings for sparse chunk keys, dense-surrogate sorts, parallel
memory risk and unindexed cursors.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rivc.compiler.connector import ConnectorInfo
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.project import Project
from rivc.compiler.loading.secrets import mask_url
from rivc.compiler.loading.specs import SourceTable

from ..connectors.database.engine import Conn, ExtractError, connection, driver_errors
from ..connectors.database.windows import Cursor, plan_window
from ..plane.registry import preflight as log_preflight
from ..plane.registry import probe
from ..util.errortext import classify, doctor_category, root_cause
from ..util.storage import Store, join

MANY_ROWS = 10_000_000  # index scan beyond this: ACCEPTABLE
HUGE_ROWS = 50_000_000  # full scan beyond this: UNSAFE
PARALLEL_RISK_ROWS = 5_000_000


@dataclass
class Check:
    table: str
    strategy: str
    mode: str
    row_estimate: int | None = None
    cursor_range: str = ""
    scan: str = ""  # index | full scan
    verdict: str = ""  # EFFICIENT | ACCEPTABLE | DEGRADED | UNSAFE | FAILED
    recommended_profile: str = ""
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


def strategy(table: SourceTable) -> str:
    p = table.parallel
    if table.mode == "incremental":
        return f"incremental({table.cursor_column})"
    if table.mode == "chunked":
        if p > 1:
            return f"chunked-parallel({table.chunk_column}, size={table.chunk_size}, p={p})"
        return f"chunked({table.chunk_column}, size={table.chunk_size})"
    if table.mode == "time_window":
        return f"time-window({table.time_column}, {table.days_window}d)"
    return f"full-parallel({p})" if p > 1 else "full-scan"


def verdict(scan: str, rows: int) -> str:
    if scan == "index":
        return "EFFICIENT" if rows < MANY_ROWS else "ACCEPTABLE"
    return "UNSAFE" if rows > HUGE_ROWS else "DEGRADED"


def recommend(scan: str, rows: int) -> str:
    if scan == "index":
        return "fast" if rows < 1_000_000 else "balanced" if rows <= MANY_ROWS else "safe"
    return "fast" if rows < 100_000 else "balanced" if rows <= 1_000_000 else "safe"


def check_table(project: Project, fqn: str, sql: str, stored: Cursor | None) -> Check:
    """EXPLAIN the next extraction of `fqn` from the cursor its landing table holds
    (`stored`, None before the first)."""
    source = project.sources[fqn]
    table = source.table
    result = Check(fqn, strategy(table), table.mode)
    spec = project.profile.connections.get(source.source.connection or "")
    if spec is None:
        result.verdict, result.error = "FAILED", "connection is not in the profile"
        return result
    try:
        conn = Conn.resolve(spec, os.environ)
        stored = stored if table.mode == "incremental" else None
        with connection(conn) as db:
            window = plan_window(db, conn.kind, sql, table, stored)
            predicate = window.predicate
            if window.chunks:
                predicate = window.chunks[0][1]
            probe = f"SELECT * FROM ({sql}) AS _rivc" + (f" WHERE {predicate}" if predicate else "")
            rows, scan = conn.engine.explain(db, probe)
            if window.chunks:
                rows *= len(window.chunks)
                if window.sparse:
                    result.warnings.append(
                        "sparse key range: most chunk windows are empty; chunk on a dense "
                        "surrogate or use incremental"
                    )
    except ExtractError as exc:
        result.verdict, result.error = "FAILED", exc.message
        return result
    except driver_errors() as exc:  # EXPLAIN refused: report it as a failed check
        result.verdict = "FAILED"
        result.error = f"{classify(str(exc))} error: {root_cause(str(exc))}"
        return result
    result.row_estimate, result.scan = rows, scan
    result.cursor_range = window.description
    result.verdict = verdict(scan, rows)
    result.recommended_profile = recommend(scan, rows)
    if re.search(r"row_number\s*\(", sql, re.I) and table.mode == "chunked":
        result.warnings.append("dense surrogate sort cost: ROW_NUMBER() orders the whole result")
    if table.parallel > 1 and rows > PARALLEL_RISK_ROWS:
        result.warnings.append(f"parallel memory risk: parallel {table.parallel} on ~{rows:,} rows")
    if scan == "full scan":
        column = {
            "incremental": table.cursor_column,
            "chunked": table.chunk_column,
            "time_window": table.time_column,
        }.get(table.mode)
        if not column:
            result.warnings.append("full scan: switch to mode incremental on an indexed column")
        elif not _indexed(project, fqn, sql, column):
            result.warnings.append(f"unindexed {column}: the plan scans the whole table; index it")
        # else: this window is (most of) the table, which a scan reads best; later ones use
        # the index
    return result


def check_log(project: Project, fqn: str) -> Check:
    """`rivc check` of a change-log table: READY, or FAILED naming what stops it (a server
    setting, a table the application's writes would fail on once published)."""
    source = project.sources[fqn]
    result = Check(fqn, f"change log ({source.connector.name})", "log")
    spec = project.profile.connections.get(source.source.connection or "")
    if spec is None:
        result.verdict, result.error = "FAILED", "connection is not in the profile"
        return result
    tables = sorted(
        {t.table.table or "" for t in project.sources.values() if t.source == source.source}
    )
    try:
        problems = log_preflight(
            source.connector, Conn.resolve(spec, os.environ), tables, source.table.table or ""
        )
    except ExtractError as exc:
        result.verdict, result.error = "FAILED", exc.message
        return result
    except driver_errors() as exc:
        result.verdict = "FAILED"
        result.error = f"{classify(str(exc))} error: {root_cause(str(exc))}"
        return result
    if problems:
        result.verdict, result.error = "FAILED", "; ".join(problems)
    else:
        result.verdict = "READY"
    return result


def _indexed(project: Project, fqn: str, sql: str, column: str) -> bool:
    """Whether the database has an index it would use on `column` for a narrow window (a plan
    of `column IS NULL`, which a B-tree index answers; PostgreSQL planning without sequential
    scans, so that a small table shows its index too): a window over the whole table is a full
    scan whether or not the column is indexed."""
    source = project.sources[fqn]
    spec = project.profile.connections[source.source.connection or ""]
    conn = Conn.resolve(spec, os.environ)
    narrow = f"SELECT * FROM ({sql}) AS _rivc WHERE {conn.engine.quote(column)} IS NULL"
    try:
        with connection(conn) as db:
            conn.engine.prefer_indexes(db)
            return conn.engine.explain(db, narrow)[1] == "index"
    except driver_errors():
        return False  # no plan: say what the first plan says


def to_json(checks: list[Check]) -> str:
    return json.dumps([asdict(c) for c in checks], indent=2)


# --------------------------------------------------------------------------- doctor


def doctor(project: Project) -> list[tuple[str, bool, str]]:
    """(what, ok, detail) for every connection of the profile and every sink location."""
    out: list[tuple[str, bool, str]] = []
    storage = project.profile.storage
    for name, spec in sorted(project.profile.connections.items()):
        what = f"connection {name} ({spec.type})"
        try:
            conn = Conn.resolve(spec, os.environ)
            with connection(conn) as db, db.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchone()
            out.append((what, True, f"{conn.host}:{conn.port}/{conn.database or ''}"))
        except ExtractError as exc:
            said = exc.message.removeprefix(f"{exc.category} error: ")
            out.append((what, False, doctor_category(exc.category, said)))
        except ConnectorError as exc:  # e.g. an unset password_env: this line fails, not doctor
            out.append((what, False, f"config error: {exc.message}"))
    for fqn, table in sorted(project.sources.items()):
        reached = probe(table.connector, table.config, project.root, storage)
        if reached is not None:
            where = mask_url(getattr(table.config, "url", ""))
            out.append(
                (f"source {fqn} ({table.connector.name} {where})".replace(" )", ")"), *reached)
            )
    for name, sink in sorted(project.sinks.items()):
        location = sink.connector.location(sink.config)
        if location is not None:
            what = f"sink {name} ({sink.spec.connector} {location})"
            options = getattr(sink.config, "storage_options", None) or {}
            out.append((what, *_location_probe(location, project.root, storage, options)))
        reached = probe(sink.connector, sink.config, project.root, storage)
        if reached is not None:
            out.append((f"sink {name} ({sink.spec.connector})", *reached))
    return out


def _location_probe(
    location: str, root: Path, storage: Mapping[str, str], options: Mapping[str, str]
) -> tuple[bool, str]:
    """Write a small object or file where a sink writes, and remove it."""
    if "://" not in location:
        return _write_probe(root / location)
    import uuid

    store = Store.of(location, storage, options)
    try:
        fs, path = store.filesystem(join(location, f".rivc-probe-{uuid.uuid4().hex}"))
        with fs.open_output_stream(path, compression=None) as stream:
            stream.write(b"rivc doctor")
        fs.delete_file(path)
    except (OSError, ValueError) as exc:
        return False, f"cannot write in {location}: {str(exc).strip().splitlines()[0][:300]}"
    return True, "writable (a probe object written and removed)"


def probe_sink(info: ConnectorInfo, config: Any, root: Path) -> str | None:
    """Why a sink's local location cannot be written, or None when it can (or is remote)."""
    location = info.location(config)
    if location is None or "://" in location:
        return None
    ok, detail = _write_probe(root / location)
    return None if ok else detail


def _write_probe(path: Path) -> tuple[bool, str]:
    """Create the directory's nearest existing parent's child, write a file, remove it."""
    target = path
    while not target.exists() and target != target.parent:
        target = target.parent
    if not target.is_dir():
        return False, f"not found: {target} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=target, prefix=".rivc-probe-"):
            pass
    except OSError as exc:
        return False, f"other: cannot write in {target}: {exc.strerror}"
    return True, f"writable ({target})"
