"""Configs written for the systems rivc replaces (Rivven's delta-lake, iceberg and mqtt
connectors): their names are aliases of rivc's, or refused with a pointer; every unknown key of
a project is reported in one run."""

from __future__ import annotations

from click.testing import CliRunner

from rivc.adapters.cli import main
from rivc.compiler.loading.project import load_project


def compile_(root):
    result = CliRunner().invoke(main, ["compile", "--project-dir", str(root)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.output


def test_a_rivven_delta_lake_sink_is_a_delta_sink(make_project):
    root = make_project(
        {
            "sinks/lake.yml": """
                sinks:
                  - name: events
                    from: stg
                    connector: delta-lake
                    config:
                      table_uri: s3://my-bucket/warehouse/events
                      auto_create_table: true
                      target_file_size_mb: 64
                      write_mode: overwrite
                      compression: zstd
                      partition_columns: [customer_id]
                      s3:
                        region: eu-west-1
                        endpoint: http://minio:9000
                        access_key_id: AKIA
                        secret_access_key: shh
                        path_style_access: true
                        allow_http: true
            """
        }
    )
    code, out = compile_(root)
    assert code == 0, out
    sink = load_project(root).sinks["events"]
    c = sink.config
    assert sink.spec.connector == "delta"
    assert (c.mode, c.partition_by, c.compression) == ("overwrite", ("customer_id",), "zstd")
    assert c.target_file_size == 64 << 20 and c.auto_create_table is True
    assert c.storage_options == {
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "shh",
        "AWS_ALLOW_HTTP": "true",
    }


def test_a_rivven_iceberg_sink_and_mqtt_source(make_project):
    root = make_project(
        {
            "sources/iot.yml": """
                sources:
                  - name: iot
                    connector: mqtt
                    tables:
                      - name: readings
                        columns: {device: string, value: double}
                        config:
                          broker_url: mqtts://broker.example.com:8883
                          topics: [sensors/+/temperature]
                          qos: at_least_once
                          clean_session: true
                          keep_alive_secs: 60
                          include_metadata: true
                          parse_json_payload: true
                          auth: {username: u, password: p}
            """,
            "sinks/ice.yml": """
                sinks:
                  - name: lakehouse
                    from: stg
                    connector: iceberg
                    config:
                      catalog:
                        type: rest
                        rest:
                          uri: "http://localhost:8181"
                          warehouse: "s3://b/wh"
                          credential: t
                          properties:
                            oauth2-server-uri: "https://idp.example.com/token"
                            s3.secret-access-key: shh
                      namespace: analytics
                      table: orders
                      commit_mode: upsert
                      key_fields: [order_id]
                      partitioning: bucket
                      partition_fields: [customer_id]
                      num_buckets: 16
                      schema_evolution: add_columns
                      target_file_size_mb: 128
                      s3: {region: us-west-2}
            """,
        }
    )
    code, out = compile_(root)
    assert code == 0, out
    project = load_project(root)
    m = project.sources["iot.readings"].config
    assert (m.url, m.qos, m.keepalive_s, m.metadata_columns) == (
        "mqtts://broker.example.com:8883",
        1,
        60,
        True,
    )
    assert (m.username, m.password, m.clean_session) == ("u", "p", True)
    i = project.sinks["lakehouse"].config
    assert (i.catalog.type, i.catalog.uri, i.catalog.warehouse, i.catalog.credential) == (
        "rest",
        "http://localhost:8181",
        "s3://b/wh",
        "t",
    )
    assert (i.mode, i.key_fields, i.schema_evolution) == ("upsert", ("order_id",), "add_columns")
    assert [(p.field, p.transform, p.buckets) for p in i.partitioning] == [
        ("customer_id", "bucket", 16)
    ]
    assert i.storage_options == {"AWS_REGION": "us-west-2"}
    assert i.target_file_size == 128 << 20
    assert i.catalog.properties == {
        "oauth2-server-uri": "https://idp.example.com/token",
        "s3.secret-access-key": "shh",
    }
    manifest = (root / "target" / "manifest.json").read_text()
    manifest += (root / "target" / "rivc_manifest.json").read_text()
    assert "idp.example.com" in manifest and "shh" not in manifest  # never a secret


def test_every_unknown_or_refused_key_is_reported_in_one_run(make_project):
    root = make_project(
        {
            "sinks/a.yml": """
                sinks:
                  - name: one
                    from: stg
                    connector: delta-lake
                    config:
                      table_uri: lake/one
                      max_commit_retries: 3
                      flush_interval_secs: 60
                      colour: blue
                  - name: two
                    from: stg
                    connector: files
                    config: {path: out/two, formt: csv}
            """,
            "sources/b.yml": """
                sources:
                  - name: iot
                    connector: mqtt
                    tables:
                      - name: a
                        columns: {v: double}
                        config: {broker_url: "mqtt://h:1883", topics: [t], qos: twice,
                                 parse_json_payload: false}
                      - name: b
                        columns: {v: double}
                        config: {url: "mqtt://h:1883", topics: [t], keepalive: 5}
            """,
        }
    )
    code, out = compile_(root)
    assert code == 2
    lines = out.strip().splitlines()
    where = [":".join(line.split(":")[:2]) for line in lines]
    assert where == [
        "sinks/a.yml:7",
        "sinks/a.yml:8",
        "sinks/a.yml:9",
        "sinks/a.yml:13",
        "sources/b.yml:7",
        "sources/b.yml:8",
        "sources/b.yml:11",
    ], out
    text = "\n".join(lines)
    assert "max_commit_retries: rivc retries a conflicting commit itself" in text
    assert "flush_interval_secs: a batch is one run or one Spark micro-batch" in text
    assert "unknown key 'sinks.0.config.colour'" in text
    assert "unknown key 'sinks.1.config.formt', did you mean 'format'" in text
    assert "qos 'twice': expected 0, 1, 2 or at_most_once" in text
    assert "parse_json_payload: rivc parses each payload as JSON" in text
    assert "unknown key 'sources.0.tables.1.config.keepalive'" in text
    assert not (root / "target/manifest.json").exists()


def test_each_rivven_transform_type_points_to_rivcs(make_project):
    from rivc.compiler.importers.aliases import TRANSFORMS

    for rivven, rivc_name in TRANSFORMS.items():
        root = make_project(
            {
                "sinks/t.yml": f"""
                    sinks:
                      - name: out
                        from: stg
                        connector: stdout
                        transforms:
                          - type: {rivven}
                            config: {{fields: [a]}}
                """
            }
        )
        code, out = compile_(root)
        assert code == 2
        assert "sinks/t.yml:6:" in out and f"transform type '{rivven}' is Rivven's" in out
        assert f"rivc's is {rivc_name.split(' ')[0]}" in out


def test_a_rivven_http_webhook_sink_is_a_webhook_sink(make_project):
    root = make_project(
        {
            "sinks/hook.yml": """
                sinks:
                  - name: alerts
                    from: stg
                    connector: http-webhook
                    config:
                      url: https://api.example.com/webhook
                      method: POST
                      headers: {Content-Type: application/json}
                      batch_size: 100
                      timeout_secs: 30
                      retry: {max_attempts: 3, initial_backoff_ms: 1000, max_backoff_ms: 30000}
            """
        }
    )
    code, out = compile_(root)
    assert code == 0, out
    sink = load_project(root).sinks["alerts"]
    c = sink.config
    assert sink.spec.connector == "webhook"
    assert (c.batch_size, c.timeout_s, c.max_attempts) == (100, 30, 3)
    assert (c.initial_backoff_ms, c.max_backoff_ms) == (1000, 30000)
    (root / "sinks/hook.yml").write_text(
        (root / "sinks/hook.yml").read_text().replace("max_backoff_ms: 30000", "jitter: true")
    )
    code, out = compile_(root)
    assert code == 2 and "unknown key 'retry.jitter'" in out, out
