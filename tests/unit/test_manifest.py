"""target/rivc_manifest.json is the typed hand-off from compile to run: what codegen writes, the
runtime reads back field for field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rivc.compiler.emit.manifest import Manifest

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sample_project" / "rivc_manifest.json"


def test_the_manifest_reads_back_as_it_was_written():
    text = GOLDEN.read_text()
    manifest = Manifest.loads(text)
    assert json.loads(manifest.dumps()) == json.loads(text)  # the golden copy is indented
    sink = manifest.nodes["sink:orders_lake"]
    assert (sink.kind, sink.sink.connector, sink.sink.from_) == ("sink", "delta", "orders_enriched")
    model = manifest.nodes["model:customer_orders"]
    assert model.materialized in ("view", "table", "incremental")
    assert all(d in manifest.nodes for n in manifest.nodes.values() for d in n.depends_on)


def test_a_manifest_of_another_schema_version_is_refused_by_name():
    data = json.loads(GOLDEN.read_text())
    data["schema_version"] = 99
    with pytest.raises(ValueError, match="manifest schema version 99.*rivc compile"):
        Manifest.loads(json.dumps(data))


def test_a_job_refuses_a_spec_edited_since_compile(make_project):
    """A generated job reads target/ and re-reads the specs for their secrets: a spec edited in
    between is named, not run half old, half new."""
    from rivc.adapters.run.plan import Plan
    from rivc.compiler.errors import StateError
    from rivc_testing import rivc

    sinks = "sinks:\n  - {name: lake, from: stg, connector: delta, config: {table_uri: out/a}}\n"
    root = make_project({"sinks/out.yml": sinks})
    assert rivc(root, "compile").exit_code == 0
    assert Plan.load(root, env={}).nodes["sink:lake"].sink.connector == "delta"
    (root / "sinks/out.yml").write_text(sinks.replace("out/a", "out/b"))
    with pytest.raises(StateError, match=r"sinks/out.yml: changed since `rivc compile`"):
        Plan.load(root, env={})


def test_a_state_manifest_of_schema_2_names_its_incremental_variant():
    """`--state` reads an earlier compile's manifest as it is: one written before the SQL
    variants had names holds the incremental one as compiled_incremental_path."""
    from rivc.compiler.emit.manifest import compiled_variants

    old = {"compiled_path": "compiled/model/m.sql", "compiled_incremental_path": "m.inc.sql"}
    assert compiled_variants(old) == {"incremental": "m.inc.sql"}
    new = {"compiled_variants": {"incremental": "compiled/model/m.incremental.sql"}}
    assert compiled_variants(new) == new["compiled_variants"]
    assert compiled_variants({"compiled_path": "compiled/model/m.sql"}) == {}


def test_dbts_manifest_of_the_sample_project_is_read_by_dbts_tools():
    """target/manifest.json is dbt's format: dbt-artifacts-parser reads it; the project's sources
    are dbt sources and its sinks exposures, with rivc's facts under meta.rivc."""
    from dbt_artifacts_parser.parser import parse_manifest

    data = json.loads((GOLDEN.parent / "manifest.json").read_text())
    parsed = parse_manifest(data)
    assert parsed.metadata.dbt_schema_version == "https://schemas.getdbt.com/dbt/manifest/v12.json"
    lake = data["exposures"]["exposure.shop.orders_lake"]
    assert lake["depends_on"]["nodes"] == ["model.shop.orders_enriched"]
    assert lake["meta"]["rivc"]["connector"] == "delta"
    assert "source.shop.landing.pageviews" in data["sources"]
    assert data["child_map"]["model.shop.orders_enriched"] == sorted(
        uid
        for uid, parents in data["parent_map"].items()
        if "model.shop.orders_enriched" in parents
    )
