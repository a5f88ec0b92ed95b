"""What the node builders share: content hashes, suggestions, positioned spec findings, and the columns after transforms."""

from __future__ import annotations

import hashlib
from typing import Any

from ..analysis import rules
from ..analysis.rules import Finding
from ..errors import (
    SqlError,
    did_you_mean,
)
from ..loading.project import Located
from ..rendering import transforms as tf


def content_hash(*parts: Any) -> str:
    """A cache key; inputs are built in a deterministic order, so their repr is stable."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def suggest(name: str, candidates: list[str]) -> str:
    return did_you_mean(name, candidates) or f" (columns: {', '.join(candidates)})"


def spec_finding(message: str, where: Located, *keys: str | int) -> Finding:
    return rules.key_column(SqlError(message, where.location(*keys)))


def transformed(
    transforms: tuple[Any, ...],
    columns: dict[str, str] | None,
    where: Located,
    findings: list[Finding],
    kind: str,
    keys: tuple[str, ...] = (),
    history: Any = None,
) -> dict[str, str] | None:
    """The columns after `transforms`, each checked against its input; None when unknown.
    `keys`: a sink's merge or upsert keys; `history`: its scd2 columns."""
    for i, t in enumerate(transforms):
        if kind == "source" and t.type == "route":
            findings.append(spec_finding("route is a sink transform", where, "transforms", i))
    try:
        if kind == "sink":
            tf.check_keys(transforms, keys)  # known whatever the columns
        if columns is None:
            return None
        return tf.plan(transforms, columns, keys, history).columns
    except tf.UnknownColumns:
        return None
    except tf.TransformError as exc:
        findings.append(spec_finding(str(exc), where, "transforms", exc.index, exc.key))
        return None
