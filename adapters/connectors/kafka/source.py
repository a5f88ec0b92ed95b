"""Kafka through Spark's own Kafka source (the spark-sql-kafka-0-10 connector jars).

rivc validates the spec at compile time; at run time the connector must be on Spark's classpath.
It is not bundled with pyspark, so a missing jar becomes one clear error naming what to add.
"""

from __future__ import annotations

import os
from typing import Any

from rivc.compiler.errors import ConnectorError

from ...plane.base import SourceContext
from ...util.errortext import missing_data_source
from ..payloads import decode
from .spec import KafkaSourceConfig

JARS_HINT = (
    "the kafka source needs Spark's Kafka connector on the classpath: add the jars "
    "spark-sql-kafka-0-10_2.13-{v}.jar, spark-token-provider-kafka-0-10_2.13-{v}.jar, "
    "kafka-clients-<version>.jar and commons-pool2-<version>.jar to spark.jars in profiles.yml "
    "(or set spark.jars.packages: org.apache.spark:spark-sql-kafka-0-10_2.13:{v} where Maven "
    "Central is reachable)"
)


def options(cfg: KafkaSourceConfig) -> dict[str, str]:
    """Spark Kafka source options for `cfg` (the password is read from the environment)."""
    out = {
        "kafka.bootstrap.servers": ",".join(cfg.brokers),
        "startingOffsets": cfg.starting_offsets,
        "failOnDataLoss": str(cfg.fail_on_data_loss).lower(),
    }
    if cfg.topic:
        out["subscribe"] = cfg.topic
    elif cfg.topics:
        out["subscribe"] = ",".join(cfg.topics)
    else:
        out["subscribePattern"] = cfg.pattern or ""
    if cfg.max_offsets_per_trigger:
        out["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    sec = cfg.security
    out["kafka.security.protocol"] = sec.protocol
    if sec.sasl_mechanism:
        password = sec.password or (os.environ.get(sec.password_env) if sec.password_env else "")
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if sec.sasl_mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        out["kafka.sasl.mechanism"] = sec.sasl_mechanism
        out["kafka.sasl.jaas.config"] = (
            f'{module} required username="{sec.username}" password="{password or ""}";'
        )
    out.update({k if k.startswith("kafka.") else f"kafka.{k}": v for k, v in cfg.options.items()})
    return out


def read(spark: Any, ctx: SourceContext[KafkaSourceConfig]) -> Any:
    """The registry's entry point."""
    from pyspark.errors import PySparkException

    cfg = ctx.config
    reader = spark.readStream.format("kafka")
    for key, value in options(cfg).items():
        reader = reader.option(key, value)
    try:
        raw = reader.load()
    except PySparkException as exc:
        if missing_data_source(exc):
            raise ConnectorError(JARS_HINT.format(v=spark.version)) from None
        raise
    metadata = {
        "kafka_key": "CAST(key AS STRING)",
        "kafka_topic": "topic",
        "kafka_partition": "partition",
        "kafka_offset": "offset",
        "kafka_timestamp": "timestamp",
    }
    return decode(
        raw.withColumnRenamed("value", "payload"),
        cfg.payload,
        ctx.root,
        ctx.name,
        ctx.columns,
        metadata if cfg.metadata_columns else None,
        "concat('topic ', topic, ' partition ', partition, ' offset ', offset)",
    )
