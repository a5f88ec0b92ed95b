"""The differential test's soak (tests/rivc_differential.py): new random programs of DML on
PostgreSQL and MariaDB, runs under random selections, snapshots, kills, a lost .rivc/ and the
warm server, for as long as it is given; every consumer compared with the machine's model
after every run. A failure is shrunk and printed with its seed.

    python bench/cdc_soak.py --minutes 60           # an hour of new seeds
    python bench/cdc_soak.py --seed 1234            # replay one seed
    python bench/cdc_soak.py --find-seed 18         # a seed for CI's fixed pass: a program of
                                                    # 18 steps that takes every kind of step and
                                                    # crosses every seam (dry: no database)

Runs through pytest (the test suite's fixtures start the logical PostgreSQL and the binlog
MariaDB of its own; root needed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_seed(steps: int, start: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from hypothesis import seed

    from rivc_differential import SEAMS, Pipeline, seams

    sys.path.insert(0, str(ROOT / "tests/integration"))
    from test_differential import KINDS, program

    Pipeline.dry = True
    for chosen in range(start, start + 100_000):
        seed(chosen)(program(steps, shrink=False))()
        taken = Pipeline.steps
        if (
            set(taken) == KINDS
            and taken["kill_and_rerun"] == 1
            and taken["warm_server"] == 1
            and taken["run"] >= 3
            and Pipeline.last is not None
            and seams(Pipeline.last) == SEAMS
        ):
            print(f"SEED = {chosen}\nSTEPS = {steps}\n{dict(taken)}")
            return
    raise SystemExit("no seed found")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--find-seed", type=int, metavar="STEPS")
    parser.add_argument("--from", dest="start", type=int, default=20261129)
    args = parser.parse_args()
    if args.find_seed:
        find_seed(args.find_seed, args.start)
        return
    env = {
        **os.environ,
        "RIVC_SOAK_SECONDS": str(args.minutes * 60),
        "RIVC_SOAK_STEPS": str(args.steps),
    }
    if args.seed is not None:
        env["RIVC_SOAK_SEED"] = str(args.seed)
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-n", "0", "-s", "-p", "no:cacheprovider",
            "tests/integration/test_differential.py::test_soak",
        ],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    print(f"soak: {(time.monotonic() - started) / 60:.1f} minutes, exit {done.returncode}")
    raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
