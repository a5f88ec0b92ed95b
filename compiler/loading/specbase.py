"""The base of every spec read from YAML, shared by specs.py and rendering/transforms.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Spec(BaseModel):
    """Base for everything read from YAML: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

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


def _hook_list(value: Any) -> Any:
    """dbt's hooks: one SQL text, or a list of texts and `{sql: ..., transaction: ...}`."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str | dict) else value
    if not isinstance(items, list | tuple):
        return value  # pydantic says what is wrong
    return tuple(i.get("sql") if isinstance(i, dict) else i for i in items)


# Where tables and files may live: a local path, or a URI of a store the filesystem layer
# (rivc.adapters.util.storage) opens on the rivc process and on Spark's executors alike.
SCHEMES = ("file", "s3", "s3a", "gs", "gcs", "abfss", "abfs", "az")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _location(value: str) -> str:
    m = _SCHEME.match(value)
    if m and m.group(1).lower() not in SCHEMES:
        raise ValueError(
            f"{m.group(1)}:// is not a storage rivc can write; use a local path or "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    if not value.strip():
        raise ValueError("is empty")
    return value


Location = Annotated[str, AfterValidator(_location)]


def is_uri(value: str) -> bool:
    return _SCHEME.match(value) is not None


def locations(spec: BaseModel, at: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every Location a spec holds (nested specs included), with its key path."""
    for name, info in type(spec).model_fields.items():
        value = getattr(spec, name)
        key = (*at, info.alias or name)
        if isinstance(value, BaseModel):
            yield from locations(value, key)
        elif isinstance(value, str) and (
            _is_location(info.annotation) or any(_is_location_meta(m) for m in info.metadata)
        ):
            yield key, value


def _is_location_meta(meta: Any) -> bool:
    return getattr(meta, "func", None) is _location


def _is_location(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        return any(_is_location_meta(m) for m in get_args(annotation)[1:])
    return any(_is_location(a) for a in get_args(annotation))
