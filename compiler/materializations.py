"""The materializations: one entry each, read by compile and by run (docs/project.md).

An entry says what compile needs to know of a way of building a model (whether `materialized:`
may name it, whether it is a stored table whose versions a downstream sink tracks, whether
rows pass through it batch by batch, whether a Python model may have it, which command builds
it) and names, by import path, the class of the runtime that builds it (for `incremental`, one
per strategy). Compile never imports the runtime: rivc.adapters.models.node_model loads the class.

Adding a materialization is one entry here and one class in adapters/models/
(docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .errors import did_you_mean

_RUN = "rivc.adapters.models"

# The named variants of a model's SQL beside the SQL itself (graph Node.variants, a compiled file
# each, ManifestNode.compiled_variants): a materialization's class runs the one a run needs.
INCREMENTAL = "incremental"  # its is_incremental() variant, for a run that adds to the table


@dataclass(frozen=True, slots=True)
class Materialization:
    name: str
    description: str
    # the class that builds it, "module:Class"; an incremental model's by its strategy
    runtime: str | Mapping[str, str]
    configurable: bool = True  # a model's `materialized:` may name it (a seed's is its kind)
    # a table of the warehouse, committed with a version: a sink below it takes its new
    # versions (it does not pass batches through), `rivc show` reads it without Spark
    stored: bool = False
    # a relation of its own in Spark: False for a model compile inlines (ephemeral)
    relation: bool = True
    python: bool = False  # a Python model may be built so
    command: Literal["run", "seed", "snapshot"] = "run"  # the dbt command that builds it
    strategies: tuple[str, ...] = field(default=())
    # the named variants of its SQL compile renders beside the SQL (INCREMENTAL: the
    # is_incremental() one, for a run that adds to its table)
    variants: tuple[str, ...] = ()
    # ModelConfig keys only it uses: left out of other models' manifest entries
    config_keys: frozenset[str] = frozenset()

    def runtime_of(self, strategy: str | None) -> str:
        """The runtime class of a model of this materialization (and incremental strategy)."""
        if isinstance(self.runtime, str):
            return self.runtime
        return self.runtime[strategy or self.strategies[0]]


MATERIALIZATIONS: dict[str, Materialization] = {
    m.name: m
    for m in (
        Materialization(
            "view",
            "a temporary view of its SQL, computed where it is read",
            f"{_RUN}.materializations:View",
        ),
        Materialization(
            "ephemeral",
            "inlined as a CTE into every model that reads it",
            f"{_RUN}.materializations:Ephemeral",
            relation=False,
        ),
        Materialization(
            "table",
            "a Delta table replaced by its whole result",
            f"{_RUN}.materializations:Table",
            stored=True,
            python=True,
        ),
        Materialization(
            "incremental",
            "a Delta table its new rows are appended to, merged into by unique_key, or replace "
            "the partitions they fall in",
            {
                "append": f"{_RUN}.materializations:Append",
                "merge": f"{_RUN}.materializations:Merge",
                "insert_overwrite": f"{_RUN}.materializations:InsertOverwrite",
                "microbatch": f"{_RUN}.materializations:Microbatch",
            },
            stored=True,
            python=True,
            strategies=("append", "merge", "insert_overwrite", "microbatch"),
            variants=(INCREMENTAL,),
            config_keys=frozenset({"batch_size", "begin", "lookback"}),
        ),
        Materialization(
            "snapshot",
            "dbt's snapshot: a type 2 history of its query's rows",
            f"{_RUN}.snapshot:Snapshot",
            stored=True,
            command="snapshot",
            config_keys=frozenset(
                {
                    "strategy",
                    "updated_at",
                    "check_cols",
                    "hard_deletes",
                    "invalidate_hard_deletes",
                    "target_schema",
                    "target_database",
                }
            ),
        ),
        Materialization(
            "seed",
            "a CSV file loaded as a Delta table",
            f"{_RUN}.materializations:Seed",
            configurable=False,
            stored=True,
            command="seed",
        ),
    )
}

STRATEGIES = tuple(s for m in MATERIALIZATIONS.values() for s in m.strategies)


def foreign_config(name: str) -> frozenset[str]:
    """The ModelConfig keys other materializations than `name` use and it does not."""
    own = MATERIALIZATIONS[name].config_keys if name in MATERIALIZATIONS else frozenset()
    return frozenset(k for m in MATERIALIZATIONS.values() for k in m.config_keys) - own


def materialization(name: str) -> Materialization:
    """The entry of a materialization compile accepted (a KeyError is a bug)."""
    return MATERIALIZATIONS[name]


def of_node(kind: str, config: Mapping[str, object]) -> Materialization:
    """How a node is built: a model by its `materialized:`, a seed as a seed; anything else
    (a source, a sink, a test) is read as a view."""
    if kind == "seed":
        return MATERIALIZATIONS["seed"]
    if kind == "model":
        return MATERIALIZATIONS[str(config.get("materialized", "view"))]
    return MATERIALIZATIONS["view"]


def check_materialized(value: str) -> str:
    """`materialized:` as a model config names it; ValueError lists the known ones."""
    known = [n for n, m in MATERIALIZATIONS.items() if m.configurable]
    if value not in known:
        raise ValueError(
            f"unknown materialization {value!r}{did_you_mean(value, known)} "
            f"(known: {', '.join(known)})"
        )
    return value


def check_strategy(value: str | None) -> str | None:
    """`incremental_strategy:`; ValueError lists the known ones."""
    if value is not None and value not in STRATEGIES:
        raise ValueError(
            f"unknown incremental_strategy {value!r}{did_you_mean(value, list(STRATEGIES))} "
            f"(known: {', '.join(STRATEGIES)})"
        )
    return value
