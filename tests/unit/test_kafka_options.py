"""The kafka source's settings as Spark's Kafka connector takes them (no broker installs here, so
what is tested is the options rivc hands Spark, and Rivven's names read as rivc's): a consumer
group, offsets per partition or a start time, and the SASL mechanisms with their JAAS logins."""

from __future__ import annotations

import json

import pytest

from rivc.adapters.connectors.kafka.source import options
from rivc.adapters.connectors.kafka.spec import KafkaSourceConfig
from rivc.compiler.importers.aliases import kafka_source


def config(**given: object) -> KafkaSourceConfig:
    return KafkaSourceConfig.model_validate({"brokers": ["k1:9092"], "topic": "orders", **given})


def test_a_consumer_group_offsets_per_partition_and_a_start_time():
    got = options(config(consumer_group="shop", starting_offsets={"orders": {"0": 23, "1": -2}}))
    assert got["kafka.group.id"] == "shop"
    assert json.loads(got["startingOffsets"]) == {"orders": {"0": 23, "1": -2}}
    got = options(config(starting_timestamp=1764400000000))
    assert got["startingTimestamp"] == "1764400000000" and "startingOffsets" not in got
    with pytest.raises(ValueError, match="starting_offsets or starting_timestamp"):
        config(starting_offsets="earliest", starting_timestamp=1)


def test_sasl_mechanisms_as_jaas_logins(monkeypatch):
    monkeypatch.setenv("KAFKA_SECRET", "s3cr3t")
    oauth = options(
        config(
            security={
                "protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
                "oauth": {
                    "token_endpoint_url": "https://idp.example/token",
                    "client_id": "rivc",
                    "client_secret_env": "KAFKA_SECRET",
                    "scope": "kafka",
                },
            }
        )
    )
    assert oauth["kafka.sasl.mechanism"] == "OAUTHBEARER"
    assert oauth["kafka.sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert oauth["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="rivc" clientSecret="s3cr3t" scope="kafka";'
    )
    kerberos = options(
        config(
            security={
                "protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "GSSAPI",
                "kerberos": {"principal": "rivc@EXAMPLE", "keytab": "/etc/rivc.keytab"},
            }
        )
    )
    assert kerberos["kafka.sasl.kerberos.service.name"] == "kafka"
    assert (
        'keyTab="/etc/rivc.keytab" principal="rivc@EXAMPLE"' in kerberos["kafka.sasl.jaas.config"]
    )
    with pytest.raises(ValueError, match="sasl_mechanism OAUTHBEARER needs oauth"):
        config(security={"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"})


def test_rivvens_kafka_source_names():
    given = {
        "brokers": ["k1:9092"],
        "topic": "orders",
        "consumer_group": "rivven-migration",
        "start_offset": "earliest",
        "security": {"protocol": "sasl_ssl", "mechanism": "SCRAM_SHA_256", "username": "u",
                     "password_env": "KAFKA_PASSWORD"},
    }  # fmt: skip
    refusals: list[object] = []
    kafka_source(given, refusals)
    assert refusals == []
    got = options(KafkaSourceConfig.model_validate(given))
    assert got["startingOffsets"] == "earliest" and got["kafka.group.id"] == "rivven-migration"
    assert got["kafka.security.protocol"] == "SASL_SSL"
    assert got["kafka.sasl.mechanism"] == "SCRAM-SHA-256"
