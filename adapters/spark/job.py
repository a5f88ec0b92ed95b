"""The entry point of a generated job, `target/jobs/<sink>.py` under spark-submit."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rivc.compiler.emit.manifest import MANIFEST_FILE
from rivc.compiler.errors import RivcError, StateError
from rivc.compiler.loading.locate import SPARK_LOG, STATE_DIR, TARGET_DIR

from ..run.execute import execute
from ..run.plan import Plan
from ..run.runtime import Runtime
from ..run.scheduler import bind_upstream, check_sink_locations
from ..run.streaming import graceful_interrupt
from ..state import StateStore


def main(root: Path, sink: str, args: list[str]) -> int:
    """A generated job's command line: `--project URI` runs a published copy of the project
    (the driver of a cluster-mode job has no project folder); else the folder around the job."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog=f"{sink}.py")
    parser.add_argument("--project", help="a published copy of the project (a URI or a path)")
    given = parser.parse_args(args)
    if given.project is None:
        return run_sink_job(root, sink)
    with tempfile.TemporaryDirectory(prefix="rivc-job-") as scratch:
        try:
            copied = fetch_project(given.project, Path(scratch))
        except (OSError, RivcError) as exc:
            print(f"{given.project}: {exc}", file=sys.stderr)
            return 2
        return run_sink_job(copied, sink, detached=True)


def fetch_project(uri: str, into: Path) -> Path:
    """Copy a published project (specs and target/, without .rivc/) into `into`."""
    import pyarrow.fs as pafs

    from ..util.storage import Store, resolve

    where = resolve(uri, Path.cwd())
    fs, base = Store.of(where).filesystem(where)
    base = base.rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    copied = 0
    for info in infos:
        rel = info.path[len(base) :].strip("/")
        if info.type != pafs.FileType.File or any(p.startswith(".") for p in rel.split("/")):
            continue  # .rivc/ (the state, which a copy does not share) and hidden files
        dest = into / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with fs.open_input_stream(info.path, compression=None) as src:
            dest.write_bytes(src.read())
        copied += 1
    if not (into / TARGET_DIR / MANIFEST_FILE).exists():
        raise StateError(
            f"no {TARGET_DIR}/{MANIFEST_FILE} among its {copied} files: publish the project "
            "after `rivc compile`"
        )
    return into


def run_sink_job(root: Path, sink: str, detached: bool = False) -> int:
    """Entry point of a generated job: bind the sink's upstream, run it, record the run. A
    `detached` job (a copied project) has a state store of its own that ends with it: its batch
    ids come from what the sink's tables hold, and what needs state kept between runs (a
    relational extraction's cursor, a stream's checkpoint) is refused."""
    from rivc.compiler.loading.profiles import dotenv

    from ..state import new_run_id, run_lock
    from .session import get_session

    os.environ.update(dotenv(root, os.environ))  # the .env beside profiles.yml, as the CLI
    plan = Plan.load(root)
    nid = f"sink:{sink}"
    run_id = new_run_id()
    state = StateStore.for_project(root)
    try:
        with run_lock(root, run_id):
            state.start_run(run_id, f"job {sink}", nid)
            runtime = Runtime(
                lambda: get_session(
                    plan.profile.spark,
                    app_name=f"rivc job {sink}",
                    log=plan.root / STATE_DIR / SPARK_LOG,
                ),
                plan,
                run_id,
                state,
            )
            runtime.detached = detached
            upstream = plan.upstream(nid)
            extracted = [up for up in upstream if plan.is_extracted(up)]
            if extracted and detached:
                raise StateError(
                    f"{extracted[0]}: a job run from a copied project keeps no state between "
                    "runs, and would extract into a landing table of its own; run the job "
                    "beside the project folder"
                )
            check_sink_locations(plan, [nid])
            with graceful_interrupt(runtime.interrupt):
                bind_upstream(runtime, upstream, extracted)
                results = [execute(runtime, up) for up in extracted]
                failed = next((r for r in results if r.status != "success"), None)
                result = failed or execute(runtime, nid)
            state.finish_run(run_id, "success" if result.status == "success" else "error")
    except RivcError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    finally:
        state.close()
    line = f"{sink}: {result.status}, {result.rows} rows, {result.files} files ({result.message})"
    print(line if result.status == "success" else f"{line}: {result.error}")
    return 0 if result.status == "success" else 1
