"""Typed specs of everything read from YAML: project, profiles, sources, sinks, properties."""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Literal, NewType, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import CompileFailed, ProjectError, RivcError, did_you_mean
from ..importers.aliases import TRANSFORMS, connector_name
from ..materializations import check_materialized, check_strategy
from ..rendering.transforms import Expectation, Transform
from .secrets import SecretEnv, SecretPathUrl, SecretStr, SecretUrl, StorageOptions, field_mark
from .specbase import Location, Name, Spec, StrList, _as_tuple, _hook_list, _identifier
from .yamlio import YamlDoc, YamlPath

NodeId = NewType("NodeId", str)  # "model:orders", "source:shop.orders", "sink:lake", "test:..."


# --------------------------------------------------------------------------- project


# dbt configs rivc accepts and ignores: rivc keeps a model's table at its warehouse location
# (its name in dbt's terms is `schema`, `alias`, `database`: compiler/dbt/naming.py) and keeps
# no documentation in the table (docs/dbt.md)
IGNORED = frozenset(
    {
        "persist_docs",
        "docs",
        "meta",
        "grants",
        "file_format",
        "location_root",
        "group",
        "access",
        "quote_columns",
        "full_refresh",
        "sql_header",
        "tblproperties",
        "clustered_by",
        "buckets",
        "on_configuration_change",
        "labels",
        "concurrent_batches",  # rivc builds a microbatch model's batches one after another
        "copy_grants",
    }
)


class Contract(Spec):
    """dbt's model contract: enforced, the model's columns and types must be the ones its
    properties declare (checked at compile where the types are known, and before the write),
    and its columns' not_null and check constraints hold (checked before the write)."""

    enforced: bool = False
    alias_types: bool = True
    # what the run checks, filled in by compile from the properties (compiler/nodes/contracts.py)
    columns: dict[str, str] = {}
    not_null: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()


class Placement(Spec):
    """dbt's name of a node's relation, as given (compiler/dbt/naming.py makes the name):
    `schema` and `database` go through generate_schema_name/generate_database_name, `alias`
    through generate_alias_name."""

    model_config = ConfigDict(**Spec.model_config, serialize_by_alias=True)

    schema_: str | None = Field(None, alias="schema")
    alias: str | None = None
    database: str | None = None

    @classmethod
    def keys(cls) -> frozenset[str]:
        """Its keys as written in YAML and config() (`schema`, not `schema_`)."""
        return frozenset(f.alias or name for name, f in cls.model_fields.items())


class ModelConfig(Placement):
    """A model's configuration: project `defaults`, then properties YAML, then `config(...)`."""

    materialized: str = "view"  # a configurable entry of materializations.MATERIALIZATIONS
    unique_key: StrList = ()
    tags: StrList = ()
    incremental_strategy: str | None = None  # one of its materialization's strategies
    partition_by: StrList = ()
    on_schema_change: Literal["ignore", "fail", "append_new_columns", "sync_all_columns"] = "ignore"
    enabled: bool = True
    # snapshots (docs/dbt.md): how a changed row is found, and what a deleted one becomes
    strategy: Literal["timestamp", "check"] | None = None
    updated_at: str | None = None
    check_cols: StrList | Literal["all"] = ()
    hard_deletes: Literal["ignore", "invalidate", "new_record"] = "ignore"
    invalidate_hard_deletes: bool = False
    target_schema: str | None = None  # accepted: rivc names the table by the snapshot
    target_database: str | None = None
    language: Literal["sql", "python"] = "sql"  # python: models/*.py (docs/dbt.md)
    # dbt's hooks: Spark SQL run before and after the model is built (docs/dbt.md)
    pre_hook: tuple[str, ...] = ()
    post_hook: tuple[str, ...] = ()
    contract: Contract | None = None
    # dbt's microbatch (compiler/microbatch.py): the column a row's time is in (a parent's is
    # what a microbatch model below it filters on), and the batches of a microbatch model
    event_time: str | None = None
    batch_size: Literal["hour", "day", "month", "year"] | None = None
    begin: str | None = None  # a date or a timestamp, ISO 8601
    lookback: int = Field(1, ge=0)

    _tuple = field_validator("unique_key", "tags", "partition_by", mode="before")(_as_tuple)
    _hooks = field_validator("pre_hook", "post_hook", mode="before")(_hook_list)
    _materialized = field_validator("materialized")(check_materialized)
    _strategy = field_validator("incremental_strategy")(check_strategy)

    @field_validator("check_cols", mode="before")
    @classmethod
    def _columns(cls, value: Any) -> Any:
        return value if value == "all" else _as_tuple(value)

    @field_validator("begin", mode="before")
    @classmethod
    def _begin(cls, value: Any) -> Any:
        """YAML reads `begin: 2024-01-01` as a date: kept as its ISO text."""
        import datetime

        if isinstance(value, datetime.date):
            return value.isoformat()
        return value

    @model_validator(mode="before")
    @classmethod
    def _dbt_only(cls, value: Any) -> Any:
        """dbt's configs of placement and documentation (IGNORED) are accepted and dropped,
        wherever a config is given (dbt_project.yml, config(), properties YAML)."""
        if not isinstance(value, dict):
            return value
        return {k: v for k, v in value.items() if k not in IGNORED}

    @property
    def merge_strategy(self) -> str:
        """An incremental model's: merge when a unique_key is set, unless another is asked for."""
        return self.incremental_strategy or ("merge" if self.unique_key else "append")


