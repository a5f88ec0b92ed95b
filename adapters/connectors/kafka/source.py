"""Kafka through Spark's own Kafka source (the spark-sql-kafka-0-10 connector jars).

rivc validates the spec at compile time; at run time the connector must be on Spark's classpath.
It is not bundled with pyspark, so a missing jar becomes one clear error naming what to add.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rivc.compiler.errors import ConnectorError

from ...plane.base import SourceContext
from ...util.errortext import missing_data_source
from ..payloads import decode_stream
from .spec import KafkaSecurity, KafkaSourceConfig

JARS_HINT = (
    "the kafka source needs Spark's Kafka connector on the classpath: add the jars "
    "spark-sql-kafka-0-10_2.13-{v}.jar, spark-token-provider-kafka-0-10_2.13-{v}.jar, "
    "kafka-clients-<version>.jar and commons-pool2-<version>.jar to spark.jars in profiles.yml "
    "(or set spark.jars.packages: org.apache.spark:spark-sql-kafka-0-10_2.13:{v} where Maven "
    "Central is reachable)"
)


def _secret(value: str | None, env: str | None) -> str:
    return value or (os.environ.get(env, "") if env else "")


def _sasl(sec: KafkaSecurity) -> dict[str, str]:
    """The JAAS login and the settings of a SASL mechanism (secrets read from the environment
    here, where the config names a variable)."""
    if sec.sasl_mechanism == "OAUTHBEARER":
        assert sec.oauth is not None
        o = sec.oauth
        scope = f' scope="{o.scope}"' if o.scope else ""
        secret = _secret(o.client_secret, o.client_secret_env)
        return {
            "kafka.sasl.oauthbearer.token.endpoint.url": o.token_endpoint_url,
            "kafka.sasl.login.callback.handler.class": OAUTH_HANDLER,
            "kafka.sasl.jaas.config": f"{OAUTH_MODULE} required "
            f'clientId="{o.client_id}" clientSecret="{secret}"{scope};',
        }
    if sec.sasl_mechanism == "GSSAPI":
        assert sec.kerberos is not None
        k = sec.kerberos
        return {
            "kafka.sasl.kerberos.service.name": k.service_name,
            "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required "
            f'useKeyTab=true storeKey=true keyTab="{k.keytab}" principal="{k.principal}";',
        }
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if sec.sasl_mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    password = _secret(sec.password, sec.password_env)
    return {
        "kafka.sasl.jaas.config": f'{module} required username="{sec.username}" '
        f'password="{password}";'
    }


OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler"
)


def options(cfg: KafkaSourceConfig) -> dict[str, str]:
    """Spark Kafka source options for `cfg` (the password is read from the environment)."""
    start = cfg.starting_offsets
    out = {
        "kafka.bootstrap.servers": ",".join(cfg.brokers),
        "startingOffsets": start if isinstance(start, str) else json.dumps(start),
        "failOnDataLoss": str(cfg.fail_on_data_loss).lower(),
    }
    if cfg.starting_timestamp is not None:
        del out["startingOffsets"]
        out["startingTimestamp"] = str(cfg.starting_timestamp)
    if cfg.consumer_group:
        out["kafka.group.id"] = cfg.consumer_group
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
        out["kafka.sasl.mechanism"] = sec.sasl_mechanism
        out.update(_sasl(sec))
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
    return decode_stream(
        raw.withColumnRenamed("value", "payload"),
        ctx,
        metadata,
        "concat('topic ', topic, ' partition ', partition, ' offset ', offset)",
    )
