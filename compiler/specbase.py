"""The base of every spec read from YAML, shared by specs.py and transforms.py."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Spec(BaseModel):
    """Base for everything read from YAML: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("*", mode="after")
    @classmethod
    def _int64(cls, value: Any) -> Any:
        """Every integer fits 64 bits, as Spark and the state store hold it."""
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not _I64[0] <= value <= _I64[1]
        ):
            raise ValueError("does not fit a 64-bit integer")
        return value


_I64 = (-(1 << 63), (1 << 63) - 1)


def _identifier(value: str) -> str:
    if not IDENT.match(value):
        raise ValueError(f"{value!r} is not a valid name (letters, digits and _ only)")
    return value


Name = Annotated[str, Field(min_length=1)]
StrList = tuple[str, ...]


def _as_tuple(value: Any) -> Any:
    return (value,) if isinstance(value, str) else value