class PathsSpec(Spec):
    models: str = "models"
    sources: str = "sources"
    sinks: str = "sinks"
    macros: str = "macros"
    tests: str = "tests"
    seeds: str = "seeds"
    snapshots: str = "snapshots"
    packages: str = "dbt_packages"  # installed dbt packages (docs/dbt.md)


class DispatchSpec(Spec):
    macro_namespace: str
    search_order: StrList


class LintSpec(Spec):
    disable: StrList = ()


ParamValue = str | bool | int | float | None | Any  # dates stay dates (YAML parses them)


_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str) -> int:
    """'7d' -> 604800 seconds; units s, m, h, d."""
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a duration such as 7d, 12h or 30m")
    return int(m.group(1)) * _SECONDS[m.group(2)]


def _valid_duration(value: str) -> str:
    parse_duration(value)
    return value


class ProjectSpec(Spec):
    name: Name
    version: str | int | float | None = None
    profile: str = "default"
    vars: dict[str, Any] = {}
    params: dict[str, ParamValue] = {}
    paths: PathsSpec = PathsSpec()
    defaults: ModelConfig = ModelConfig()
    # dbt's dispatch search orders: macro namespace -> packages searched, in order
    dispatch: tuple[DispatchSpec, ...] = ()
    # per-folder configs, as dbt_project.yml has them (compiler/loading/folders.py)
    models: dict[str, Any] = {}
    seeds: dict[str, Any] = {}
    snapshots: dict[str, Any] = {}
    lint: LintSpec = LintSpec()
    # what `rivc clean` removes: folders inside the project (dbt's clean-targets)
    clean_targets: StrList = ("target",)
    # how long `rivc maintain` keeps landed batches every consumer took (docs/sources.md)
    landing_retention: str = "7d"
    # dbt's on-run-start / on-run-end: Spark SQL run before and after a run's nodes
    on_run_start: tuple[str, ...] = ()
    on_run_end: tuple[str, ...] = ()

    _retention = field_validator("landing_retention")(_valid_duration)
    _hooks = field_validator("on_run_start", "on_run_end", mode="before")(_hook_list)

    @field_validator("params")
    @classmethod
    def _param_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            _identifier(key)
        return value


# --------------------------------------------------------------------------- profiles


class SparkSpec(Spec):
    master: str | None = None
    remote: str | None = None
    conf: dict[str, str | int | float | bool] = {}
    jars: StrList = ()
    # auto: run, build, test and show start the project's warm server when none runs and reuse
    # it; it stops after `server_idle` without a run (docs/running.md)
    server: Literal["auto"] | None = None
    server_idle: str = "30 minutes"
    # Spark's catalog is a Hive metastore: `thrift://host:9083` (a metastore service), or
    # `embedded` (Derby in .rivc/metastore, one Spark at a time); every stored node is named
    # there as dbt-spark names it (adapters/lake/metastore.py, docs/dbt.md)
    metastore: str | None = None

    @property
    def hive(self) -> bool:
        """Whether Spark's catalog is a Hive metastore: `metastore:`, or the profile's own
        `spark.sql.catalogImplementation: hive`."""
        implementation = str(self.conf.get("spark.sql.catalogImplementation", ""))
        return self.metastore is not None or implementation == "hive"

    @field_validator("metastore")
    @classmethod
    def _metastore(cls, value: str | None) -> str | None:
        if value is not None and value != "embedded" and not value.startswith("thrift://"):
            raise ValueError("metastore is thrift://<host>:<port> or embedded")
        return value

    @field_validator("server_idle")
    @classmethod
    def _idle(cls, value: str) -> str:
        interval_seconds(value)  # refused at its line when it is not an interval
        return value

    @model_validator(mode="after")
    def _one_target(self) -> SparkSpec:
        if self.master and self.remote:
            raise ValueError("set either master or remote, not both")
        return self


