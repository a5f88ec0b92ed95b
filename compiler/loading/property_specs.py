"""Specs of properties YAML (models/*.yml, seeds/*.yml): models', seeds' and columns'
properties, generic tests and their configs, dbt's unit tests (docs/project.md, docs/dbt.md)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from .specbase import Name, Spec, StrList, _as_tuple
from .specs import ModelConfig, Placement

_THRESHOLD = re.compile(r"\s*(==|=|!=|<>|>=|<=|>|<)\s*(\d+)\s*")


class TestConfig(Spec):
    """dbt's test configs: `where` filters the tested relation, `limit` caps the failing rows
    counted, and the failure count is compared with `error_if`/`warn_if` (docs/project.md)."""

    severity: Literal["warn", "error"] = "error"
    where: str | None = None
    limit: int | None = Field(None, ge=0)
    warn_if: str = "!= 0"
    error_if: str = "!= 0"
    enabled: bool = True
    tags: StrList = ()
    meta: dict[str, Any] = {}
    store_failures: bool | None = None  # the failing rows kept in warehouse/dbt_test__audit/
    fail_calc: str = "count(*)"  # the failure count over the failing rows, as dbt computes it
    # accepted and left alone: where dbt would store failures
    store_failures_as: str | None = None
    database: str | None = None
    schema_: str | None = Field(None, alias="schema")
    alias: str | None = None

    _tuple = field_validator("tags", mode="before")(_as_tuple)

    @field_validator("severity", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("warn_if", "error_if")
    @classmethod
    def _threshold(cls, value: str) -> str:
        if not _THRESHOLD.fullmatch(value):
            raise ValueError(f"{value!r} is not a comparison with a number, like '>10' or '!= 0'")
        return value


def failed(count: int, threshold: str) -> bool:
    """Whether `count` failing rows meet a test's `warn_if`/`error_if` (e.g. '>10')."""
    match = _THRESHOLD.fullmatch(threshold)
    assert match is not None  # TestConfig checked it
    op, n = match.group(1), int(match.group(2))
    return {
        "==": count == n,
        "=": count == n,
        "!=": count != n,
        "<>": count != n,
        ">=": count >= n,
        "<=": count <= n,
        ">": count > n,
        "<": count < n,
    }[op]


class NotNullTest(Spec):
    config: TestConfig = TestConfig()


class UniqueTest(Spec):
    config: TestConfig = TestConfig()


class AcceptedValuesTest(Spec):
    values: tuple[str | int | float | bool, ...] = Field(min_length=1)
    quote: bool = True
    config: TestConfig = TestConfig()


class RelationshipsTest(Spec):
    to: str
    field: str
    config: TestConfig = TestConfig()


GENERIC_TESTS: dict[str, type[Spec]] = {
    "not_null": NotNullTest,
    "unique": UniqueTest,
    "accepted_values": AcceptedValuesTest,
    "relationships": RelationshipsTest,
}
TestDef = str | dict[str, dict[str, Any]]


class ColumnSpec(Spec):
    name: Name
    description: str = ""
    data_type: str | None = None
    data_tests: tuple[TestDef, ...] = Field((), alias="tests")
    # dbt's documentation keys: accepted and left alone
    meta: dict[str, Any] = {}
    tags: Any = None
    quote: bool | None = None
    constraints: Any = None
    config: Any = None
    policy_tags: Any = None
    granularity: str | None = None  # a time spine's (dbt's semantic layer)


class ModelVersion(Spec):
    """One version of a versioned model (dbt's `versions:`): the model file `<name>_v<v>`
    unless `defined_in` names another; its description, config, columns and tests on top of
    the model's. Its `columns` are column specs, and `include` / `exclude` of the model's."""

    v: int | float | str
    defined_in: Name | None = None
    description: str | None = None
    config: dict[str, Any] = {}
    columns: tuple[dict[str, Any], ...] = ()
    data_tests: tuple[TestDef, ...] = Field((), alias="tests")
    # dbt's documentation and governance keys: accepted and left alone
    meta: dict[str, Any] = {}
    docs: dict[str, Any] = {}
    access: Literal["private", "protected", "public"] | None = None
    group: str | None = None
    deprecation_date: Any = None
    constraints: Any = None

    @property
    def key(self) -> str:
        """The version as ref(..., v=) names it: 2, 2.0 and "2" are one version."""
        v = self.v
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


