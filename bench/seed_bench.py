"""Time a seed of N rows: `rivc compile` (reads the CSV and infers its types, no JVM) and
`rivc seed` in a new process (JVM start included), and, with --dbt, dbt's `dbt seed` of the same
file in the same run (dbt-core with an adapter in its own virtualenv; dbt-duckdb by default).

    python bench/seed_bench.py                  # 100,000 rows
    python bench/seed_bench.py 100000 --dbt /tmp/dbt/bin/dbt

The file has jaffle-shop's kinds of columns: integer ids, a decimal amount (`12.50`), a date, a
timestamp, a boolean and text with apostrophes, quotes and empty fields.
"""

from __future__ import annotations

import argparse
import csv
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RIVC = str(Path(sys.executable).parent / "rivc")


def write_seed(path: Path, rows: int) -> None:
    rnd = random.Random(7)
    with path.open("w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["id", "customer_id", "amount", "ordered_on", "ordered_at", "paid", "note"])
        for i in range(rows):
            w.writerow(
                [
                    i,
                    rnd.randrange(10_000),
                    f"{rnd.randrange(100_000) / 100:.2f}",
                    f"2024-{rnd.randrange(1, 13):02d}-{rnd.randrange(1, 29):02d}",
                    f"2024-01-01 {rnd.randrange(24):02d}:{rnd.randrange(60):02d}:00",
                    rnd.choice(["true", "false"]),
                    rnd.choice(["kevin parker's favorite", 'say "hi"', "", "plain"]),
                ]
            )


def timed(cmd: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rows", type=int, nargs="?", default=100_000)
    parser.add_argument("--dbt", help="a dbt executable (dbt-core + dbt-duckdb)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="seed-bench-"))
    rivc_root = work / "rivc"
    (rivc_root / "seeds").mkdir(parents=True)
    (rivc_root / "rivc_project.yml").write_text("name: bench\n")
    write_seed(rivc_root / "seeds/orders.csv", args.rows)
    print(f"{args.rows:,} rows, {(rivc_root / 'seeds/orders.csv').stat().st_size / 1e6:.1f} MB")
    print(f"rivc compile: {timed([RIVC, 'compile'], rivc_root):.1f} s")
    print(f"rivc seed (new process, JVM start included): {timed([RIVC, 'seed'], rivc_root):.1f} s")
    if args.dbt:
        dbt_root = work / "dbt"
        (dbt_root / "seeds").mkdir(parents=True)
        (dbt_root / "dbt_project.yml").write_text(
            "name: bench\nversion: '1'\nprofile: bench\nconfig-version: 2\n"
        )
        (dbt_root / "profiles.yml").write_text(
            "bench:\n  target: dev\n  outputs:\n    dev: {type: duckdb, path: bench.duckdb}\n"
        )
        (dbt_root / "seeds/orders.csv").write_text((rivc_root / "seeds/orders.csv").read_text())
        took = timed([args.dbt, "seed", "--profiles-dir", "."], dbt_root)
        print(f"dbt seed (dbt-duckdb): {took:.1f} s")
    print(f"(left in {work})")


if __name__ == "__main__":
    main()
