"""The entry point of a generated job, `target/jobs/<sink>.py` under spark-submit."""

from __future__ import annotations

import sys
from pathlib import Path

from rivc.compiler.errors import RivcError
from rivc.compiler.locate import SPARK_LOG, STATE_DIR

from ..state import StateStore
from .plan import Plan
from .runtime import Runtime
from .streaming import graceful_interrupt


def run_sink_job(root: Path, sink: str) -> int:
    """Entry point of a generated job: bind the sink's upstream, run it, record the run."""
    from ..state import new_run_id, run_lock
    from .spark import get_session

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
            done = []
            with graceful_interrupt(runtime.interrupt):
                for up in plan.upstream(nid):
                    if plan.is_extracted(up):
                        done.append(runtime.execute(up))
                    else:
                        runtime.bind(up)
                result = runtime.execute(nid)
            runtime.finalize([*done, result])
            state.finish_run(run_id, "success" if result.status == "success" else "error")
    except RivcError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    finally:
        state.close()
    line = f"{sink}: {result.status}, {result.rows} rows, {result.files} files ({result.message})"
    print(line if result.status == "success" else f"{line}: {result.error}")
    return 0 if result.status == "success" else 1
