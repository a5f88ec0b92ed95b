"""The base of every spec read from YAML, shared by specs.py and transforms.py."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Spec(BaseModel):
    """Base for everything read from YAML: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _identifier(value: str) -> str:
    if not IDENT.match(value):
        raise ValueError(f"{value!r} is not a valid name (letters, digits and _ only)")
    return value


Name = Annotated[str, Field(min_length=1)]
StrList = tuple[str, ...]


def _as_tuple(value: Any) -> Any:
    return (value,) if isinstance(value, str) else value