class ConnectionSpec(Spec):
    type: Literal["postgres", "mysql"]
    host: str = "127.0.0.1"
    port: int | None = None
    user: str | None = None
    password: SecretStr | None = None
    password_env: SecretEnv | None = None
    url: SecretUrl | None = None  # a JDBC or libpq URL; its password and credentials are secret
    url_env: SecretEnv | None = None
    database: str | None = None
    # TLS, with libpq's names for both databases (docs/sources.md); a url's query string may
    # carry them too (?sslmode=verify-full&sslrootcert=...)
    sslmode: Literal["disable", "prefer", "require", "verify-ca", "verify-full"] | None = None
    sslrootcert: str | None = None  # the CA bundle that signed the server's certificate
    sslcert: str | None = None  # a client certificate (PEM) ...
    sslkey: str | None = None  # ... and its key

    @model_validator(mode="after")
    def _tls(self) -> ConnectionSpec:
        if self.sslmode in ("verify-ca", "verify-full") and not self.sslrootcert:
            raise ValueError(f"sslmode {self.sslmode} needs sslrootcert (the server's CA)")
        if bool(self.sslcert) != bool(self.sslkey):
            raise ValueError("a client certificate needs both sslcert and sslkey")
        return self


class MetricsSpec(Spec):
    """Where each run's node results go for a monitoring system, in Prometheus's text format:
    a file (node_exporter's textfile collector; relative to the project) and/or a Pushgateway."""

    textfile: str | None = None
    pushgateway: SecretUrl | None = (
        None  # its URL; the push goes to /metrics/job/rivc/project/<name>
    )
    # while a run lasts (a stream: until Ctrl-C), GET /metrics on this port of `listen` answers
    # with each sink's totals so far
    port: int | None = Field(None, ge=1, le=65535)
    listen: str = "127.0.0.1"


class OpenLineageSpec(Spec):
    """Where each run's OpenLineage events go: an HTTP endpoint (Marquez's by default) and/or
    a file of JSON lines (relative to the project)."""

    url: SecretUrl | None = None
    endpoint: str = "api/v1/lineage"
    file: str | None = None


class NotifySpec(Spec):
    """A message to a chat webhook after a run, once per run, when it failed (or, with
    `schema_change`, when a node's columns changed): Slack's incoming-webhook format, which
    Mattermost, Rocket.Chat and Teams' Slack-compatible hooks take too."""

    url: SecretPathUrl | None = None  # the hook's path is its secret
    url_env: SecretEnv | None = None  # or the variable that holds it
    on: tuple[Literal["failure", "schema_change"], ...] = ("failure",)

    @model_validator(mode="after")
    def _one_url(self) -> NotifySpec:
        if self.url and self.url_env:
            raise ValueError("set either url or url_env, not both")
        return self


class ProfileSpec(Spec):
    spark: SparkSpec = SparkSpec()
    metrics: MetricsSpec = MetricsSpec()
    openlineage: OpenLineageSpec = OpenLineageSpec()
    notify: NotifySpec = NotifySpec()
    warehouse: Location = "warehouse"
    # credentials and endpoints of the object store (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, ...):
    # rivc's process and Spark's executors get them, on top of the environment's
    storage: StorageOptions = {}
    connections: dict[str, ConnectionSpec] = {}
    # nodes run at once when --threads is not given (dbt's threads)
    threads: PositiveInt | None = None
    # the schema (Spark database) of the project's relations, dbt's `target.schema`
    schema_: Name = Field("default", alias="schema")


# --------------------------------------------------------------------------- sources

