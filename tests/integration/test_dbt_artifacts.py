"""target/manifest.json in dbt's format, beside dbt's own: tests/fixtures/dbt_names (custom
schemas per folder, a `schema`/`alias` in config(), the project's own generate_schema_name and
generate_alias_name, a versioned model, a snapshot, a seed, generic tests with a long name and
a singular test) is parsed by dbt-core (`dbt parse`, dbt-duckdb) and compiled by rivc, and
every node must have dbt's id, schema, alias, fqn, paths and dependencies; dbt-artifacts-parser
reads rivc's manifest as it reads dbt's. No Spark: compile only."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from dbt_artifacts_parser.parser import parse_manifest

from rivc_testing import DBT_NAMES as FIXTURE
from rivc_testing import dbt_parse, rivc

pytestmark = pytest.mark.integration

FIELDS = ("name", "resource_type", "schema", "alias", "fqn", "path", "original_file_path")


def rivc_compile(tmp: Path, schema: str, target: str = "dev") -> dict[str, Any]:
    root = tmp / f"rivc_{target}"
    shutil.copytree(FIXTURE, root)
    (root / "profiles.yml").write_text(
        f"names:\n  target: {target}\n  outputs:\n    {target}: "
        f"{{type: spark, method: session, schema: {schema}}}\n"
    )
    done = rivc(root, "compile")
    assert done.exit_code == 0, done.output
    return json.loads((root / "target/manifest.json").read_text())


def without_hash(uid: str) -> str:
    """A generic test's id without the hash dbt appends to it (rivc's has none)."""
    return uid.rsplit(".", 1)[0] if uid.startswith("test.") and uid.count(".") == 3 else uid


def relation(name: str | None) -> str | None:
    """dbt-duckdb's `"db"."schema"."alias"` as dbt-spark writes it: `schema.alias`."""
    return None if name is None else ".".join(name.replace('"', "").split(".")[-2:])


def test_every_node_has_dbts_name_schema_alias_and_dependencies(tmp_path):
    """On target `dev`, and on `prod` with another schema (names follow target.name and
    target.schema in the project's macros, as in dbt); dbt parses both at once."""
    with ThreadPoolExecutor(2) as pool:
        prod = pool.submit(dbt_parse, tmp_path, "warehouse", "prod")
        theirs = dbt_parse(tmp_path, "analytics")
        ours = rivc_compile(tmp_path, "analytics")
        ours_prod = rivc_compile(tmp_path, "warehouse", target="prod")
        theirs_prod = prod.result()

    parsed = parse_manifest(ours)  # as dagster-dbt, Recce and Elementary read it
    assert parsed.metadata.project_name == "names" and parsed.metadata.adapter_type == "spark"

    expected = {without_hash(uid): node for uid, node in theirs["nodes"].items()}
    assert sorted(ours["nodes"]) == sorted(expected)
    assert sorted(ours["unit_tests"]) == sorted(theirs["unit_tests"])
    for uid, node in ours["nodes"].items():
        want = expected[uid]
        for field in FIELDS:
            assert node[field] == want[field], (uid, field)
        assert relation(node["relation_name"]) == relation(want["relation_name"]), uid
        assert node.get("version") == want.get("version"), uid
        assert sorted(node["depends_on"].get("nodes", [])) == sorted(
            without_hash(n) for n in want["depends_on"].get("nodes", [])
        ), uid
    assert {
        without_hash(k): sorted(map(without_hash, v)) for k, v in ours["parent_map"].items()
    } == {without_hash(k): sorted(map(without_hash, v)) for k, v in theirs["parent_map"].items()}
    # what the fixture sets up, spelt out
    names = {uid: relation(n["relation_name"]) for uid, n in ours["nodes"].items()}
    assert names["seed.names.people"] == "raw.people"  # the project's macro: a seed's as given
    assert names["model.names.stg_people"] == "analytics_staging.stg_people"
    # marts: dbt's generate_schema_name_for_env, the target's schema outside prod
    assert names["model.names.people_by_month"] == "analytics.fct_people_by_month"
    assert names["model.names.ledger"] == "analytics.general_ledger"  # config()'s alias
    assert names["model.names.accounts.v2"] == "analytics.accounts_v2"
    assert names["snapshot.names.people_history"] == "analytics_history.people_history"
    assert names["snapshot.names.legacy_history"] == "archive.legacy_history"  # as given
    long_test = next(n for n in ours["nodes"].values() if n["name"].startswith("accepted_values"))
    assert re.fullmatch(r"accepted_values_stg_people_[0-9a-f]{32}", long_test["alias"])
    assert long_test["schema"] == "analytics_dbt_test__audit"
    expected = {without_hash(uid): node for uid, node in theirs_prod["nodes"].items()}
    for uid, node in ours_prod["nodes"].items():
        assert (node["schema"], node["alias"]) == (
            expected[uid]["schema"],
            expected[uid]["alias"],
        ), uid
    prod_nodes = ours_prod["nodes"]
    assert prod_nodes["model.names.top_level"]["schema"] == "warehouse"
    assert prod_nodes["model.names.ledger"]["schema"] == "books"  # config()'s, as given in prod
    assert prod_nodes["model.names.people_by_month"]["schema"] == "marts"
