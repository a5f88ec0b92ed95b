"""rivc.compiler: project files in, compiled Spark SQL and a manifest out. Never imports pyspark.

Names are imported lazily, so the CLI's up-to-date check does not pay for sqlglot and Jinja.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CompileCache": "driver",
    "CompiledProject": "driver",
    "CompileOptions": "driver",
    "analyze": "driver",
    "compile_project": "driver",
    "CompileFailed": "errors",
    "RivcError": "errors",
    "SourceLocation": "errors",
    "find_project_root": "loading.locate",
    "load_project": "loading.project",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(name)
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
