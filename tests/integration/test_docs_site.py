"""The docs site in a real browser: Debian's chromium, driven by playwright-core from npm
(tests/browser/docs_site.cjs), loads the page rivc wrote, searches, opens a node and follows
a column's lineage to the model it comes from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rivc_testing import rivc

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("RIVC_TOOLS", Path.home() / ".cache/rivc-tools"))


def browse(index: Path, *steps: str) -> dict:
    """What docs_site.cjs saw of the page, as JSON."""
    env = {**os.environ, "NODE_PATH": str(TOOLS / "node_modules")}
    done = subprocess.run(
        ["node", str(REPO / "tests/browser/docs_site.cjs"), str(index), *steps],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_docs_site_searches_shows_a_node_and_follows_a_columns_lineage(tmp_path):
    root = tmp_path / "shop"
    shutil.copytree(REPO / "sample_project", root, ignore=shutil.ignore_patterns("target"))
    made = rivc(root, "docs", "generate")
    assert made.exit_code == 0, made.output
    index = root / "target/docs/index.html"
    seen = browse(index, "customer_orders", "revenue", "orders_enriched.total")
    assert seen["listed"] == 26  # every node of the project
    assert seen["hits"][0] == "model:customer_orders"
    assert all("customer_ord" in h for h in seen["hits"])
    assert seen["title"] == "customer_orders"
    assert seen["columns"] == [
        "customer_id",
        "customer_name",
        "orders",
        "revenue",
        "last_order_at",
        "segment",
        "revenue_rank",
    ]
    assert seen["dag"][:2] == ["orders_enriched", "customer_orders"]
    assert seen["lineage"] == [
        "← orders_enriched.total aggregated",
        "← stg_orders.total copied",
        "← orders.total_cents transformed",
        "← source:shop.orders.total transformed",
        "→ sink:customer_orders_files delivered",
    ]
    assert seen["followed"] == "orders_enriched"
    assert seen["hash"] == "#node=model:orders_enriched&column=total"

    shutil.rmtree(root / "target/docs")
    served = rivc(root, "docs", "serve")
    assert served.exit_code == 2 and "run `rivc docs generate` first" in served.output
