"""dbt's enforced model contracts at run time: the model's DataFrame checked against the
contract compile wrote into the node's config (compiler/nodes/contracts.py) before anything is
written. Its columns and their types are the declared ones (Spark's types, as compile compares
them), and its not_null and check constraints hold: one Spark job counts the rows that break
each, so a broken contract leaves the table as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.nodes.contracts import spark_type
from rivc.compiler.sql import quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def enforce(name: str, df: DataFrame, contract: dict[str, Any]) -> None:
    """Raise, naming every broken column or constraint, when `df` breaks the contract."""
    from pyspark.sql import functions as F

    declared: dict[str, str] = contract.get("columns") or {}
    have = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    broken = [f"{c} is missing" for c in declared if c not in have]
    broken += [f"{c} is not declared" for c in have if c not in declared]
    broken += [
        f"{c} is {have[c]}, declared {t}"
        for c, t in declared.items()
        if c in have and spark_type(have[c]) != spark_type(t)
    ]
    if broken:
        raise ConnectorError(f"model {name!r} breaks its enforced contract: {'; '.join(broken)}")
    nulls: list[str] = contract.get("not_null") or []
    checks: list[str] = contract.get("checks") or []
    if not nulls and not checks:
        return
    counts = [F.sum(F.col(quote(c)).isNull().cast("long")) for c in nulls]
    counts += [F.sum(F.when(~F.expr(e), 1).otherwise(0)) for e in checks]  # NULL passes, as in SQL
    row = df.agg(*counts).first()
    found = [0 if v is None else int(v) for v in (row or ())]
    said = [f"{n} row(s) with {c} NULL (not_null)" for c, n in zip(nulls, found, strict=False) if n]
    said += [
        f"{n} row(s) failing check {e!r}"
        for e, n in zip(checks, found[len(nulls) :], strict=True)
        if n
    ]
    if said:
        raise ConnectorError(
            f"model {name!r} breaks its enforced contract: {'; '.join(said)}; nothing written"
        )
