"""Transforms and expectations: typed specs, and their translation into Spark SQL.

Both are pure: `plan()` turns a list of transforms and the input's columns into SQL steps (a
select list or a WHERE condition) and the output columns. The compiler calls it with the columns
it knows to validate and to show the SQL in target/; the runtime calls it with a batch's real
columns and applies the same steps with `selectExpr` and `where`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Literal

import sqlglot
from pydantic import Field, field_validator, model_validator
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ..loading.specbase import Spec, StrList, _as_tuple
from ..sql import literal, quote

if TYPE_CHECKING:
    from ..connector import Scd2Columns

Columns = dict[str, str]  # name -> Spark SQL type ("UNKNOWN" when not known)
ERROR_COLUMN = "_rivc_error"  # the reason a row was set aside, while a batch is checked
DELETE_COLUMN = "_rivc_delete"  # unwrap_cdc deletes: apply: the row deletes its key in the sink


# --------------------------------------------------------------------------- specs


class Mask(Spec):
    type: Literal["mask"]
    fields: StrList = Field(min_length=1)
    char: str = Field("*", min_length=1, max_length=1)
    keep_last: int = Field(0, ge=0)

    _tuple = field_validator("fields", mode="before")(_as_tuple)


class Rename(Spec):
    type: Literal["rename"]
    map: dict[str, str] = Field(min_length=1)


class Drop(Spec):
    type: Literal["drop"]
    fields: StrList = Field(min_length=1)

    _tuple = field_validator("fields", mode="before")(_as_tuple)


class Keep(Spec):
    type: Literal["keep"]
    fields: StrList = Field(min_length=1)

    _tuple = field_validator("fields", mode="before")(_as_tuple)


class Insert(Spec):
    type: Literal["insert"]
    static: dict[str, str | int | float | bool | None] = {}
    timestamp: str | None = None  # a column holding the processing time
    uuid: str | None = None  # a column holding a random UUID per row

    @model_validator(mode="after")
    def _something(self) -> Insert:
        if not (self.static or self.timestamp or self.uuid):
            raise ValueError("insert needs static, timestamp or uuid")
        return self


class Cast(Spec):
    type: Literal["cast"]
    fields: dict[str, str] = Field(min_length=1)  # column -> Spark SQL type

    @field_validator("fields")
    @classmethod
    def _types(cls, value: dict[str, str]) -> dict[str, str]:
        for name, typ in value.items():
            spark_type(typ, f"cast of {name}")
        return value


class Filter(Spec):
    type: Literal["filter"]
    condition: str
    action: Literal["keep", "drop"] = "keep"  # keep the rows that match, or drop them

    @field_validator("condition")
    @classmethod
    def _sql(cls, value: str) -> str:
        sql_expression(value)
        return value


class Route(Spec):
    type: Literal["route"]
    field: str
    routes: dict[str, str] = Field(min_length=1)  # value -> sink
    default: str | None = None  # sink for the other rows; unset: this sink's own connector


class UnwrapCdc(Spec):
    type: Literal["unwrap_cdc"]
    op_field: str = "op"
    before: str = "before"
    after: str = "after"
    # drop: deletes are left out; keep: the before-image with _op = 'delete'; apply: a merge or
    # upsert sink deletes the key from its table
    deletes: Literal["keep", "drop", "apply"] = "drop"
    sequence_by: str | None = None  # an envelope field ordering one key's changes: the last wins


Transform = Annotated[
    Mask | Rename | Drop | Keep | Insert | Cast | Filter | Route | UnwrapCdc,
    Field(discriminator="type"),
]


class Expectation(Spec):
    """One row-level check of a sink's input; `action` says what a failing row does."""

    check: Literal["not_null", "unique", "accepted_values", "range", "expression"]
    columns: StrList = ()
    column: str | None = None
    values: tuple[str | int | float | bool, ...] = ()
    min: float | int | str | None = None
    max: float | int | str | None = None
    expression: str | None = None
    action: Literal["warn", "drop", "fail", "dead_letter"] = "fail"

    _tuple = field_validator("columns", mode="before")(_as_tuple)

    @model_validator(mode="after")
    def _fields(self) -> Expectation:
        cols = self.targets
        if self.check in ("not_null", "unique", "accepted_values", "range") and not cols:
            raise ValueError(f"check {self.check} needs column or columns")
        if self.check == "accepted_values" and not self.values:
            raise ValueError("check accepted_values needs values")
        if self.check == "range" and self.min is None and self.max is None:
            raise ValueError("check range needs min or max")
        if self.check == "expression":
            if not self.expression:
                raise ValueError("check expression needs expression")
            sql_expression(self.expression)
        return self

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.column, *self.columns) if self.column else self.columns

    @property
    def label(self) -> str:
        what = self.expression if self.check == "expression" else ", ".join(self.targets)
        return f"{self.check}({what})"

    def failing(self, among: str | None = None) -> str:
        """A Spark SQL condition that is true for a row failing this check; `unique` counts
        duplicates only among the rows for which `among` holds."""
        cols = [quote(c) for c in self.targets]
        if self.check == "not_null":
            return " OR ".join(f"{c} IS NULL" for c in cols)
        if self.check == "unique":  # every occurrence of a key after its first in the batch
            keys = ", ".join(cols)
            scope = f"({among}), " if among else ""
            return f"row_number() OVER (PARTITION BY {scope}{keys} ORDER BY {keys}) > 1"
        if self.check == "accepted_values":
            values = ", ".join(literal(v) for v in self.values)
            return " OR ".join(f"({c} IS NOT NULL AND {c} NOT IN ({values}))" for c in cols)
        if self.check == "range":
            parts = []
            for c in cols:
                if self.min is not None:
                    parts.append(f"{c} < {literal(self.min)}")
                if self.max is not None:
                    parts.append(f"{c} > {literal(self.max)}")
            return " OR ".join(parts)
        return f"NOT coalesce(({self.expression}), false)"