TUNING_PROFILES: dict[str, dict[str, int]] = {
    "fast": dict(
        batch_size=50_000,
        throttle_ms=0,
        statement_timeout_s=0,
        max_retries=1,
        retry_backoff_ms=1_000,
        lock_timeout_s=0,
    ),
    "balanced": dict(
        batch_size=10_000,
        throttle_ms=50,
        statement_timeout_s=300,
        max_retries=3,
        retry_backoff_ms=2_000,
        lock_timeout_s=30,
    ),
    "safe": dict(
        batch_size=2_000,
        throttle_ms=500,
        statement_timeout_s=120,
        max_retries=5,
        retry_backoff_ms=5_000,
        lock_timeout_s=10,
    ),
}


class TuningSpec(Spec):
    profile: Literal["fast", "balanced", "safe"] = "balanced"
    batch_size: int | None = Field(None, gt=0)
    throttle_ms: int | None = Field(None, ge=0)
    statement_timeout_s: int | None = Field(None, ge=0)
    max_retries: int | None = Field(None, ge=0)
    retry_backoff_ms: int | None = Field(None, ge=0)
    lock_timeout_s: int | None = Field(None, ge=0)

    def resolved(self) -> dict[str, int]:
        """The profile's defaults with this spec's overrides applied."""
        values = dict(TUNING_PROFILES[self.profile])
        values.update(
            {k: v for k, v in self.model_dump(exclude={"profile"}).items() if v is not None}
        )
        return values


class MetaColumns(Spec):
    exported_at: bool = False
    row_hash: bool = False


class RowCountGate(Spec):
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)
    severity: Literal["warn", "fail"] = "fail"


class NullRatioGate(Spec):
    columns: dict[str, float]  # column -> highest allowed share of NULLs, 0..1
    severity: Literal["warn", "fail"] = "warn"


class UniqueGate(Spec):
    columns: StrList
    severity: Literal["warn", "fail"] = "fail"

    _tuple = field_validator("columns", mode="before")(_as_tuple)


class SourceQuality(Spec):
    """Checks on an extracted batch before anything downstream reads it."""

    row_count: RowCountGate | None = None
    null_ratio_max: NullRatioGate | None = None
    unique_columns: UniqueGate | None = None


class RateLimit(Spec):
    """At most events_per_second rows on average, with burst_capacity rows of slack."""

    events_per_second: float = Field(gt=0)
    burst_capacity: int | None = Field(None, ge=0)  # default: a tenth of a second's worth


class FreshnessAfter(Spec):
    count: int = Field(gt=0)
    period: Literal["minute", "hour", "day"]

    def seconds(self) -> int:
        return self.count * {"minute": 60, "hour": 3600, "day": 86400}[self.period]


class Freshness(Spec):
    """dbt's source freshness: how old the newest row (`loaded_at_field`) or, for a landed
    table without one, the newest extraction may be before `rivc source freshness` warns or
    fails."""

    warn_after: FreshnessAfter | None = None
    error_after: FreshnessAfter | None = None
    filter: str | None = None  # a WHERE condition on the table, as dbt's


class SourceTable(Spec):
    name: Name
    description: str = ""
    table: str | None = None
    query: str | None = None
    mode: Literal["full", "incremental", "chunked", "time_window"] = "full"
    cursor_column: str | None = None
    unique_key: StrList = ()
    chunk_column: str | None = None
    chunk_size: int = Field(100_000, gt=0)
    parallel: int = Field(1, ge=1)
    time_column: str | None = None
    days_window: int | None = Field(None, gt=0)
    columns: dict[str, str] = {}
    config: dict[str, Any] = {}
    skip_empty: bool = False
    meta_columns: MetaColumns = MetaColumns()
    on_schema_change: Literal["warn", "fail"] = "warn"
    quality: SourceQuality = SourceQuality()
    transforms: tuple[Transform, ...] = ()
    rate_limit: RateLimit | None = None  # applied by every sink that reads this table
    loaded_at_field: str | None = None  # for `rivc source freshness`
    freshness: Freshness | None = None

    _tuple = field_validator("unique_key", mode="before")(_as_tuple)
    _name = field_validator("name")(_identifier)

    @model_validator(mode="after")
    def _mode_fields(self) -> SourceTable:
        needs = {
            "incremental": ("cursor_column",),
            "chunked": ("chunk_column",),
            "time_window": ("time_column", "days_window"),
        }
        for field in needs.get(self.mode, ()):
            if getattr(self, field) is None:
                raise ValueError(f"mode {self.mode} needs {field}")
        if self.table and self.query:
            raise ValueError("set either table or query, not both")
        return self


