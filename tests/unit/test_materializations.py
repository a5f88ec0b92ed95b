"""The materialization table: compile and run read the same entry of each."""

from __future__ import annotations

import importlib

import pytest

from rivc.compiler.materializations import MATERIALIZATIONS
from rivc_testing import analyze_dir


@pytest.mark.parametrize("name", sorted(MATERIALIZATIONS))
def test_every_entry_names_a_runtime_class_that_builds_and_binds(name):
    entry = MATERIALIZATIONS[name]
    paths = [entry.runtime] if isinstance(entry.runtime, str) else list(entry.runtime.values())
    assert set(entry.strategies) == (
        set() if isinstance(entry.runtime, str) else set(entry.runtime)
    )
    for path in paths:
        module, _, attribute = path.partition(":")
        cls = getattr(importlib.import_module(module), attribute)
        assert callable(cls.build) and callable(cls.bind)


SNAPSHOT = """{% snapshot orders_snapshot %}
{{ config(unique_key='id', strategy='timestamp', updated_at='updated_at') }}
select * from {{ ref('orders') }}
{% endsnapshot %}
"""


@pytest.mark.parametrize(
    "upstream, files",
    [
        ("orders_snapshot", {"snapshots/orders_snapshot.sql": SNAPSHOT}),
        ("orders", {}),
        ("stored", {"models/stored.sql": "{{ config(materialized='table') }}\nselect 1 as id\n"}),
        (
            "grown",
            {"models/grown.sql": "{{ config(materialized='incremental') }}\nselect 1 as id\n"},
        ),
    ],
)
def test_a_sink_tracks_the_stored_node_it_reads_of_every_stored_materialization(
    make_project, upstream, files
):
    """A sink below a stored node (a snapshot, a seed, a table, an incremental model) tracks
    that node's versions, never what the node reads."""
    root = make_project(
        {
            "dbt_project.yml": "name: snap\nprofile: snap\nconfig-version: 2\n",
            "seeds/orders.csv": "id,updated_at\n1,2024-01-01 00:00:00\n",
            "sinks/out.yml": f"sinks:\n  - name: out\n    from: {upstream}\n"
            "    connector: delta\n    config: {table_uri: out, mode: overwrite}\n",
            **files,
        },
        base=False,
    )
    compiled = analyze_dir(root)
    assert not compiled.errors, [str(e) for e in compiled.errors]
    sink = compiled.graph.nodes["sink:out"]
    kind = "seed" if upstream == "orders" else "model"
    assert sink.facts.input.tracked == (f"{kind}:{upstream}",)