# --------------------------------------------------------------------------- SQL checks


def sql_expression(text: str) -> exp.Expression:
    """Parse one Spark SQL expression; ValueError with sqlglot's reason when it is not one."""
    try:
        tree = sqlglot.parse_one(f"SELECT {text}", read="spark")
    except (ParseError, TokenError) as exc:
        raise ValueError(f"not a Spark SQL expression: {str(exc).splitlines()[0]}") from None
    selects = tree.expressions if isinstance(tree, exp.Select) else []
    if len(selects) != 1 or tree.args.get("from"):
        raise ValueError(f"not one Spark SQL expression: {text!r}")
    return selects[0]  # type: ignore[no-any-return]


def spark_type(text: str, what: str = "type") -> exp.DataType:
    try:
        return exp.DataType.build(text, dialect="spark")
    except (ParseError, TokenError, ValueError):
        raise ValueError(f"{what}: {text!r} is not a Spark SQL type") from None


def referenced_columns(text: str) -> set[str]:
    return {c.name for c in sql_expression(text).find_all(exp.Column) if not c.table}


def struct_fields(typ: str) -> Columns | None:
    """The fields of a struct type string, or None when it is not a known struct."""
    try:
        dt = exp.DataType.build(typ, dialect="spark")
    except (ParseError, TokenError, ValueError):
        return None
    if dt.this != exp.DataType.Type.STRUCT:
        return None
    out: Columns = {}
    for f in dt.expressions:
        kind = f.args.get("kind")
        out[f.name] = re.sub(r"([,:])\s+", r"\1", kind.sql("spark").lower()) if kind else "UNKNOWN"
    return out


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class Step:
    """A select list, or a WHERE condition, applied to the previous step's output."""

    select: tuple[str, ...] = ()
    where: str | None = None
    casts: tuple[tuple[str, str], ...] = ()  # (column, type) checked for failures before this step


