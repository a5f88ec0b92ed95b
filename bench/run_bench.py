"""Time `rivc run` of sample_project: whole commands (Spark start included) and in-process runs.

    python bench/run_bench.py                 # 3 of each; datagen orders scaled with --orders
    python bench/run_bench.py --orders 200000

Reports, for a fresh copy of the project:
- first `rivc run` in a new process (empty warehouse), then a second one (incremental, warm disk);
- the same two runs inside one process after the SparkSession is up, i.e. without Spark start-up.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fresh(base: Path, orders: int) -> Path:
    root = base / f"sample-{time.monotonic_ns()}"
    shutil.copytree(
        REPO / "sample_project",
        root,
        ignore=shutil.ignore_patterns("target", ".rivc", "output", "warehouse"),
    )
    spec = root / "sources/shop.yml"
    spec.write_text(re.sub(r"max_events: 5000", f"max_events: {orders}", spec.read_text()))
    return root


def timed(cmd: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--orders", type=int, default=5000)
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        first, second = [], []
        for _ in range(args.runs):
            root = fresh(base, args.orders)
            first.append(timed([rivc, "run"], root))
            second.append(timed([rivc, "run"], root))
        print(f"rivc run, new process, first run:  {statistics.median(first):6.2f} s")
        print(f"rivc run, new process, second run: {statistics.median(second):6.2f} s")

        from rivc.adapters.cli.execute import _spark
        from rivc.adapters.run.scheduler import RunOptions, execute

        started = time.perf_counter()
        roots = [fresh(base, args.orders) for _ in range(args.runs)]
        in_first, in_second = [], []
        for root in roots:
            for out in (in_first, in_second):
                t = time.perf_counter()
                report = execute(root, RunOptions(), _spark)
                assert not report.failed
                out.append(time.perf_counter() - t)
        print(f"session start + all in-process runs: {time.perf_counter() - started:6.2f} s")
        print(
            f"in-process (Spark up), first run:  {statistics.median(in_first):6.2f} s "
            f"(runs: {', '.join(f'{x:.2f}' for x in in_first)})"
        )
        print(f"in-process (Spark up), second run: {statistics.median(in_second):6.2f} s")


if __name__ == "__main__":
    main()
