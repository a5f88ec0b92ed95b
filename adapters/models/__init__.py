"""Building models: one class per materialization, dbt snapshots, Python models, hooks, reuse of unchanged tables, data and unit tests."""