class SourceSpec(Spec):
    name: Name
    connector: str
    connection: str | None = None
    description: str = ""
    tuning: TuningSpec = TuningSpec()
    config: dict[str, Any] = {}  # a change-log source's settings (one slot for its tables)
    loaded_at_field: str | None = None  # its tables' default, as dbt's
    freshness: Freshness | None = None
    tables: tuple[SourceTable, ...] = Field(min_length=1)

    _name = field_validator("name")(_identifier)


class SourcesFile(Spec):
    sources: tuple[SourceSpec, ...] = ()


# --------------------------------------------------------------------------- sinks


_INTERVAL = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$",
    re.IGNORECASE,
)


def interval_seconds(value: str) -> float:
    """A trigger interval as Spark writes it ('5 seconds', '500 milliseconds', '1 minute')."""
    m = _INTERVAL.match(value)
    if not m:
        raise ValueError(f"{value!r} is not an interval such as '5 seconds' or '1 minute'")
    unit = m.group(2).lower()
    if unit == "ms" or unit.startswith("milli"):
        scale = 0.001
    elif unit.startswith("h"):
        scale = 3600.0
    elif unit.startswith("m"):
        scale = 60.0
    else:
        scale = 1.0
    return float(m.group(1)) * scale


class ProcessingTime(Spec):
    processing_time: str


def _trigger(value: Any) -> Any:
    """A processing_time that Spark would not read is refused here, by its own message (the
    union would say only which words it takes)."""
    if isinstance(value, dict) and isinstance(value.get("processing_time"), str):
        interval_seconds(value["processing_time"])
    return value


class SinkRetry(Spec):
    """Retries of a batch write that failed with a transient error, then the failure budget."""

    max_attempts: int = Field(3, ge=1)
    backoff_ms: int = Field(200, ge=0)
    max_backoff_ms: int = Field(10_000, ge=0)
    jitter: bool = True
    max_consecutive_failures: int = Field(3, ge=1)


class StreamRestart(Spec):
    """A stream that runs until stopped (`processing_time`) and fails is started again from its
    checkpoint after a backoff that doubles from backoff_ms to max_backoff_ms (back to
    backoff_ms once a restarted stream commits a batch); max_restarts in a row, then it stops."""

    backoff_ms: int = Field(1_000, ge=0)
    max_backoff_ms: int = Field(60_000, ge=0)
    max_restarts: int | None = Field(None, ge=0)  # None: no limit


class InlineSink(Spec):
    """A sink written only through another sink (a dead letter), declared in place."""

    connector: str
    config: dict[str, Any] = {}

    _connector = field_validator("connector")(connector_name)


class SinkSpec(Spec):
    name: Name
    from_: str | None = Field(None, alias="from")  # unset: written only by a route or dead_letter
    connector: str
    description: str = ""
    tags: StrList = ()
    config: dict[str, Any] = {}
    trigger: Literal["available_now", "once"] | ProcessingTime = "available_now"
    transforms: tuple[Transform, ...] = ()
    quality: tuple[Expectation, ...] = ()
    dead_letter: str | InlineSink | None = None
    retry: SinkRetry = SinkRetry()
    restart: StreamRestart = StreamRestart()
    rate_limit: RateLimit | None = None
    health_check: bool = True
    shared: bool = False  # the sink's table may be written by other projects or checkouts too

    _tuple = field_validator("tags", mode="before")(_as_tuple)
    _name = field_validator("name")(_identifier)
    _connector = field_validator("connector")(connector_name)
    _trigger = field_validator("trigger", mode="before")(_trigger)

    @property
    def targets(self) -> dict[str, str]:
        """Other sinks this one writes to: name -> why (route or dead_letter)."""
        out: dict[str, str] = {}
        for t in self.transforms:
            if t.type == "route":
                for target in (*t.routes.values(), t.default):
                    if target:
                        out[target] = "route"
        if isinstance(self.dead_letter, str):
            out[self.dead_letter] = "dead_letter"
        elif self.dead_letter is not None:
            out[dead_letter_name(self.name)] = "dead_letter"
        return out


