"""Ingestion: source nodes, relational extraction into landing tables, the change-log driver and its logs, retention of landed batches."""
