"""Time `rivc compile` (cold and warm) and `rivc lint` on synthetic projects of N models.

    python bench/compile_bench.py            # N = 100, 1000, 2000; median of 3
    python bench/compile_bench.py 1000 --runs 5

Shape: layered refs, ~10% staging models on sources with declared columns, ~20% incremental,
CTEs, CASE, window functions, ${params}, not_null/unique tests on ~30% of models. Every
column is known through the DAG, so every model is fully qualified (the worst case).
Reports wall time and peak RSS of the rivc process and its workers.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COLUMNS = {
    "id": "bigint",
    "customer_id": "bigint",
    "amount": "double",
    "status": "string",
    "updated_at": "timestamp",
    "region": "string",
}


def generate(root: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    if root.exists():
        shutil.rmtree(root)
    (root / "models").mkdir(parents=True)
    (root / "sources").mkdir()
    (root / "rivc_project.yml").write_text(
        "name: bench\nparams: {region: eu}\nvars: {min_amount: 10}\n"
    )
    n_staging = max(1, n // 10)
    cols = ", ".join(f"{k}: {v}" for k, v in COLUMNS.items())
    tables = "\n".join(
        f"      - {{name: t{i}, config: {{path: data/t{i}, format: parquet}}, columns: {{{cols}}}}}"
        for i in range(n_staging)
    )
    (root / "sources" / "raw.yml").write_text(
        f"sources:\n  - name: raw\n    connector: files\n    tables:\n{tables}\n"
    )
    names: list[str] = []
    props = ["models:"]
    for i in range(n):
        if i < n_staging:
            name = f"stg_{i}"
            sql = (
                f"select id, customer_id, cast(amount as double) as amount, lower(status) as "
                f"status, updated_at, region\nfrom {{{{ source('raw', 't{i}') }}}}\n"
                f"where region = ${{region}}\n"
            )
        else:
            name = f"m_{i}"
            a = rng.choice(names[max(0, len(names) - 200) :])
            b = rng.choice(names)
            incremental = rng.random() < 0.2
            head = (
                "{{ config(materialized='incremental', unique_key='id') }}\n" if incremental else ""
            )
            tail = (
                "{% if is_incremental() %}\n  and updated_at > (select max(updated_at) "
                "from {{ this }})\n{% endif %}\n"
                if incremental
                else ""
            )
            sql = (
                f"{head}with base as (\n"
                f"  select a.id, a.customer_id, a.amount, a.status, a.updated_at, a.region,\n"
                f"    row_number() over (partition by a.customer_id order by a.updated_at desc) as rn\n"
                f"  from {{{{ ref('{a}') }}}} a\n"
                f"  left join {{{{ ref('{b}') }}}} b on b.id = a.id\n"
                f"  where a.amount > {{{{ var('min_amount') }}}}\n)\n"
                f"select id, customer_id,\n"
                f"  case when amount > 100 then amount * 1.1 when amount > 50 then amount "
                f"else 0 end as amount,\n"
                f"  status, updated_at, region\nfrom base\nwhere rn <= 5\n{tail}"
            )
        (root / "models" / f"{name}.sql").write_text(sql)
        names.append(name)
        if rng.random() < 0.3:
            props.append(
                f"  - name: {name}\n    columns:\n      - name: id\n"
                f"        tests: [not_null, unique]"
            )
    (root / "models" / "schema.yml").write_text("\n".join(props) + "\n")


def measure(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command, its children included."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(
            f"{' '.join(args)} failed: {proc.stderr.read().decode() if proc.stderr else ''}"
        )
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[100, 1000, 2000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    opts = parser.parse_args()
    rivc = [sys.executable, "-m", "rivc.adapters.cli"]
    print(f"{'models':>7} {'phase':<22} {'median s':>9} {'peak MB':>8}")
    for n in opts.sizes:
        root = opts.out / f"project_{n}"
        generate(root, n)
        phases: dict[str, list[tuple[float, float]]] = {}
        for _ in range(opts.runs):
            shutil.rmtree(root / "target", ignore_errors=True)
            phases.setdefault("compile cold", []).append(measure([*rivc, "compile"], root))
            phases.setdefault("compile warm", []).append(measure([*rivc, "compile"], root))
            phases.setdefault("lint (after compile)", []).append(measure([*rivc, "lint"], root))
            shutil.rmtree(root / "target", ignore_errors=True)
            phases.setdefault("lint cold", []).append(measure([*rivc, "lint"], root))
        for phase, values in phases.items():
            wall = statistics.median(v[0] for v in values)
            rss = max(v[1] for v in values)
            print(f"{n:>7} {phase:<22} {wall:>9.2f} {rss:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
