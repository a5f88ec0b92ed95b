"""Analysis of rendered SQL: sqlglot validation, the worker pool, lint rules, column lineage, breaking changes, increments, inlined ephemerals."""
