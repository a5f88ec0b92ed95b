"""Time `rivc compile` (cold and warm) and `rivc lint` on synthetic projects of N models,
and, with --dbt, dbt-core's `parse` and `compile` of the same project in the same run.

    python bench/compile_bench.py            # N = 100, 1000, 2000; median of 3
    python bench/compile_bench.py 1000 --runs 5
    python bench/compile_bench.py 1000 --dbt /tmp/dbt/bin/dbt   # dbt-core + dbt-duckdb, own venv

`ls` and `ls state:modified+` list the project, then what one changed model (the middle
one) touches against the first compile's target/ (`--state`): their difference is the selection.

Shape: layered refs, ~10% staging models on sources with declared columns, ~20% incremental,
CTEs, CASE, window functions, ${params}, not_null/unique tests on ~30% of models. Every
column is known through the DAG, so every model is fully qualified (the worst case).
Reports wall time and peak RSS of the rivc process and its workers.

dbt's twin has the same models, sources, columns and tests; `${region}` becomes
`'{{ var("region") }}'`, and its profile is an in-process DuckDB file (`dbt compile` asks the
warehouse whether each incremental model's table exists).

Each run works in a new folder under --out and deletes nothing: see clear().
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


def dbt_twin(root: Path, dbt_root: Path) -> None:
    """The same project for dbt-core: models, sources with their columns, tests and vars."""
    (dbt_root / "models").mkdir(parents=True)
    (dbt_root / "dbt_project.yml").write_text(
        "name: bench\nversion: '1.0'\nprofile: bench\nmodel-paths: [models]\n"
        "vars: {region: eu, min_amount: 10}\n"
    )
    (dbt_root / "profiles.yml").write_text(
        "bench:\n  target: dev\n  outputs:\n    dev: {type: duckdb, path: bench.duckdb}\n"
    )
    for sql in (root / "models").glob("*.sql"):
        text = sql.read_text().replace("${region}", "'{{ var(\"region\") }}'")
        (dbt_root / "models" / sql.name).write_text(text)
    props = (root / "models" / "schema.yml").read_text().replace("tests:", "data_tests:")
    (dbt_root / "models" / "schema.yml").write_text(props)
    sources = ["version: 2", "sources:", "  - name: raw", "    tables:"]
    for line in (root / "sources" / "raw.yml").read_text().splitlines():
        if line.strip().startswith("- {name: t"):
            table = line.split("name: ", 1)[1].split(",", 1)[0]
            cols = ", ".join(f"{{name: {c}, data_type: {t}}}" for c, t in COLUMNS.items())
            sources.append(f"      - {{name: {table}, columns: [{cols}]}}")
    (dbt_root / "models" / "sources.yml").write_text("\n".join(sources) + "\n")


def clear(root: Path, trash: Path) -> None:
    """Make target/ absent. It is moved aside, never deleted, and no run deletes the last
    one's folders. ext4 without a journal (this machine's disk) will not reuse an inode freed in
    the last 60 s, or 360 s while its inode table block is dirty, and scans past every such
    inode each time it creates a file (seen with perf: `recently_deleted` under
    `__ext4_new_inode`). Creating 1,800 files within minutes of deleting 1,800 cost 0.5-1 s of
    kernel CPU that no compiler can avoid, so `rm -rf target` before each cold compile would
    measure the disk, not the compiler."""
    target = root / "target"
    if target.exists():
        target.rename(trash / f"target-{time.monotonic_ns()}")


def measure(args: list[str], cwd: Path, ok: tuple[int, ...] = (0, 1)) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command, its children included. rivc lint exits 1
    for findings; dbt must exit 0."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in ok:
        raise SystemExit(
            f"{' '.join(args)} failed: {proc.stderr.read().decode() if proc.stderr else ''}"
        )
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[100, 1000, 2000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    parser.add_argument("--dbt", help="a dbt executable (dbt-core with dbt-duckdb) to measure too")
    opts = parser.parse_args()
    rivc = [sys.executable, "-m", "rivc.adapters.cli"]
    run_dir = opts.out / time.strftime("%Y%m%d-%H%M%S")
    trash = run_dir / "trash"
    trash.mkdir(parents=True)
    print(f"{'models':>7} {'phase':<22} {'median s':>9} {'peak MB':>8}  (each run)")
    for n in opts.sizes:
        root = run_dir / f"project_{n}"
        generate(root, n)
        dbt_root = run_dir / f"dbt_{n}"
        if opts.dbt:
            dbt_twin(root, dbt_root)
        dbt = [opts.dbt or "dbt", "--quiet"]
        where = ["--profiles-dir", str(dbt_root)]
        phases: dict[str, list[tuple[float, float]]] = {}
        for _ in range(opts.runs):
            clear(root, trash)
            phases.setdefault("compile cold", []).append(measure([*rivc, "compile"], root))
            phases.setdefault("compile warm", []).append(measure([*rivc, "compile"], root))
            phases.setdefault("lint (after compile)", []).append(measure([*rivc, "lint"], root))
            if not (root / "prod-target").exists():  # the state a pull request compares with
                shutil.copytree(root / "target", root / "prod-target")
                changed = root / "models" / f"m_{n // 2}.sql"
                changed.write_text(changed.read_text().replace("select", "select 1 as changed,", 1))
            phases.setdefault("ls", []).append(measure([*rivc, "ls"], root))
            phases.setdefault("ls state:modified+", []).append(
                measure(
                    [*rivc, "ls", "--select", "state:modified+", "--state", "prod-target"], root
                )
            )
            clear(root, trash)
            phases.setdefault("lint cold", []).append(measure([*rivc, "lint"], root))
            if opts.dbt:
                clear(dbt_root, trash)
                phases.setdefault("dbt parse cold", []).append(
                    measure([*dbt, "parse", *where], dbt_root, (0,))
                )
                clear(dbt_root, trash)
                phases.setdefault("dbt compile cold", []).append(
                    measure([*dbt, "compile", *where], dbt_root, (0,))
                )
                phases.setdefault("dbt compile (partial)", []).append(
                    measure([*dbt, "compile", *where], dbt_root, (0,))
                )
        for phase, values in phases.items():
            wall = statistics.median(v[0] for v in values)
            rss = max(v[1] for v in values)
            runs = " ".join(f"{v[0]:.2f}" for v in values)
            print(f"{n:>7} {phase:<22} {wall:>9.2f} {rss:>8.0f}  ({runs})", flush=True)
    print(f"Projects and moved-aside target/ folders: {run_dir} (delete bench/out when done)")


if __name__ == "__main__":
    main()
