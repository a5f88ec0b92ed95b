"""Time the daily loop on a warm server (`rivc server start`), each command a new process.

    python bench/warm_bench.py --runs 3

Reported, median of --runs (each figure a whole `rivc` command, Python start included):
- the `rivc init` project rerun with nothing new: its tables reused, no Spark touched;
- the same project rerun with its view's param changed on every run, so both tables are built
  on the warm server;
- a pull request on sample_project: production's run gives `--state`; a copy changes one
  model (alternately two ways, so every run builds it) and runs
  `rivc build --select state:modified+ --defer --state <production's target/>`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RIVC = str(Path(sys.executable).parent / "rivc")


def rivc(cwd: Path, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([RIVC, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"rivc {' '.join(args)} failed in {cwd}:\n{done.stdout}{done.stderr}")
    return time.perf_counter() - started


def report(label: str, times: list[float]) -> None:
    each = ", ".join(f"{t:.2f}" for t in times)
    print(f"{label:<58} {statistics.median(times):6.2f} s  ({each})")


def init_project(base: Path, runs: int) -> None:
    root = base / "shop"
    subprocess.run([RIVC, "init", str(root)], check=True, capture_output=True)
    rivc(root, "server", "start")
    try:
        rivc(root, "run")
        report("init project, rerun with nothing new", [rivc(root, "run") for _ in range(runs)])
        changed = [rivc(root, "run", "--param", f"min_total={i % 2 + 1}") for i in range(runs)]
        report("init project, rerun with a changed param (tables built)", changed)
    finally:
        subprocess.run([RIVC, "server", "stop"], cwd=root, capture_output=True)


def pull_request(base: Path, runs: int) -> None:
    keep = shutil.ignore_patterns("target", ".rivc", "output", "warehouse")
    prod = base / "prod"
    shutil.copytree(REPO / "sample_project", prod, ignore=keep)
    rivc(prod, "run")
    branch = base / "branch"
    shutil.copytree(prod, branch, ignore=keep)
    model = branch / "models/marts/daily_revenue.sql"
    original = model.read_text()
    variants = [
        original.replace("count(*)", "count(distinct customer_id)"),
        original.replace("count(*)", "count(distinct order_id)"),
    ]
    args = ("build", "--select", "state:modified+", "--defer", "--state", str(prod / "target"))
    rivc(branch, "server", "start")
    try:
        times = []
        for i in range(runs + 1):
            model.write_text(variants[i % 2])
            took = rivc(branch, *args)
            if i:  # the first build on a new server also warms its JVM
                times.append(took)
        report("pull request: build state:modified+ --defer", times)
    finally:
        subprocess.run([RIVC, "server", "stop"], cwd=branch, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        init_project(Path(tmp), args.runs)
        pull_request(Path(tmp), args.runs)


if __name__ == "__main__":
    main()