@dataclass(frozen=True)
class TransformPlan:
    steps: tuple[Step, ...]
    columns: Columns  # the output's data columns (DELETE_COLUMN is not one of them)
    route: Route | None = None
    deletes: bool = False  # the output also carries DELETE_COLUMN, for the sink

    @property
    def output(self) -> tuple[str, ...]:
        """Every column of the output: the data columns, then the delete flag if any."""
        return (*self.columns, *((DELETE_COLUMN,) if self.deletes else ()))


class UnknownColumns(Exception):
    """The columns after a transform cannot be known before run time (an untyped struct)."""


class TransformError(ValueError):
    def __init__(self, index: int, key: str, message: str) -> None:
        super().__init__(message)
        self.index, self.key = index, key


def check_keys(transforms: tuple[Any, ...], keys: tuple[str, ...]) -> None:
    """What the sink's keys decide whatever the input's columns: unwrap_cdc's `deletes:
    apply` and `sequence_by` need a sink that merges by key. TransformError names the bad one."""
    for i, t in enumerate(transforms):
        if not isinstance(t, UnwrapCdc) or keys:
            continue
        if t.deletes == "apply":
            raise TransformError(
                i,
                "deletes",
                "unwrap_cdc: deletes: apply needs a sink that merges by key "
                "(delta mode merge with merge_keys, iceberg mode upsert with key_fields)",
            )
        if t.sequence_by:
            raise TransformError(
                i,
                "sequence_by",
                "unwrap_cdc: sequence_by orders the changes of one key: the "
                "sink needs keys (delta mode merge with merge_keys, iceberg mode upsert with "
                "key_fields)",
            )


