"""dbt's model versions: a versioned model's properties become one model's properties per
version, and its name resolves to its latest version in ref() (docs/dbt.md, "Model versions").

Each version is a model of its own named `<name>_v<v>`, dbt-spark's default alias for it, from
the model file of that name or the one `defined_in` names; `ref('name')` is the latest version (`latest_version`,
else the highest), `ref('name', v=1)` (or `version=1`) another. A version's description and
config are on top of the model's; its columns are the model's (`include: all` unless it says
`include: [...]`, less `exclude: [...]`) with its own column specs over them by name; its tests
are the model's and its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import ProjectError
from .defs import SqlFile
from .property_specs import ColumnSpec, ModelProps, ModelVersion
from .specs import ModelConfig, validate_doc
from .yamlio import YamlDoc, YamlPath


@dataclass(frozen=True)
class Versions:
    """A versioned model's versions: the model each one is, and the latest one's."""

    latest: str  # the model ref('name') is
    models: dict[str, str] = field(default_factory=dict)  # version key -> model
    # a version whose file is not `<name>_v<v>`: model -> the file's stem (`defined_in`)
    files: dict[str, str] = field(default_factory=dict)


def expand(doc: YamlDoc, at: YamlPath, props: ModelProps) -> tuple[list[ModelProps], Versions]:
    """One ModelProps per version of `props` (at `at` in `doc`), and the versions' map."""
    out: list[ModelProps] = []
    models: dict[str, str] = {}
    files: dict[str, str] = {}
    for j, version in enumerate(props.versions):
        where = (*at, "versions", j)
        if version.key in models:
            raise ProjectError(
                f"model {props.name!r} lists version {version.key} twice", doc.location(where)
            )
        name = f"{props.name}_v{version.key}"
        models[version.key] = name
        if version.defined_in and version.defined_in != name:
            files[name] = version.defined_in
        out.append(_one(doc, where, props, version, name))
    latest = _latest(props)
    if latest not in models:
        raise ProjectError(
            f"latest_version {latest} of model {props.name!r} is not one of its versions "
            f"({', '.join(models)})",
            doc.location((*at, "latest_version")),
        )
    return out, Versions(models[latest], models, files)


def _latest(props: ModelProps) -> str:
    if props.latest_version is not None:
        return ModelVersion(v=props.latest_version).key
    keys = [v.key for v in props.versions]
    numbers = [float(k) for k in keys if _number(k)]
    if len(numbers) == len(keys):  # dbt: the highest version when all are numbers
        return keys[numbers.index(max(numbers))]
    return keys[-1]


def _number(key: str) -> bool:
    try:
        float(key)
    except ValueError:
        return False
    return True


def _one(
    doc: YamlDoc, at: YamlPath, props: ModelProps, version: ModelVersion, name: str
) -> ModelProps:
    config = props.config
    if version.config:
        given = {**props.config.model_dump(exclude_unset=True, by_alias=True), **version.config}
        config = validate_doc(ModelConfig, doc, (*at, "config"), given)
    return ModelProps(
        name=name,
        description=version.description if version.description is not None else props.description,
        config=config,
        columns=_columns(doc, at, props, version),
        data_tests=(*props.data_tests, *version.data_tests),
        meta={**props.meta, **version.meta},
        docs=props.docs,
        access=version.access or props.access,
        group=version.group or props.group,
    )


def _columns(
    doc: YamlDoc, at: YamlPath, props: ModelProps, version: ModelVersion
) -> tuple[ColumnSpec, ...]:
    include: object = "all"
    exclude: list[str] = []
    own: dict[str, ColumnSpec] = {}
    for k, entry in enumerate(version.columns):
        where = (*at, "columns", k)
        if "include" in entry or "exclude" in entry:
            extra = set(entry) - {"include", "exclude"}
            if extra:
                raise ProjectError(
                    f"an include/exclude entry takes only include and exclude, not "
                    f"{', '.join(sorted(extra))}",
                    doc.location(where),
                )
            include = entry.get("include", include)
            exclude += list(entry.get("exclude") or ())
            if include != "all" and not isinstance(include, list):
                raise ProjectError(
                    "include is `all` or a list of the model's columns",
                    doc.location((*where, "include")),
                )
        else:
            spec: ColumnSpec = validate_doc(ColumnSpec, doc, where, entry)
            own[spec.name] = spec
    kept = [
        c
        for c in props.columns
        if (include == "all" or c.name in include) and c.name not in exclude  # type: ignore[operator]
    ]
    merged = [own.pop(c.name, c) for c in kept]
    return (*merged, *own.values())


def rename(models: dict[str, SqlFile], versions: dict[str, Versions]) -> list[ProjectError]:
    """Each version defined in a file of another name becomes the model `<name>_v<v>`."""
    errors = []
    for name, found in versions.items():
        for model, stem in found.files.items():
            if stem not in models:
                errors.append(
                    ProjectError(f"model {name!r}: defined_in {stem!r} names no model file")
                )
            elif model in models:
                errors.append(
                    ProjectError(
                        f"model {name!r}: {model}.sql and defined_in {stem!r} both define it"
                    )
                )
            else:
                models[model] = replace(models.pop(stem), name=model)
    return errors
