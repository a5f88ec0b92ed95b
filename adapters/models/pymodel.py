"""A dbt Python model's DataFrame: its `model(dbt, session)` run in rivc's process with the
project's SparkSession (docs/dbt.md). `dbt.ref` and `dbt.source` read the relations the run has
bound, `dbt.is_incremental` and `dbt.this` are dbt-spark's. An error in the model's code is one
line at its file and line."""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any, cast

from rivc.compiler.emit.manifest import ManifestNode
from rivc.compiler.errors import ConnectorError
from rivc.compiler.rendering.render import source_relation
from rivc.compiler.sql import quote

from ..run.runtime import Runtime

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class _Config:
    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config

    def __call__(self, **kwargs: Any) -> str:
        return ""  # compile read it

    def get(self, key: str, default: Any = None) -> Any:
        return self._config.get(key, default)


class Dbt:
    """The `dbt` argument of a Python model."""

    def __init__(self, rt: Runtime, node: ManifestNode, incremental: bool) -> None:
        self._rt, self._node = rt, node
        self.is_incremental = incremental
        self.this = quote(node.name)
        self.config = _Config(node.config)

    def ref(self, name: str, *more: str, **kwargs: Any) -> DataFrame:
        return self._rt.spark.table(quote(name))

    def source(self, source: str, table: str) -> DataFrame:
        fqn = f"{source}.{table}"
        project = self._rt.plan.project
        seed = project.source_seeds.get(fqn) if fqn not in project.sources else None
        return self._rt.spark.table(quote(seed or source_relation(source, table)))


def python_frame(rt: Runtime, node: ManifestNode, incremental: bool) -> DataFrame:
    code = rt.plan.sql(node.id)
    namespace: dict[str, Any] = {"__name__": f"rivc_model_{node.name}"}
    try:
        exec(compile(code, node.path, "exec"), namespace)  # noqa: S102 (the project's own model)
        df = namespace["model"](Dbt(rt, node, incremental), rt.spark)
    except Exception as exc:  # noqa: BLE001 (the model's error, told at its line)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == node.path]
        line = f":{frames[-1].lineno}" if frames else ""
        raise ConnectorError(
            f"{node.path}{line}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if type(df).__module__.startswith("pandas"):  # dbt-spark takes a pandas frame too
        return rt.spark.createDataFrame(df)
    if not hasattr(df, "schema"):
        raise ConnectorError(f"{node.path}: model() returned {type(df).__name__}, not a DataFrame")
    return cast("DataFrame", df)
