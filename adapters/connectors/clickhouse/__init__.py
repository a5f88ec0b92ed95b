"""ClickHouse: the `clickhouse` sink."""
