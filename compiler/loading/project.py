"""Find a project, read its files and turn them into typed specs (the only place raw dicts live)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..connector import ConnectorInfo, SinkConfig
from ..dbt.packages import Installed, check_installed, installed
from ..dbt.project import DBT_ONLY, dbt_project_spec, snapshot_blocks
from ..dbt.sources import DbtTable, dbt_tables
from ..dbtypes import declared_type
from ..errors import CompileFailed, ProjectError, RivcError, SourceLocation, did_you_mean
from ..importers.aliases import translate
from ..importers.migrate import refuse_foreign
from ..payload import Carries
from ..payload import check as check_payload
from ..registry import connector, unknown
from ..rendering.sandbox import SECRET_ENV_PREFIX
from .defs import Located, SinkDef, SourceTableDef, SqlFile
from .folders import check_tree
from .locate import (
    MAX_SEED_BYTES,
    PROJECT_FILE,
    TARGET_ENV,
    list_project_files,
    project_file,
    read_project_file,
)
from .profiles import URI_HINT, check_connection, load_profile, remote_spark
from .property_specs import ModelProps, PropertiesFile, SeedProps, UnitTestSpec
from .secrets import MASK, secret_values
from .specbase import IDENT, Spec, is_uri, locations
from .specs import (
    InlineSink,
    ProfileSpec,
    ProjectSpec,
    SinksFile,
    SinkSpec,
    SourcesFile,
    SourceSpec,
    SourceTable,
    dead_letter_name,
    validate_doc,
)
from .versions import Versions, expand, rename
from .yamlio import AnyEnv, YamlDoc, YamlPath, load_yaml

__all__ = ["Located", "Project", "SinkDef", "SourceTableDef", "SqlFile", "load_project"]


@dataclass(frozen=True, slots=True)
class Project:
    root: Path
    spec: ProjectSpec
    profile: ProfileSpec
    profile_path: Path | None
    sources: dict[str, SourceTableDef]  # "shop.orders" -> table
    sinks: dict[str, SinkDef]
    models: dict[str, SqlFile]
    properties: dict[str, tuple[ModelProps, Located]]
    macros: tuple[SqlFile, ...]
    tests: dict[str, SqlFile]
    env_used: dict[str, str | None] = field(default_factory=dict)
    target: str = "default"  # the profile output in use (--target, $RIVC_TARGET)

    @property
    def target_context(self) -> dict[str, Any]:
        """dbt's `target`, as templates and dbt_project.yml see it."""
        return {
            "name": self.target,
            "profile_name": self.spec.profile,
            "type": "spark",
            "schema": self.profile.schema_,
            "database": None,  # dbt-spark has no databases above schemas
            "threads": 1,
        }

    seeds: dict[str, SqlFile] = field(default_factory=dict)  # seeds/*.csv, by file stem
    seed_properties: dict[str, tuple[SeedProps, Located]] = field(default_factory=dict)
    not_run: tuple[ProjectError, ...] = ()  # dbt resources read and not run (RV012)
    unit_tests: tuple[tuple[UnitTestSpec, Located], ...] = ()  # dbt's unit_tests:
    packages: tuple[Installed, ...] = ()  # installed dbt packages (compiler/dbt/packages.py)
    source_seeds: dict[str, str] = field(default_factory=dict)  # dbt source -> its seed
    dbt_sources: dict[str, DbtTable] = field(default_factory=dict)  # "ecom.orders" -> table
    snapshots: frozenset[str] = frozenset()  # models read from snapshots/ (dbt snapshots)
    python_models: dict[str, SqlFile] = field(default_factory=dict)  # models/**/*.py
    fixtures: dict[str, SqlFile] = field(default_factory=dict)  # tests/fixtures/*.csv, *.sql
    versions: dict[str, Versions] = field(default_factory=dict)  # versioned model -> versions

    @property
    def name(self) -> str:
        return self.spec.name


