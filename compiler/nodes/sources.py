"""Source tables: their query, columns, keys and transforms checked; one node each."""

from __future__ import annotations

from typing import Any

from ..analysis import rules
from ..analysis.rules import Finding
from ..analysis.validate import check_read_only, output_columns, parse_query
from ..dag.graph import Node, node_id
from ..dialects import dialect
from ..emit.manifest import SourceFacts
from ..errors import (
    SqlError,
)
from ..loading.project import SourceTableDef
from ..rendering.params import bind
from ..rendering.render import source_relation
from ..sql import SPARK
from .common import content_hash, suggest, transformed


def source_node(table: SourceTableDef, params: dict[str, Any], findings: list[Finding]) -> Node:
    spec, where = table.table, table.where
    path = where.doc.path
    sql: str | None = None
    columns = None if table.connector.relational else table.known_columns()
    if table.connector.relational:
        db = table.connector.database
        writer = SPARK if db is None else dialect(db)
        raw = spec.query or f"SELECT * FROM {spec.table}"
        loc = where.location("query" if spec.query else "table")
        offset = (loc.line or 1) - 1
        bound, unbound = bind(raw, params, writer)
        for name, _, _ in unbound:
            findings.append(rules.unbound_parameter(name, loc))
        if not unbound:
            try:
                tree = parse_query(bound, path, writer.sqlglot, "a source query", offset)
                check_read_only(tree, bound, path, offset)
                sql = bound
                # `columns:` sets the delivered type of the columns it names; which columns
                # there are is the query's select list (unknown offline for `SELECT *`)
                names = output_columns(tree)
                if names is not None:
                    columns = {c: spec.columns.get(c, "UNKNOWN") for c in names}
                    for col in spec.columns:
                        if col not in columns:
                            findings.append(
                                rules.key_column(
                                    SqlError(
                                        f"declared column {col!r} is not selected by the query "
                                        f"of source table {table.fqn}{suggest(col, names)}",
                                        where.location("columns"),
                                    )
                                )
                            )
            except SqlError as exc:
                findings.append(rules.source_query(exc))
        if columns is not None:
            if spec.meta_columns.exported_at:
                columns = {**columns, "_rivc_exported_at": "timestamp"}
            if spec.meta_columns.row_hash:
                columns = {**columns, "_rivc_row_hash": "bigint"}
        for key in ("cursor_column", "chunk_column", "time_column", "unique_key"):
            value = getattr(spec, key)
            for col in (value,) if isinstance(value, str) else value or ():
                if columns is None:
                    findings.append(
                        rules.key_column(
                            SqlError(
                                f"{key} {col!r} cannot be checked: the source selects * "
                                f"(list its columns in query:, e.g. query: SELECT {col}, ... "
                                f"FROM {spec.table or 'the_table'}, to check it and the models "
                                "that read it)",
                                where.location(key),
                            ),
                            severity="warning",
                        )
                    )
                elif col not in columns:
                    findings.append(
                        rules.key_column(
                            SqlError(
                                f"{key} {col!r} is not an output column of source table {table.fqn}"
                                f"{suggest(col, list(columns))}",
                                where.location(key),
                            )
                        )
                    )
    if spec.transforms:
        columns = transformed(spec.transforms, columns, where, findings, "source")
    facts = SourceFacts(
        connector=table.source.connector,
        connection=table.source.connection,
        relation=source_relation(table.source.name, spec.name),
        table=table.manifest_table(),
        tuning=table.source.tuning.resolved() if table.connector.relational else None,
        freshness=table.freshness,
    )
    cfg = spec.model_dump(mode="json", include={"mode"})
    if table.event_time:
        cfg["event_time"] = table.event_time
    return Node(
        id=node_id("source", table.fqn),
        kind="source",
        name=table.fqn,
        path=path,
        depends_on=[],
        tags=(),
        config=cfg,
        description=spec.description or table.source.description,
        sql=sql,
        columns=dict(columns) if columns is not None else None,
        checksum=content_hash(
            table.source.name,
            table.source.connector,
            table.source.connection,
            table.source.tuning,
            spec,
        ),
        facts=facts,
        line=where.location().line,
    )
