"""`rivc import rivet`: a Rivet config (tests/fixtures/rivet/rivet.yaml, written after the
seed's examples) becomes a project that compiles, and what has no equivalent is listed."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from rivc.adapters.cli import main

CONFIG = Path(__file__).parents[1] / "fixtures/rivet/rivet.yaml"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_a_rivet_config_becomes_a_project_that_compiles(tmp_path):
    root = tmp_path / "proj"
    code, out = run("import", "rivet", str(CONFIG), "--project-dir", str(root))
    assert code == 0, out
    (source,) = yaml.safe_load((root / "sources/rivet.yml").read_text())["sources"]
    assert source["connector"] == "postgres" and source["tuning"]["profile"] == "safe"
    tables = {t["name"]: t for t in source["tables"]}
    assert tables["users"]["mode"] == "incremental"
    assert tables["users"]["meta_columns"] == {"exported_at": True, "row_hash": True}
    assert tables["orders"]["chunk_size"] == 50000 and tables["orders"]["skip_empty"] is True
    assert tables["events"]["days_window"] == 7
    sinks = {s["name"]: s for s in yaml.safe_load((root / "sinks/rivet.yml").read_text())["sinks"]}
    assert sinks["users"]["from"] == "source:rivet.users"
    assert sinks["users"]["config"]["compression"] == "zstd"  # Rivet's default, said outright
    assert sinks["orders"]["config"]["path"] == "s3://my-bucket/exports/data/orders"
    assert sinks["orders"]["config"]["storage_options"] == {"AWS_REGION": "us-east-1"}
    assert sinks["events"]["config"] == {"format": "csv", "path": "gs://b/events"}
    profile = yaml.safe_load((root / "profiles.yml").read_text())
    assert profile["default"]["connections"]["rivet"] == {
        "type": "postgres",
        "url_env": "DATABASE_URL",
    }
    unmapped = [line for line in out.splitlines() if "no equivalent" in line]
    assert sinks["orders"]["config"]["compression_level"] == 9  # zstd's level, carried
    assert [line.split(": ")[1] for line in unmapped] == [
        "exports[orders].destination.access_key_env",
        "exports[orders].destination.secret_key_env",
        "exports[events].destination.credentials_file",
    ]
    env = {"DATABASE_URL": "postgresql://someone@127.0.0.1/db"}
    code, out = run("compile", "--project-dir", str(root), env=env)
    assert code == 0, out
    assert "3 sources, 3 sinks" in out


def test_nothing_is_written_over_and_other_files_are_refused_by_line(tmp_path):
    root = tmp_path / "proj"
    (root / "sinks").mkdir(parents=True)
    (root / "sinks/rivet.yml").write_text("sinks: []\n")
    code, out = run("import", "rivet", str(CONFIG), "--project-dir", str(root))
    assert code == 2 and "sinks/rivet.yml exists" in out
    assert sorted(p.name for p in root.rglob("*")) == ["rivet.yml", "sinks"]
    other = tmp_path / "other.yaml"
    other.write_text("version: '1.0'\nsources:\n  pg: {connector: postgres-cdc}\n")
    code, out = run("import", "rivet", str(other), "--project-dir", str(tmp_path / "p2"))
    assert code == 2
    assert (
        out.strip()
        == "other.yaml:1:1: error: not a Rivet config: it needs `source:` and `exports:`"
    )
    assert not (tmp_path / "p2").exists()


def test_a_seed_format_file_in_the_project_is_refused_with_a_pointer(make_project):
    rivven = "version: '1.0'\nbroker:\n  bootstrap_servers: [b:9092]\nsinks:\n  lake:\n    connector: delta-lake\n"
    root = make_project({"sinks/lake.yml": rivven})
    code, out = run("compile", "--project-dir", str(root))
    assert code == 2
    assert out.startswith("sinks/lake.yml:1:1: error: this looks like a Rivven Connect file")
    assert "docs/migrate.md" in out and len(out.strip().splitlines()) == 1
    (root / "sinks/lake.yml").unlink()
    (root / "sources/rivet.yml").write_text(CONFIG.read_text())
    code, out = run("compile", "--project-dir", str(root))
    assert code == 2 and "rivc import rivet <file>" in out, out
    assert out.startswith("sources/rivet.yml:7:1: error: this is a Rivet config"), out


RIVVEN = Path(__file__).parents[1] / "fixtures/rivven/connect.yaml"


def test_a_rivven_connect_file_becomes_a_project_and_lists_what_it_could_not_carry(tmp_path):
    root = tmp_path / "proj"
    code, out = run("import", "rivven", str(RIVVEN), "--project-dir", str(root))
    assert code == 0, out
    profile = yaml.safe_load((root / "profiles.yml").read_text())["default"]["connections"]
    assert profile["shop"] == {
        "type": "postgres",
        "host": "db.internal",
        "port": 5432,
        "database": "shop",
        "user": "replicator",
        "password_env": "POSTGRES_PASSWORD",  # ${POSTGRES_PASSWORD}: never expanded, never written
        "sslmode": "require",
    }
    sources = {
        s["name"]: s for s in yaml.safe_load((root / "sources/rivven.yml").read_text())["sources"]
    }
    assert sources["shop"]["config"] == {
        "slot_name": "rivven_slot",
        "publication_name": "rivven_pub",
    }
    assert [t["table"] for t in sources["shop"]["tables"]] == ["public.orders", "public.customers"]
    assert sources["legacy"]["config"] == {"server_id": 12345}
    sinks = {s["name"]: s for s in yaml.safe_load((root / "sinks/rivven.yml").read_text())["sinks"]}
    # the topic cdc.shop carries two tables: one sink each, each its own Delta table
    assert sinks["lake_orders"]["from"] == "source:shop.orders"
    assert sinks["lake_customers"]["config"]["table_uri"] == "s3://lake/cdc/customers"
    assert (
        sinks["alerts"]["connector"] == "webhook"
        and sinks["alerts"]["from"] == "source:legacy.invoices"
    )
    # a header that names a ${VAR} moves to headers_env, filled in at run time, never expanded
    assert sinks["alerts"]["config"]["headers_env"] == {"Authorization": "Bearer {ALERTS_TOKEN}"}
    assert sinks["alerts"]["config"]["headers"] == {
        "Content-Type": "application/json",
        "X-Api-Key": "literal-key",
    }
    assert sinks["analytics"]["connector"] == "clickhouse"  # Rivven's config, as it is
    # ${CLICKHOUSE_PASSWORD}: the variable's name, read when the sink runs, never expanded
    assert sinks["analytics"]["config"]["password_env"] == "CLICKHOUSE_PASSWORD"
    assert "password" not in sinks["analytics"]["config"]
    assert sinks["debug"]["from"] == "source:sensors.sensors"
    assert "warehouse" not in sinks
    for line in (
        "no equivalent: broker: rivc has no broker",
        "no equivalent: sources.shop.dead_letter_topic:",
        "no equivalent: sources.legacy.config.password: written into profiles.yml as it is",
        "no equivalent: sources.sensors: declare the columns",
        "no equivalent: sources.audit: connector sqlserver-cdc: rivc has no such source",
        "no equivalent: sinks.lake.consumer_group:",
        "no equivalent: sinks.lake.transforms MaskField: write it as rivc's mask",
        "no equivalent: sinks.debug.topics nowhere: no source in this file publishes it",
        "no equivalent: sinks.warehouse: connector snowflake: rivc has no such sink",
        "no equivalent: sinks.alerts.config.headers.X-Api-Key: a literal secret",
    ):
        assert line in out, (line, out)

    # what the listing asks for: the MQTT table's columns; then the project compiles as it is
    text = (root / "sources/rivven.yml").read_text()
    (root / "sources/rivven.yml").write_text(
        text.replace("columns: {}", "columns: {device: string, temp: double}")
    )
    code, out = run("compile", "--project-dir", str(root))
    assert code == 0, out

    again, out = run("import", "rivven", str(RIVVEN), "--project-dir", str(root))
    assert again == 2 and "exists: import into a project without it" in out


def test_a_rivven_file_in_sinks_points_to_the_import(tmp_path):
    root = tmp_path / "p"
    (root / "sinks").mkdir(parents=True)
    (root / "rivc_project.yml").write_text("name: p\n")
    (root / "sinks/connect.yml").write_text(RIVVEN.read_text())
    code, out = run("compile", "--project-dir", str(root))
    assert code == 2
    assert "sinks/connect.yml:2:1: error: this looks like a Rivven Connect file (`version:`)" in out
    assert "`rivc import rivven <file>`" in out


def test_a_rivven_vault_password_becomes_a_vault_reference(tmp_path):
    """Rivven's `secrets: {provider: vault}` and `password: vault:PATH#FIELD`: the password is
    rivc's ${vault:...} (read from Vault when the profile is, tests/unit/test_vault.py), never a
    literal; the provider block points to Vault's own variables."""
    connect = tmp_path / "connect.yaml"
    connect.write_text(
        "secrets:\n  provider: vault\n  config: {address: 'https://vault.example.com'}\n"
        "sources:\n  db:\n    connector: postgres-cdc\n    topic: cdc.db\n"
        "    config: {host: db, database: shop, user: rep,"
        " password: 'vault:secret/data/postgres#password', tables: [public.orders]}\n"
    )
    root = tmp_path / "proj"
    code, out = run("import", "rivven", str(connect), "--project-dir", str(root))
    assert code == 0, out
    conn = yaml.safe_load((root / "profiles.yml").read_text())["default"]["connections"]["db"]
    assert conn["password"] == "${vault:secret/data/postgres#password}"
    assert "secrets: rivc reaches Vault as its CLI does: set VAULT_ADDR and VAULT_TOKEN" in out
    assert "password: written into profiles.yml as it is" not in out