class ModelProps(Spec):
    name: Name
    description: str = ""
    config: ModelConfig = ModelConfig()
    columns: tuple[ColumnSpec, ...] = ()
    data_tests: tuple[TestDef, ...] = Field((), alias="tests")  # tests of the whole model
    # dbt's model versions: each version a model of its own (loading/versions.py)
    latest_version: int | float | str | None = None
    versions: tuple[ModelVersion, ...] = ()
    # dbt's documentation, governance and semantic-layer keys: accepted and left alone
    meta: dict[str, Any] = {}
    docs: dict[str, Any] = {}
    access: Literal["private", "protected", "public"] | None = None
    group: str | None = None
    deprecation_date: Any = None
    time_spine: dict[str, Any] | None = None
    constraints: Any = None  # model-level: its `check` ones with an enforced contract


class SeedConfig(Placement):
    """A seed's configuration (docs/seeds.md): `column_types` overrides inferred types."""

    column_types: dict[str, str] = {}
    delimiter: str = ","
    tags: StrList = ()
    enabled: bool = True
    event_time: str | None = None  # what a microbatch model below it filters on

    _tuple = field_validator("tags", mode="before")(_as_tuple)

    @field_validator("delimiter")
    @classmethod
    def _one_character(cls, value: str) -> str:
        if len(value) != 1:
            raise ValueError("delimiter must be one character")
        return value


class SeedProps(Spec):
    name: Name
    description: str = ""
    config: SeedConfig = SeedConfig()
    columns: tuple[ColumnSpec, ...] = ()
    data_tests: tuple[TestDef, ...] = Field((), alias="tests")


class UnitRows(Spec):
    """Rows of a unit test's input or expectation: a list of mappings (`dict`), CSV text
    (`csv`, a header then rows) or a query (`sql`)."""

    input: str | None = None  # given: ref('m'), source('s', 't') or this
    rows: Any = None
    format: Literal["dict", "csv", "sql"] = "dict"
    fixture: str | None = None


class UnitOverrides(Spec):
    vars: dict[str, Any] = {}
    macros: dict[str, Any] = {}  # is_incremental: true
    env_vars: dict[str, str] = {}


class UnitTestConfig(Spec):
    tags: StrList = ()
    enabled: bool = True
    meta: dict[str, Any] = {}

    _tuple = field_validator("tags", mode="before")(_as_tuple)


class UnitTestSpec(Spec):
    """dbt's unit test: a model's query over given rows, compared with the expected rows."""

    name: Name
    model: Name
    description: str = ""
    given: tuple[UnitRows, ...] = ()
    expect: UnitRows
    overrides: UnitOverrides = UnitOverrides()
    config: UnitTestConfig = UnitTestConfig()
    versions: Any = None


class DbtSourceTable(Spec):
    """A table of a dbt source: a table that exists already, read in place (dbt/sources.py)."""

    name: Name
    description: str = ""
    identifier: str | None = None
    external: dict[str, Any] | None = None  # location: and file_format: (or using:)
    columns: tuple[ColumnSpec, ...] = ()
    data_tests: tuple[TestDef, ...] = Field((), alias="tests")
    loaded_at_field: str | None = None  # kept in the manifest for a freshness check
    freshness: Any = None
    # accepted and left alone
    meta: dict[str, Any] = {}
    tags: Any = None
    quoting: Any = None
    config: Any = None
    docs: Any = None


class DbtSource(Spec):
    name: Name
    description: str = ""
    database: str | None = None
    schema_: str | None = Field(None, alias="schema")  # default: the source's name, as dbt's
    tables: tuple[DbtSourceTable, ...] = ()
    loaded_at_field: str | None = None
    freshness: Any = None
    # accepted and left alone
    loader: str = ""
    meta: dict[str, Any] = {}
    tags: Any = None
    quoting: Any = None
    config: Any = None
    overrides: Any = None
    docs: Any = None


class PropertiesFile(Spec):
    version: int | None = None
    models: tuple[ModelProps, ...] = ()
    seeds: tuple[SeedProps, ...] = ()
    sources: tuple[DbtSource, ...] = ()
    # dbt's other resources: read and left alone, so a dbt project's YAML loads as it is
    # (docs/dbt.md says what rivc does with each)
    snapshots: Any = None
    analyses: Any = None
    macros: Any = None
    exposures: Any = None
    metrics: Any = None
    semantic_models: Any = None
    saved_queries: Any = None
    groups: Any = None
    unit_tests: tuple[UnitTestSpec, ...] = ()
