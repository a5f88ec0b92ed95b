"""Secrets are declared, and no artifact holds one: a distinct token is planted in every secret
position docs/security.md names (a connection's password and URL, the object store's keys, a
Pushgateway's and OpenLineage's URL, a webhook's URL path, `sig=`, Authorization and Cookie
headers and a header from the environment, a Kafka JAAS config, an Iceberg catalog's URI,
token, credential and header property, NATS, RabbitMQ and MQTT URLs, a DBT_ENV_SECRET_
variable); the project is compiled, run (sinks failing and succeeding, with --debug too),
documented and inspected; then every file rivc wrote and every line it printed is searched for
every token."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rivc_dbs import database

from rivc_testing import write_files

pytestmark = pytest.mark.integration

RIVC = str(Path(sys.executable).with_name("rivc"))
POSITIONS = (
    "connection_password",
    "connection_url",
    "storage_secret",
    "pushgateway",
    "openlineage",
    "notify_path",
    "webhook_path",
    "webhook_sig",
    "webhook_authorization",
    "webhook_cookie",
    "webhook_env",
    "kafka_jaas",
    "catalog_uri",
    "catalog_token",
    "catalog_credential",
    "catalog_header",
    "nats_url",
    "rabbitmq_url",
    "mqtt_password",
    "dbt_env_secret",
)


class Refusing(BaseHTTPRequestHandler):
    """A webhook endpoint that refuses every request (the sink's error names the answer)."""

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        answer = b'{"error": "no"}'
        self.send_response(400)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


def test_no_planted_secret_reaches_a_file_or_a_line_rivc_writes(tmp_path):
    tokens = {p: f"tok{p.replace('_', '')}{secrets.token_hex(6)}" for p in POSITIONS}
    t = tokens
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}"
    with database("postgres") as db:
        db.execute("CREATE TABLE orders (id int PRIMARY KEY, amount numeric(10,2))")
        db.execute("INSERT INTO orders SELECT g, g * 1.5 FROM generate_series(1, 20) g")
        root = write_files(
            tmp_path / "p",
            {
                "rivc_project.yml": "name: planted\n",
                "profiles.yml": f"""
default:
  storage: {{aws_secret_access_key: {t["storage_secret"]}, region: us-east-1}}
  metrics:
    textfile: out/metrics.prom
    pushgateway: "http://ci:{t["pushgateway"]}@127.0.0.1:9/"
  openlineage: {{url: "http://ol:{t["openlineage"]}@127.0.0.1:9", file: out/lineage.jsonl}}
  notify: {{url: "http://127.0.0.1:9/services/{t["notify_path"]}"}}
  connections:
    db: {{type: postgres, host: 127.0.0.1, user: postgres, database: {db.name},
          password: {t["connection_password"]}}}
    other: {{type: postgres, url: "postgresql://postgres:{t["connection_url"]}@127.0.0.1:9/x"}}
""",
                "sources/s.yml": f"""
sources:
  - name: pg
    connector: postgres
    connection: db
    tables: [{{name: orders, table: public.orders}}]
  - name: k
    connector: kafka
    tables:
      - name: events
        columns: {{id: bigint}}
        config:
          brokers: [127.0.0.1:9]
          topics: [events]
          options:
            kafka.sasl.jaas.config: 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{t["kafka_jaas"]}";'
  - name: m
    connector: mqtt
    tables:
      - name: readings
        columns: {{v: bigint}}
        config: {{url: "mqtt://127.0.0.1:9", topics: [r], username: u, password: {t["mqtt_password"]}}}
""",
                "models/amounts.sql": "select id, amount from {{ source('pg', 'orders') }}\n",
                "sinks/out.yml": f"""
sinks:
  - name: hook
    from: amounts
    connector: webhook
    config:
      url: "{hook}/services/{t["webhook_path"]}?sig={t["webhook_sig"]}"
      headers: {{Authorization: "Bearer {t["webhook_authorization"]}", Cookie: "s={t["webhook_cookie"]}", Content-Type: application/json}}
      headers_env: {{X-Key: "key {{RIVC_PLANTED_KEY}}"}}
      max_attempts: 1
  - name: ice
    from: amounts
    connector: iceberg
    health_check: false
    config:
      namespace: n
      table: t
      catalog:
        type: rest
        uri: "http://cat:{t["catalog_uri"]}@127.0.0.1:9"
        token: {t["catalog_token"]}
        credential: "client:{t["catalog_credential"]}"
        properties: {{header.Authorization: "Bearer {t["catalog_header"]}"}}
  - name: bus
    from: amounts
    connector: nats
    config: {{url: "nats://{t["nats_url"]}@127.0.0.1:9", stream: s, subject: s.x}}
  - name: rabbit
    from: amounts
    connector: rabbitmq
    config: {{url: "amqp://guest:{t["rabbitmq_url"]}@127.0.0.1:9/", routing_key: q}}
  - name: lake
    from: amounts
    connector: delta
    config: {{table_uri: out/lake}}
""",
            },
        )
        env = {
            **os.environ,
            "RIVC_PLANTED_KEY": t["webhook_env"],
            "DBT_ENV_SECRET_PLANTED": t["dbt_env_secret"],
        }
        printed = []
        for args in (
            ("compile",),
            ("run", "--select", "+hook", "+ice", "+bus", "+rabbit", "+lake"),
            ("run", "--select", "hook", "ice", "--debug"),
            ("ls", "--output", "json"),
            ("docs", "generate"),
            ("state", "show"),
            ("metrics",),
            ("doctor",),
            ("check",),
        ):
            done = subprocess.run(
                [RIVC, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
            )
            printed.append(f"$ rivc {' '.join(args)}\n{done.stdout}{done.stderr}")
        server.shutdown()
        server.server_close()
    output = "\n".join(printed)
    assert "sink:lake" in output and "error" in output  # it ran: some sinks failed, one not
    assert "notify: posting to http://127.0.0.1:9/**** failed" in output  # and told the hook
    written = [
        p
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] not in ("profiles.yml", "sources", "sinks")
    ]
    assert any(p.name == "manifest.json" for p in written) and any(
        p.name == "state.db" for p in written
    )
    found = []
    for name, token in tokens.items():
        if token in output:
            found.append(f"{name}: printed")
        for path in written:
            if token.encode() in path.read_bytes():
                found.append(f"{name}: {path.relative_to(root)}")
    assert found == [], found
