"""Kafka: the kafka source (Spark's reader)."""