def plan(
    transforms: tuple[Any, ...],
    columns: Columns,
    keys: tuple[str, ...] = (),
    history: Scd2Columns | None = None,
) -> TransformPlan:
    """The SQL steps of `transforms` over input `columns`; TransformError names the bad one.
    `keys` are the sink's merge or upsert keys, which unwrap_cdc's sequence_by orders by;
    `history`: the sink keeps every version of a key (mode scd2), so unwrap_cdc keeps every
    change, with its sequence_by value as the version's start."""
    check_keys(transforms, keys)
    steps: list[Step] = []
    cols = dict(columns)
    route: Route | None = None
    deletes = False
    for i, t in enumerate(transforms):
        if route is not None:
            raise TransformError(i, "type", "route must be the last transform")
        if deletes and isinstance(t, UnwrapCdc | Route):
            raise TransformError(
                i,
                "type",
                f"{t.type} cannot follow unwrap_cdc with deletes: apply (its deletes "
                "are for the sink's own table)",
            )
        start, flagged = len(steps), deletes
        need = partial(_need, i, t.type, cols)

        if isinstance(t, Mask):
            need(t.fields)
            keep = t.keep_last
            exprs = []
            for c in cols:
                if c in t.fields:
                    s = f"CAST({quote(c)} AS STRING)"
                    masked = f"repeat({literal(t.char)}, greatest(length({s}) - {keep}, 0))"
                    if keep:
                        masked = f"concat({masked}, right({s}, {keep}))"
                    exprs.append(f"{masked} AS {quote(c)}")
                else:
                    exprs.append(quote(c))
            steps.append(Step(tuple(exprs)))
            cols = {c: ("string" if c in t.fields else v) for c, v in cols.items()}
        elif isinstance(t, Rename):
            need(list(t.map), "map")
            renamed = {t.map.get(c, c): v for c, v in cols.items()}
            if len(renamed) != len(cols):
                raise TransformError(i, "map", "rename: two columns would get the same name")
            steps.append(Step(tuple(f"{quote(c)} AS {quote(t.map.get(c, c))}" for c in cols)))
            cols = renamed
        elif isinstance(t, Drop | Keep):
            need(t.fields)
            kept = [c for c in cols if (c in t.fields) == isinstance(t, Keep)]
            if not kept:
                raise TransformError(i, "fields", f"{t.type}: no column would be left")
            steps.append(Step(tuple(quote(c) for c in kept)))
            cols = {c: cols[c] for c in kept}
        elif isinstance(t, Insert):
            added: Columns = {}
            exprs = []
            for name, value in t.static.items():
                exprs.append(f"{literal(value)} AS {quote(name)}")
                added[name] = _literal_type(value)
            if t.timestamp:
                exprs.append(f"current_timestamp() AS {quote(t.timestamp)}")
                added[t.timestamp] = "timestamp"
            if t.uuid:
                exprs.append(f"uuid() AS {quote(t.uuid)}")
                added[t.uuid] = "string"
            clash = [n for n in added if n in cols]
            if clash:
                raise TransformError(i, "type", f"insert: column {clash[0]!r} already exists")
            steps.append(Step((*(quote(c) for c in cols), *exprs)))
            cols.update(added)
        elif isinstance(t, Cast):
            need(list(t.fields))
            exprs = [
                f"try_cast({quote(c)} AS {t.fields[c]}) AS {quote(c)}"
                if c in t.fields
                else quote(c)
                for c in cols
            ]
            steps.append(Step(tuple(exprs), casts=tuple(t.fields.items())))
            cols = {c: (t.fields[c].lower() if c in t.fields else v) for c, v in cols.items()}
        elif isinstance(t, Filter):
            need(sorted(referenced_columns(t.condition)), "condition")
            cond = f"coalesce(({t.condition}), false)"
            steps.append(Step(where=cond if t.action == "keep" else f"NOT {cond}"))
        elif isinstance(t, Route):
            need([t.field], "field")
            route = t
        elif isinstance(t, UnwrapCdc):
            need([t.op_field, t.before, t.after], "type")
            if t.sequence_by:
                need([t.sequence_by], "sequence_by")
            if cols[t.after] in ("UNKNOWN", ""):  # a model column of a type compile cannot infer
                raise UnknownColumns
            image = struct_fields(cols[t.after])
            if image is None:
                raise TransformError(i, "after", f"unwrap_cdc: {t.after!r} is not a struct")
            if history is not None:
                seq_type = cols[t.sequence_by or t.op_field]
                steps += _versions(i, t, image, keys, history, seq_type)
                cols = {
                    **image,
                    history.valid_from: seq_type,
                    history.valid_to: seq_type,
                    history.is_current: "boolean",
                }
            else:
                steps += _unwrap(i, t, image, keys)
                cols = dict(image) if t.deletes == "apply" else {**image, "_op": "string"}
            deletes = t.deletes == "apply"
        if flagged:  # the delete flag rides along every select after unwrap_cdc
            steps[start:] = [
                Step((*s.select, DELETE_COLUMN), s.where, s.casts) if s.select else s
                for s in steps[start:]
            ]
    return TransformPlan(tuple(steps), cols, route, deletes)


def _keys_in(i: int, t: UnwrapCdc, image: Columns, keys: tuple[str, ...], key: str) -> None:
    """Refuse, at the transform's `key`, a sink key the change's image does not have."""
    missing = [k for k in keys if k not in image]
    if missing:
        raise TransformError(
            i,
            key,
            f"unwrap_cdc: key {missing[0]!r} is not a field of {t.after!r} ({', '.join(image)})",
        )


