"""Time a dbt project built by rivc and by dbt-core with dbt-duckdb, side by side in one run.

    python bench/dbt_bench.py /path/to/jaffle-shop --vars '{"load_source_data": true}' \\
        --dbt ~/.cache/rivc-tools/dbt/bin/dbt --runs 3

The project folder must hold its seeds and a filled dbt_packages/ (dbt Labs' jaffle-shop: its
CSVs come from `jafgen 1`, its packages from their public repositories). Each tool works on its
own copy. Reported, median of --runs:
- rivc build in a new process (the JVM start included), from an empty warehouse;
- rivc build on the project's warm server (`rivc server start`), the tables already there;
- dbt seed + dbt build with dbt-duckdb, from an empty database.
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

RIVC = str(Path(sys.executable).parent / "rivc")


def timed(cmd: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - started


def fresh(project: Path, work: Path, name: str) -> Path:
    copy = work / name
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(
        project,
        copy,
        symlinks=True,
        ignore=shutil.ignore_patterns("target", "warehouse", ".rivc", "*.duckdb", "logs"),
    )
    return copy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("--vars", default=None)
    parser.add_argument("--dbt", help="a dbt executable with dbt-duckdb")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    extra = ["--vars", args.vars] if args.vars else []
    work = Path(tempfile.mkdtemp(prefix="dbt-bench-"))
    cold, warm, dbt = [], [], []
    for _ in range(args.runs):
        root = fresh(args.project, work, "rivc")
        cold.append(timed([RIVC, "build", *extra], root))
    root = fresh(args.project, work, "rivc-warm")
    timed([RIVC, "server", "start"], root)
    try:
        timed([RIVC, "build", *extra], root)  # the first build on the server fills the tables
        for _ in range(args.runs):
            warm.append(timed([RIVC, "build", *extra], root))
    finally:
        subprocess.run([RIVC, "server", "stop"], cwd=root, capture_output=True)
    if args.dbt:
        profiles = work / "profiles"
        profiles.mkdir(exist_ok=True)
        for _ in range(args.runs):
            copy = fresh(args.project, work, "dbt")
            name = _profile(copy)
            (profiles / "profiles.yml").write_text(
                f"{name}:\n  target: dev\n  outputs:\n"
                f"    dev: {{type: duckdb, path: '{copy / 'bench.duckdb'}', threads: 2}}\n"
            )
            took = timed([args.dbt, "seed", *extra, "--profiles-dir", str(profiles)], copy)
            took += timed([args.dbt, "build", *extra, "--profiles-dir", str(profiles)], copy)
            dbt.append(took)
    print(f"{args.project.name}, median of {args.runs}:")
    print(f"  rivc build, new process:     {statistics.median(cold):6.1f} s  {_each(cold)}")
    print(f"  rivc build, warm server:     {statistics.median(warm):6.1f} s  {_each(warm)}")
    if dbt:
        print(f"  dbt seed + build (duckdb):   {statistics.median(dbt):6.1f} s  {_each(dbt)}")
    print(f"(copies left in {work})")


def _profile(project: Path) -> str:
    import yaml

    return str(yaml.safe_load((project / "dbt_project.yml").read_text()).get("profile", "default"))


def _each(values: list[float]) -> str:
    return "(" + " ".join(f"{v:.1f}" for v in values) + ")"


if __name__ == "__main__":
    main()
