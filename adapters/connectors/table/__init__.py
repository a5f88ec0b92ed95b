"""A table in Spark's catalog: the table source (dbt sources read in place)."""
