"""Time `rivc docs generate` on a synthetic project of N models (compile_bench's shape) and the
page's load in Debian's chromium (playwright-core, tests/browser/docs_site.cjs): the
milliseconds from navigation until the page has drawn its list and is ready for input.

    python bench/docs_bench.py            # N = 1000; median of 3
    python bench/docs_bench.py 2000 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from compile_bench import generate

REPO = Path(__file__).resolve().parents[1]
TOOLS = Path(os.environ.get("RIVC_TOOLS", Path.home() / ".cache/rivc-tools"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[1000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    opts = parser.parse_args()
    run_dir = opts.out / f"docs-{time.strftime('%Y%m%d-%H%M%S')}"
    env = {**os.environ, "NODE_PATH": str(TOOLS / "node_modules")}
    print(f"{'models':>7} {'phase':<26} {'median':>9}  (each run)")
    for n in opts.sizes:
        root = run_dir / f"project_{n}"
        generate(root, n)
        made, ready = [], []
        for _ in range(opts.runs):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "rivc.adapters.cli", "docs", "generate"],
                cwd=root,
                check=True,
                capture_output=True,
            )
            made.append(time.perf_counter() - start)
            index = root / "target/docs/index.html"
            seen = subprocess.run(
                ["node", str(REPO / "tests/browser/docs_site.cjs"), str(index)],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            ready.append(json.loads(seen.stdout)["ready_ms"] / 1000)
        size = (root / "target/docs/index.html").stat().st_size / 1e6
        for phase, values in (
            ("rivc docs generate (s)", made),
            ("page ready in chromium (s)", ready),
        ):
            each = " ".join(f"{v:.2f}" for v in values)
            print(f"{n:>7} {phase:<26} {statistics.median(values):>9.2f}  ({each})")
        print(f"{n:>7} {'index.html':<26} {size:>7.1f} MB")
    print(f"Projects: {run_dir} (delete bench/out when done)")


if __name__ == "__main__":
    main()