def load_project_spec(root: Path, env: Mapping[str, str]) -> tuple[ProjectSpec, YamlDoc]:
    """rivc_project.yml, else a dbt project's dbt_project.yml (compiler/dbt/project.py)."""
    rel = project_file(root)
    doc = load_yaml(root, rel, env)
    if not isinstance(doc.data, dict):
        raise ProjectError(f"{rel} must be a mapping", doc.location(()))
    spec: ProjectSpec = (
        validate_doc(ProjectSpec, doc) if rel.name == PROJECT_FILE else dbt_project_spec(doc, env)
    )
    for kind in ("models", "seeds", "snapshots"):
        check_tree(doc, kind, getattr(spec, kind))
    return spec, doc


def _local_paths(
    far: str, sources: dict[str, SourceTableDef], sinks: dict[str, SinkDef]
) -> list[RivcError]:
    """With a remote Spark, every data location a source or sink names must be a URI."""
    errors: list[RivcError] = []
    defs: list[tuple[str, Spec, Located]] = [
        *((f"source {k}", d.config, d.where) for k, d in sources.items()),
        *((f"sink {k}", d.config, d.where) for k, d in sinks.items()),
    ]
    for what, config, where in defs:
        for key, value in locations(config):
            if not is_uri(value):
                errors.append(
                    ProjectError(
                        f"{what}: {'.'.join(key)} {value!r} is a path on this machine, which "
                        f"{far} cannot reach; {URI_HINT}",
                        where.location("config", *key),
                    )
                )
    return errors