def dead_letter_name(sink: str) -> str:
    return f"{sink}__dead_letter"


class SinksFile(Spec):
    sinks: tuple[SinkSpec, ...] = ()


# --------------------------------------------------------------------------- validation


def validate_doc(cls: type[Spec], doc: YamlDoc, at: YamlPath = (), data: Any = None) -> Any:
    """Validate `data` (default: the whole document) as `cls`; errors name file:line and key."""
    value = doc.data if data is None else data
    if value is None:
        value = {}
    try:
        return cls.model_validate(value)
    except ValidationError as exc:
        raise spec_error(cls, exc, doc, at) from None


def spec_error(cls: type[Spec], exc: ValidationError, doc: YamlDoc, at: YamlPath) -> RivcError:
    """Every unknown key, else pydantic's first error, as one clear line each; never echo a
    secret value. A misspelt key also makes the real one "missing": the misspelling explains
    both, so unknown keys come first."""
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if len(unknown) > 1:
        return CompileFailed([_one_error(cls, e, doc, at) for e in unknown])
    return _one_error(cls, (unknown or errors)[0], doc, at)


def _one_error(cls: type[Spec], err: Any, doc: YamlDoc, at: YamlPath) -> ProjectError:
    loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
    path = (*at, *loc)
    key = ".".join(str(p) for p in path) or "(top level)"
    etype = err["type"]
    last = str(loc[-1]) if loc else ""
    if etype == "extra_forbidden":
        fields = _fields_at(cls, loc[:-1])
        message = f"unknown key {key!r}{did_you_mean(last, fields)}"
    elif etype == "missing":
        message = f"missing required key {key!r}"
    elif etype == "union_tag_invalid" and err["ctx"]["tag"] in TRANSFORMS:
        tag = err["ctx"]["tag"]
        message = (
            f"transform type {tag!r} is Rivven's: rivc's is {TRANSFORMS[tag]}, with its "
            "settings beside type (no config: block)"
        )
    else:
        detail = err["msg"].removeprefix("Value error, ")
        # a secret field's value is never echoed; nor a profile's: a value in the wrong key
        # may be one
        hidden = _secret_at(cls, loc) or "connections" in path or doc.path.name == "profiles.yml"
        shown = (
            ""
            if hidden or isinstance(err.get("input"), dict | list)
            else (f" (got {err.get('input')!r})")
        )
        message = f"invalid value for {key!r}: {detail}{shown}"
    return ProjectError(message, doc.location(path))


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool"})


def _secret_at(cls: Any, loc: tuple[Any, ...]) -> bool:
    """Whether the field `loc` reaches is declared secret (compiler/loading/secrets.py), or lies in
    one (a key of a secret map)."""
    for depth in range(1, len(loc) + 1):
        name = loc[depth - 1]
        for model in _models_at(cls, loc[: depth - 1]):
            if isinstance(name, str) and field_mark(model, name) is not None:
                return True
    return False


def _fields_at(cls: Any, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the spec class reached by following `loc` from `cls` (best effort)."""
    names: list[str] = []
    for model in _models_at(cls, loc):
        names += [f.alias or n for n, f in model.model_fields.items()]
    return names


def _models_at(cls: Any, loc: tuple[Any, ...]) -> list[type[BaseModel]]:
    """The spec classes reached by following `loc` from `cls` (best effort)."""
    candidates: list[Any] = [cls]
    for part in loc:
        nxt: list[Any] = []
        for c in candidates:
            for t in _unwrap(c):
                if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
                    info = t.model_fields.get(part) or next(
                        (f for f in t.model_fields.values() if f.alias == part), None
                    )
                    if info is not None:
                        nxt.append(info.annotation)
                elif typing.get_origin(t) in (list, tuple, dict):
                    nxt.append(typing.get_args(t)[-1 if typing.get_origin(t) is dict else 0])
        candidates = nxt
    return [
        t
        for c in candidates
        for t in _unwrap(c)
        if isinstance(t, type) and issubclass(t, BaseModel)
    ]


def _unwrap(t: Any) -> list[Any]:
    origin = typing.get_origin(t)
    if origin is Annotated:
        return _unwrap(typing.get_args(t)[0])
    if origin in (Union, types.UnionType):
        return [u for a in typing.get_args(t) for u in _unwrap(a)]
    return [t]
