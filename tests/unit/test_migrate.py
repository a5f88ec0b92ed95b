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
    assert [line.split(": ")[1] for line in unmapped] == [
        "exports[orders].compression_level",
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