def load_project(root: Path, env: Mapping[str, str] | None = None) -> Project:
    """Read every project file into typed specs; collect all spec errors, then raise them together."""
    env = os.environ if env is None else env
    spec, project_doc = load_project_spec(root, env)
    env_used = dict(project_doc.env_used)
    env_used[TARGET_ENV] = env.get(TARGET_ENV)
    profile, profile_path, target = load_profile(root, spec.profile, env, env_used)
    files = list_project_files(root, spec.paths.model_dump())
    errors: list[RivcError] = []

    def attempt(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except RivcError as exc:  # a CompileFailed's errors are kept one by one
            errors.append(exc)
            return None

    p = spec.paths
    sources: dict[str, SourceTableDef] = {}
    sinks: dict[str, SinkDef] = {}
    models: dict[str, SqlFile] = {}
    properties: dict[str, tuple[ModelProps, Located]] = {}
    seeds: dict[str, SqlFile] = {}
    seed_properties: dict[str, tuple[SeedProps, Located]] = {}
    snapshots: set[str] = set()  # models that are dbt snapshots (materialized: snapshot)
    python_models: dict[str, SqlFile] = {}  # models/**/*.py: dbt's Python models
    yaml_snapshots: dict[str, SqlFile] = {}  # snapshots: with relation: in properties YAML
    not_run: list[ProjectError] = []
    unit_tests: list[tuple[UnitTestSpec, Located]] = []
    dbt_sources: list[DbtTable] = []  # dbt's sources: in properties YAML
    macros: list[SqlFile] = []
    tests: dict[str, SqlFile] = {}
    fixtures: dict[str, SqlFile] = {}  # tests/fixtures/: unit tests' rows (dbt's fixture:)
    versions: dict[str, Versions] = {}  # dbt's versioned models (loading/versions.py)
    for rel in files:
        top = rel.parts[0]
        if (
            rel.suffix in (".yml", ".yaml")
            and top in (p.sources, p.sinks, p.models, p.seeds, p.snapshots)
            and len(rel.parts) > 1
        ):
            kind = {p.sources: "sources", p.sinks: "sinks"}.get(top)
            doc = attempt(_load_spec_file, root, rel, env, kind)
            if doc is None:
                continue
            env_used.update(doc.env_used)
            if top == p.sources:
                attempt(_add_sources, root, doc, profile, profile_path, sources)
            elif top == p.sinks:
                attempt(_add_sinks, doc, profile, profile_path, sinks)
            else:
                attempt(
                    _add_properties,
                    doc,
                    properties,
                    seed_properties,
                    not_run,
                    dbt_sources,
                    unit_tests,
                    yaml_snapshots,
                    versions,
                )
        elif rel.suffix == ".py" and top == p.models and len(rel.parts) > 1:
            if rel.stem in models or rel.stem in python_models or not IDENT.match(rel.stem):
                errors.append(
                    ProjectError(
                        f"python model {rel.stem!r}: another model has its name, or it is not "
                        "letters, digits and _",
                        SourceLocation(rel),
                    )
                )
            else:
                python_models[rel.stem] = SqlFile(rel.stem, rel, read_project_file(root, rel))
        elif rel.suffix == ".csv" and top == p.seeds and len(rel.parts) > 1:
            text = read_project_file(root, rel, MAX_SEED_BYTES)
            if not IDENT.match(rel.stem):
                errors.append(
                    ProjectError(
                        f"{rel.stem!r} is not a valid seed name: a file name is the seed's "
                        "name, so use letters, digits and _ only",
                        SourceLocation(rel),
                    )
                )
            elif rel.stem in seeds:
                errors.append(
                    ProjectError(
                        f"seed {rel.stem!r} is also defined in {seeds[rel.stem].path}",
                        SourceLocation(rel),
                    )
                )
            else:
                seeds[rel.stem] = SqlFile(rel.stem, rel, text)
        elif rel.suffix in (".csv", ".sql") and top == p.tests and "fixtures" in rel.parts[1:-1]:
            fixtures[rel.stem] = SqlFile(rel.stem, rel, read_project_file(root, rel))
        elif rel.suffix == ".sql" and top == p.snapshots and len(rel.parts) > 1:
            for name, body in snapshot_blocks(read_project_file(root, rel)):
                if name in models:
                    errors.append(
                        ProjectError(
                            f"snapshot {name!r} is also defined in {models[name].path}",
                            SourceLocation(rel),
                        )
                    )
                models[name] = SqlFile(name, rel, body)
                snapshots.add(name)
        elif rel.suffix == ".sql" and len(rel.parts) > 1:
            text = read_project_file(root, rel)
            sql = SqlFile(rel.stem, rel, text)
            if top in (p.models, p.tests) and not IDENT.match(rel.stem):
                errors.append(
                    ProjectError(
                        f"{rel.stem!r} is not a valid model or test name: a file name is the "
                        "node's name, so use letters, digits and _ only",
                        SourceLocation(rel),
                    )
                )
                continue
            if top == p.models:
                if rel.stem in models:
                    errors.append(
                        ProjectError(
                            f"model {rel.stem!r} is also defined in {models[rel.stem].path}",
                            SourceLocation(rel),
                        )
                    )
                models[rel.stem] = sql
            elif top == p.macros or (top == p.tests and rel.parts[1:2] == ("generic",)):
                macros.append(sql)  # tests/generic/ holds {% test %} blocks, as in dbt
            elif top == p.tests:
                tests[rel.stem] = sql
    for name, snapshot in yaml_snapshots.items():
        if name in models:
            errors.append(ProjectError(f"snapshot {name!r} is also defined in {models[name].path}"))
        models[name] = snapshot
        snapshots.add(name)
    for name, model in python_models.items():
        if name in models:
            errors.append(
                ProjectError(
                    f"python model {name!r} is also defined in {models[name].path}",
                    SourceLocation(model.path),
                )
            )
    for name, seed in seeds.items():
        if name in models:
            errors.append(
                ProjectError(
                    f"seed {name!r} has the name of model {name!r} ({models[name].path}): "
                    "ref() would not know which one",
                    SourceLocation(seed.path),
                )
            )
    errors += rename(models, versions)
    # a dbt project's properties for a node it does not have: dbt's warning, one RV012 note;
    # in rivc's own format, an error (most often a misspelt name)
    unmatched = errors if project_doc.path.name == PROJECT_FILE else not_run
    for name, (_, where) in seed_properties.items():
        if name not in seeds:
            unmatched.append(
                ProjectError(
                    f"properties for unknown seed {name!r}{did_you_mean(name, seeds)}",
                    where.location("name"),
                )
            )
    for name, (_, where) in properties.items():
        if name not in models and name not in python_models:
            unmatched.append(
                ProjectError(
                    f"properties for unknown model {name!r}{did_you_mean(name, models)}",
                    where.location("name"),
                )
            )
    source_seeds = attempt(_add_dbt_sources, dbt_sources, sources, set(seeds)) or {}
    found = attempt(installed, root, p.packages) or []
    attempt(check_installed, root, p.packages, found)
    far = remote_spark(profile, env)
    if far:
        errors += _local_paths(far, sources, sinks)
    if errors:
        raise CompileFailed(errors)
    return Project(
        root,
        spec,
        profile,
        profile_path,
        sources,
        sinks,
        models,
        properties,
        tuple(macros),
        tests,
        env_used,
        target,
        seeds,
        seed_properties,
        tuple(not_run),
        tuple(unit_tests),
        tuple(found),
        source_seeds,
        {t.fqn: t for t in dbt_sources},
        frozenset(snapshots),
        python_models,
        fixtures,
        versions,
    )


def _config(
    info: ConnectorInfo, kind: str, connector: str, doc: YamlDoc, at: YamlPath, data: Any
) -> Spec:
    """A connector's config, with the names of the systems rivc replaces translated first
    (compiler/importers/aliases.py); every refusal and unknown key is reported at once."""
    data, refusals = translate(info.aliases, data)
    errors: list[RivcError] = [
        ProjectError(message, doc.location((*at, *key))) for key, message in refusals
    ]
    try:
        config: Spec = validate_doc(info.config, doc, at, data)
    except RivcError as exc:
        errors.append(exc)
    if errors:
        raise CompileFailed(errors)
    return config


def _each(items: Any, add: Any) -> None:
    """Call add(i, item) for each item, reporting every item's errors together."""
    errors: list[RivcError] = []
    for i, item in enumerate(items):
        try:
            add(i, item)
        except RivcError as exc:
            errors.append(exc)
    if errors:
        raise CompileFailed(errors)


def _load_spec_file(root: Path, rel: Path, env: Mapping[str, str], kind: str | None) -> YamlDoc:
    """A YAML file of the project; a Rivet or Rivven file in sources/ or sinks/ is refused as
    one before any ${VAR} of it is missed."""
    try:
        return load_yaml(root, rel, env)
    except ProjectError:
        if kind is not None:
            refuse_foreign(load_yaml(root, rel, AnyEnv()), kind)
        raise


def _add_sources(
    root: Path,
    doc: YamlDoc,
    profile: ProfileSpec,
    profile_path: Path | None,
    out: dict[str, SourceTableDef],
) -> None:
    refuse_foreign(doc, "sources")
    parsed: SourcesFile = validate_doc(SourcesFile, doc)
    _each(
        parsed.sources,
        lambda i, source: _add_source(root, doc, profile, profile_path, out, i, source),
    )


def _add_source(
    root: Path,
    doc: YamlDoc,
    profile: ProfileSpec,
    profile_path: Path | None,
    out: dict[str, SourceTableDef],
    i: int,
    source: SourceSpec,
) -> None:
    at: YamlPath = ("sources", i)
    info = connector("source", source.connector)
    if info is None:
        raise ProjectError(unknown("source", source.connector), doc.location((*at, "connector")))
    if source.config and not info.log:
        raise ProjectError(
            f"source {source.name!r}: config on a source is for change-log connectors "
            "(postgres-cdc, mysql-cdc); a table's settings go under the table's config",
            doc.location((*at, "config")),
        )
    log_config = (
        _config(info, "source", source.connector, doc, (*at, "config"), source.config)
        if info.log
        else None
    )
    if info.database is not None:  # read through a profile connection of its database
        if not source.connection:
            raise ProjectError(
                f"source {source.name!r}: connector {source.connector} needs connection",
                doc.location((*at, "connector")),
            )
        where: YamlPath = (*at, "connection")
        check_connection(profile, profile_path, source.connection, info.database, doc, where)

    def add_table(j: int, table: SourceTable) -> None:
        tat: YamlPath = (*at, "tables", j)
        if info.relational and not (table.table or table.query):
            raise ProjectError(
                f"source table {source.name}.{table.name} needs table or query",
                doc.location((*tat, "name")),
            )
        if info.log:
            _check_log_table(source, table, doc, tat)
        if info.relational or info.log:  # declared types are applied at extraction (types.md)
            for column, kind in table.columns.items():
                try:
                    declared_type(kind)
                except ValueError as exc:
                    raise ProjectError(
                        f"columns.{column}: {exc}", doc.location((*tat, "columns", column))
                    ) from exc
        if not info.relational and not info.log:
            for key in ("table", "query", "cursor_column", "chunk_column", "time_column"):
                if getattr(table, key):
                    raise ProjectError(
                        f"{key} is for postgres and mysql sources; "
                        f"{source.connector} takes its settings under config",
                        doc.location((*tat, key)),
                    )
        config = log_config or _config(
            info, "source", source.connector, doc, (*tat, "config"), table.config
        )
        if info.category == "stream" and not table.columns:
            raise ProjectError(
                f"source table {source.name}.{table.name}: {source.connector} needs columns: "
                "(the payload's fields and their Spark SQL types)",
                doc.location((*tat, "name")),
            )
        if isinstance(config, Carries):
            try:
                check_payload(config.payload, table.columns, root)
            except ValueError as exc:
                raise ProjectError(
                    f"payload: {exc}", doc.location((*tat, "config", "payload"))
                ) from None
        fqn = f"{source.name}.{table.name}"
        if fqn in out:
            raise ProjectError(
                f"source table {fqn!r} is defined twice", doc.location((*tat, "name"))
            )
        given = table.freshness or source.freshness
        freshness = None
        if given is not None:
            freshness = {
                "loaded_at_field": table.loaded_at_field or source.loaded_at_field,
                "freshness": given.model_dump(mode="json"),
            }
        out[fqn] = SourceTableDef(source, table, info, config, Located(doc, tat), freshness)

    _each(source.tables, add_table)


def _check_log_table(source: SourceSpec, table: SourceTable, doc: YamlDoc, at: YamlPath) -> None:
    """A change-log source's table names its database table, and nothing of the query modes."""
    fqn = f"{source.name}.{table.name}"
    for key in ("query", "cursor_column", "chunk_column", "time_column", "config"):
        if getattr(table, key):
            raise ProjectError(
                f"{key} is not for {source.connector}: it reads every change of its table "
                "from the log (its settings go under the source's config)",
                doc.location((*at, key)),
            )
    if table.mode != "full":
        raise ProjectError(
            f"mode is not for {source.connector}: it reads every change of its table from the log",
            doc.location((*at, "mode")),
        )
    if not table.table:
        raise ProjectError(
            f"source table {fqn} needs table: (schema.table in the database)",
            doc.location((*at, "name")),
        )


def _add_sinks(
    doc: YamlDoc, profile: ProfileSpec, profile_path: Path | None, out: dict[str, SinkDef]
) -> None:
    refuse_foreign(doc, "sinks")
    parsed: SinksFile = validate_doc(SinksFile, doc)
    _each(parsed.sinks, lambda i, sink: _add_sink(doc, profile, profile_path, out, i, sink))


def _add_sink(
    doc: YamlDoc,
    profile: ProfileSpec,
    profile_path: Path | None,
    out: dict[str, SinkDef],
    i: int,
    sink: SinkSpec,
) -> None:
    at: YamlPath = ("sinks", i)
    info = _sink_connector(sink.connector, doc, (*at, "connector"))
    if sink.name in out:
        raise ProjectError(f"sink {sink.name!r} is defined twice", doc.location((*at, "name")))
    config = _config(info, "sink", sink.connector, doc, (*at, "config"), sink.config)
    connection = config.connection_name() if isinstance(config, SinkConfig) else None
    if info.database is not None and connection is not None:  # a database sink's
        where: YamlPath = (*at, "config", "connection")
        check_connection(profile, profile_path, connection, info.database, doc, where)
    out[sink.name] = SinkDef(sink, info, config, Located(doc, at))
    if isinstance(sink.dead_letter, InlineSink):
        dat: YamlPath = (*at, "dead_letter")
        name = dead_letter_name(sink.name)
        info = _sink_connector(sink.dead_letter.connector, doc, (*dat, "connector"))
        config = _config(
            info,
            "sink",
            sink.dead_letter.connector,
            doc,
            (*dat, "config"),
            sink.dead_letter.config,
        )
        spec = SinkSpec.model_validate({"name": name, "connector": sink.dead_letter.connector})
        out[name] = SinkDef(spec, info, config, Located(doc, dat))


def _add_dbt_sources(
    tables: list[DbtTable], sources: dict[str, SourceTableDef], seeds: set[str]
) -> dict[str, str]:
    """dbt's source tables (compiler/dbt/sources.py): the seed of the same name is read for one
    without `external`; any other becomes a source table read in place. A table sources/*.yml
    declares is rivc's own. Returns the dbt source tables seeds stand for."""
    own, seen = set(sources), set()
    out: dict[str, str] = {}
    errors: list[RivcError] = []
    for t in tables:
        if t.fqn in seen:
            errors.append(
                ProjectError(
                    f"dbt source table {t.fqn!r} is defined twice", t.doc.location((*t.at, "name"))
                )
            )
        seen.add(t.fqn)
        if t.fqn in own:
            continue
        if not t.table.external and t.identifier in seeds:
            out[t.fqn] = t.identifier
            continue
        try:
            data, where = t.as_source()
            spec = SourceSpec.model_validate(data)
            info = connector("source", spec.connector)
            assert info is not None
            config = _config(info, "source", spec.connector, t.doc, where, spec.tables[0].config)
            sources[t.fqn] = SourceTableDef(
                spec,
                spec.tables[0],
                info,
                config,
                Located(t.doc, t.at),
                t.freshness(),
                t.event_time(),
            )
        except RivcError as exc:
            errors.append(exc)
    if errors:
        raise CompileFailed(errors)
    return out


def _sink_connector(name: str, doc: YamlDoc, at: YamlPath) -> ConnectorInfo:
    info = connector("sink", name)
    if info is None:
        raise ProjectError(unknown("sink", name), doc.location(at))
    return info


def _add_properties(
    doc: YamlDoc,
    out: dict[str, tuple[ModelProps, Located]],
    seeds: dict[str, tuple[SeedProps, Located]],
    not_run: list[ProjectError],
    dbt_sources: list[DbtTable],
    unit_tests: list[tuple[UnitTestSpec, Located]],
    yaml_snapshots: dict[str, SqlFile],
    versions: dict[str, Versions],
) -> None:
    parsed: PropertiesFile = validate_doc(PropertiesFile, doc)
    for i, entry in enumerate(parsed.snapshots or ()):  # properties of snapshots, or YAML ones
        data = {k: v for k, v in (entry or {}).items() if k != "relation"}
        props: ModelProps = validate_doc(ModelProps, doc, ("snapshots", i), data)
        out[props.name] = (props, Located(doc, ("snapshots", i)))
        relation = (entry or {}).get("relation")
        if relation:  # dbt 1.9's snapshot of a relation
            line = doc.location(("snapshots", i, "relation")).line or 1
            sql = "\n" * (line - 1) + f"select * from {{{{ {relation} }}}}\n"
            yaml_snapshots[props.name] = SqlFile(props.name, doc.path, sql)
    unit_tests += [(u, Located(doc, ("unit_tests", i))) for i, u in enumerate(parsed.unit_tests)]
    for key in DBT_ONLY:
        if getattr(parsed, key):
            not_run.append(ProjectError(f"{key}: {DBT_ONLY[key]}", doc.location((key,))))
    dbt_sources += dbt_tables(doc, parsed.sources)
    for i, seed in enumerate(parsed.seeds):
        if seed.name in seeds:
            raise ProjectError(
                f"properties for seed {seed.name!r} are given twice",
                doc.location(("seeds", i, "name")),
            )
        seeds[seed.name] = (seed, Located(doc, ("seeds", i)))
    for i, props in enumerate(parsed.models):
        each: list[tuple[ModelProps, YamlPath]] = [(props, ("models", i))]
        if props.versions:
            expanded, versions[props.name] = expand(doc, ("models", i), props)
            each = [(v, ("models", i, "versions", j)) for j, v in enumerate(expanded)]
        for one, at in each:
            if one.name in out:
                raise ProjectError(
                    f"properties for model {one.name!r} are given twice", doc.location(at)
                )
            out[one.name] = (one, Located(doc, at))


def project_secrets(project: Project, env: Mapping[str, str]) -> dict[str, str]:
    """Every secret a loaded project holds: its profile's, its sources' and sinks' configs',
    and the environment's `DBT_ENV_SECRET...` variables (dbt's mark of a secret)."""
    specs = [
        project.profile,
        *(t.config for t in project.sources.values()),
        *(s.config for s in project.sinks.values()),
    ]
    found = secret_values(specs, env)
    return {**found, **{v: MASK for k, v in env.items() if k.startswith(SECRET_ENV_PREFIX) and v}}
