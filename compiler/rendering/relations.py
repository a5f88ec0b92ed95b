"""Relations and columns as dbt's macros see them (docs/dbt.md).

`ref()`, `source()` and a generic test's `model` are `Relation`s: they render as the quoted name
rivc's SQL reads, and they are mappings with dbt's metadata, so that packages' checks
(`dbt_utils._is_relation`) pass. `adapter.get_columns_in_relation` answers from what compile
knows, with no warehouse: a seed's inferred columns, a source's declared ones, and a model's
once its own query is resolved (a model that asks for them is rendered again then:
compiler/nodes/models.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import RenderError
from ..sql import quote


class NeedColumns(RenderError):
    """A model's macro asked for the columns of a model not resolved yet: it is rendered again
    once they are (the name is kept in the render's output, `Rendered.needs`)."""


class Relation(Mapping[str, Any]):
    """One relation: `str()` is what SQL reads (a quoted name, or a filtered subquery)."""

    def __init__(
        self,
        name: str,
        kind: str,
        sql: str | None = None,
        schema: str = "default",
        identifier: str | None = None,
    ) -> None:
        """`name`: rivc's name of the relation (what its columns are known by); `schema` and
        `identifier`: dbt's, where compile knows them (a relation information_schema listed)."""
        self.name = name
        self.identifier = self.table = identifier or name
        self.schema = schema
        self.kind = kind  # model, seed, source, ephemeral
        self.sql = sql if sql is not None else quote(name)
        self._data = {
            "metadata": {"type": "SparkRelation"},
            "path": {"database": None, "schema": schema, "identifier": self.identifier},
            "type": "cte" if kind == "ephemeral" else "table",
        }

    database = None

    def __str__(self) -> str:
        return self.sql

    def __repr__(self) -> str:
        return self.sql

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(self.sql)

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other) if isinstance(other, Relation | str) else NotImplemented

    def __add__(self, other: object) -> str:
        return self.sql + str(other)

    def __radd__(self, other: object) -> str:
        return str(other) + self.sql

    @property
    def is_cte(self) -> bool:
        return self.kind == "ephemeral"

    is_table = True
    is_view = False
    type = "table"

    def render(self) -> str:
        return self.sql

    def include(self, *args: Any, **kwargs: Any) -> Relation:
        return self

    incorporate = quote_policy = quote = include


_STRING = re.compile(r"^(string|varchar|char)\b", re.I)
_INTEGER = re.compile(r"^(tinyint|smallint|int|integer|bigint|long|short|byte)$", re.I)
_FLOAT = re.compile(r"^(float|double|real)$", re.I)


class Column:
    """A column as dbt's `adapter.get_columns_in_relation` returns it."""

    def __init__(self, name: str, data_type: str) -> None:
        self.name = self.column = name
        self.data_type = self.dtype = data_type

    def __repr__(self) -> str:
        return f"<Column {self.name} ({self.data_type})>"

    @property
    def quoted(self) -> str:
        return quote(self.name)

    def is_string(self) -> bool:
        return bool(_STRING.match(self.data_type))

    def is_integer(self) -> bool:
        return bool(_INTEGER.match(self.data_type))

    def is_float(self) -> bool:
        return bool(_FLOAT.match(self.data_type))

    def is_numeric(self) -> bool:
        return self.data_type.lower().startswith(("decimal", "numeric"))

    def is_number(self) -> bool:
        return self.is_integer() or self.is_float() or self.is_numeric()

    def string_size(self) -> int:
        m = re.search(r"\((\d+)\)", self.data_type)
        return int(m.group(1)) if m else 2**31 - 1  # Spark's string has no size

    def can_expand_to(self, other: Column) -> bool:
        return self.is_string() and other.is_string() and self.string_size() < other.string_size()

    def literal(self, value: Any) -> str:
        return f"CAST({value} AS {self.data_type})"