def _versions(
    i: int, t: UnwrapCdc, image: Columns, keys: tuple[str, ...], history: Scd2Columns, kind: str
) -> list[Step]:
    """unwrap_cdc's steps for a sink that keeps history: every change's image with its
    sequence_by value as the version's start (the sink sets its end and whether it is current);
    deletes flagged (apply: they close their key's version) or left out (drop)."""
    if not t.sequence_by:
        raise TransformError(
            i,
            "sequence_by",
            "unwrap_cdc: a scd2 sink orders each key's versions by sequence_by; set it "
            "(postgres-cdc: sequence_by: seq)",
        )
    if t.deletes == "keep":
        raise TransformError(
            i,
            "deletes",
            "unwrap_cdc: a scd2 sink takes deletes: apply (a delete ends its "
            "key's version) or drop",
        )
    _keys_in(i, t, image, keys, "type")
    names = (history.valid_from, history.valid_to, history.is_current)
    clash = [n for n in names if n in image]
    if clash:
        raise TransformError(
            i,
            "after",
            f"unwrap_cdc: {t.after!r} has a field {clash[0]!r}, the name of a scd2 "
            "column; name the scd2 columns otherwise in the sink's config: scd2:",
        )
    op = quote(t.op_field)
    deleted = f"coalesce(lower({op}) IN ('delete', 'd'), false)"
    img = f"CASE WHEN {deleted} THEN {quote(t.before)} ELSE {quote(t.after)} END"
    steps = [
        Step(
            (
                f"{img} AS _rivc_image",
                f"{deleted} AS _rivc_del",
                f"{quote(t.sequence_by)} AS _rivc_seq",
            )
        )
    ]
    if t.deletes == "drop":
        steps.append(Step(where="NOT _rivc_del"))
    validity = (
        f"_rivc_seq AS {quote(history.valid_from)}",
        f"CAST(NULL AS {kind}) AS {quote(history.valid_to)}",
        f"CAST(NULL AS boolean) AS {quote(history.is_current)}",
    )
    flag = (f"_rivc_del AS {DELETE_COLUMN}",) if t.deletes == "apply" else ()
    steps.append(Step(("_rivc_image.*", *validity, *flag)))
    return steps


def _unwrap(i: int, t: UnwrapCdc, image: Columns, keys: tuple[str, ...]) -> list[Step]:
    """unwrap_cdc's steps: each change's image (the before-image for a delete) and kind, then,
    with sequence_by, only each key's last change (changes tied for last all stay, and the sink
    refuses the repeated key), then the deletes left out, kept as `_op`, or flagged."""
    op = quote(t.op_field)
    img = (
        f"CASE WHEN lower({op}) IN ('delete', 'd') THEN {quote(t.before)} ELSE {quote(t.after)} END"
    )
    kind = (
        f"CASE lower({op}) WHEN 'c' THEN 'insert' WHEN 'r' THEN 'insert' WHEN 'u' THEN "
        f"'update' WHEN 'd' THEN 'delete' ELSE lower({op}) END"
    )
    seq = (f"{quote(t.sequence_by)} AS _rivc_seq",) if t.sequence_by else ()
    steps = [Step((f"{img} AS _rivc_image", f"{kind} AS _op", *seq))]
    if t.sequence_by:
        _keys_in(i, t, image, keys, "sequence_by")
        by = ", ".join(f"_rivc_image.{quote(k)}" for k in keys)
        steps += [
            Step(
                (
                    "_rivc_image",
                    "_op",
                    f"rank() OVER (PARTITION BY {by} ORDER BY _rivc_seq DESC) AS _rivc_rank",
                )
            ),
            Step(where="_rivc_rank = 1"),
        ]
    if t.deletes == "drop":
        steps.append(Step(where="_op IS NULL OR _op <> 'delete'"))
    if t.deletes == "apply":
        steps.append(Step(("_rivc_image.*", f"coalesce(_op = 'delete', false) AS {DELETE_COLUMN}")))
    else:
        steps.append(Step(("_rivc_image.*", "_op")))
    return steps


def _need(i: int, kind: str, cols: Columns, names: Any, key: str = "fields") -> None:
    for name in names:
        if name not in cols:
            raise TransformError(
                i, key, f"{kind}: column {name!r} is not in the input ({', '.join(cols)})"
            )


def _literal_type(value: Any) -> str:
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int" if -(2**31) <= value < 2**31 else "bigint"
    if isinstance(value, float):
        return "double"
    return "string"


def to_sql(relation: str, steps: tuple[Step, ...]) -> str:
    """The steps as one Spark SQL query over `relation`, to show in target/compiled/."""
    sql = f"SELECT * FROM {quote(relation)}"
    for n, step in enumerate(steps):
        if step.where is not None:
            sql = f"SELECT * FROM ({sql}) AS t{n} WHERE {step.where}"
        else:
            sql = f"SELECT {', '.join(step.select)} FROM ({sql}) AS t{n}"
    return sql + "\n"
