from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rivc.adapters.cli import main

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_init_compiles_and_lints_clean(tmp_path):
    target = tmp_path / "shop"
    code, out, _ = run("init", str(target))
    assert (
        code == 0 and (target / "rivc_project.yml").is_file() and (target / ".gitignore").is_file()
    )
    assert run("compile", "--project-dir", str(target))[0] == 0
    code, out, err = run("lint", "--project-dir", str(target))
    assert code == 0, out + err
    manifest = json.loads((target / "target" / "rivc_manifest.json").read_text())
    kinds = {n["kind"] for n in manifest["nodes"].values()}
    assert kinds == {"source", "model", "sink", "test"}


def test_init_never_overwrites(tmp_path):
    target = tmp_path / "shop"
    target.mkdir()
    (target / "rivc_project.yml").write_text("name: mine\n")
    code, out, _ = run("init", str(target))
    assert code == 0 and "kept" in out
    assert (target / "rivc_project.yml").read_text() == "name: mine\n"


def test_compile_select_checks_the_selection_and_keeps_target_whole(make_project):
    root = make_project(
        {
            "models/a.sql": "select order_id from {{ ref('stg') }}\n",
            "models/b.sql": "select 1 as one\n",
            "sinks/out.yml": "sinks:\n  - {name: o, from: b, connector: stdout}\n",
        }
    )
    assert run("compile", "--project-dir", str(root))[0] == 0
    code, out, err = run("compile", "--project-dir", str(root), "--select", "a+")
    assert code == 0, err
    compiled = sorted(p.name for p in (root / "target/compiled/model").iterdir())
    assert compiled == ["a.sql", "b.sql", "stg.sql"]
    manifest = json.loads((root / "target/rivc_manifest.json").read_text())
    assert manifest["selected"] == ["source:demo.orders", "model:stg", "model:a"]
    for node in manifest["nodes"].values():  # every file the manifest names is there
        if node["compiled_path"]:
            assert (root / "target" / node["compiled_path"]).exists()
    assert (root / "target/jobs/o.py").exists()  # the unselected sink's job still runs


def test_compile_errors_exit_2_one_line_each(make_project):
    root = make_project(
        {
            "models/a.sql": "select nope from {{ ref('stg') }}\n",
            "models/b.sql": "select {{ ref('zz') }}\n",
        }
    )
    code, out, err = run("compile", "--project-dir", str(root))
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("models/a.sql:1:8: error:")
    assert lines[1].startswith("models/b.sql:1:") and not (root / "target/manifest.json").exists()


def test_warm_compile_is_a_cache_hit_and_sees_changes(make_project):
    root = make_project({})
    assert run("compile", "--project-dir", str(root))[0] == 0
    code, out, _ = run("compile", "--project-dir", str(root))
    assert "up to date" in out
    (root / "models/stg.sql").write_text("select order_id from {{ source('demo', 'orders') }}\n")
    code, out, _ = run("compile", "--project-dir", str(root))
    assert code == 0 and "up to date" not in out
    assert "select order_id from" in (root / "target/compiled/model/stg.sql").read_text()
    code, out, _ = run("compile", "--project-dir", str(root), "--param", "region=us")
    assert "up to date" not in out


def test_param_conversion_error_is_exit_2(make_project):
    root = make_project({})
    code, _, err = run("compile", "--project-dir", str(root), "--param", "limit_n=ten")
    assert code == 2 and "limit_n" in err


def test_lint_formats_noqa_and_disable(make_project):
    root = make_project(
        {
            "models/x.sql": "select o.order_id from {{ ref('stg') }} o cross join {{ ref('stg') }} p\n",
            "models/y.sql": "select a.order_id from {{ ref('stg') }} a, {{ ref('stg') }} b -- noqa: RV008\n",
        }
    )
    code, out, err = run("lint", "--project-dir", str(root), "--format", "json")
    data = json.loads(out)
    assert code == 1 and [(d["rule"], d["path"], d["line"]) for d in data] == [
        ("RV008", "models/x.sql", 1)
    ]
    code, out, _ = run("lint", "--project-dir", str(root), "--format", "github")
    assert out.startswith("::warning file=models/x.sql,line=1,col=")
    (root / "rivc_project.yml").write_text("name: t\nlint: {disable: [RV008]}\n")
    assert run("lint", "--project-dir", str(root))[0] == 0


def test_lint_rules_star_into_sink_merge_without_key_nondeterministic(make_project):
    root = make_project(
        {
            "models/wide.sql": "select * from {{ ref('stg') }}\n",
            "models/inc.sql": "{{ config(materialized='incremental', incremental_strategy='merge') }}\n"
            "select order_id, total from {{ ref('stg') }}\n"
            "{% if is_incremental() %}\nwhere total > rand()\n{% endif %}\n",
            "sinks/s.yml": "sinks:\n  - {name: s, from: wide, connector: stdout}\n",
        }
    )
    code, out, _ = run("lint", "--project-dir", str(root), "--format", "json")
    rules = {(d["rule"], d["path"], d["line"]) for d in json.loads(out)}
    assert rules == {
        ("RV005", "models/wide.sql", 1),
        ("RV006", "models/inc.sql", 1),
        ("RV007", "models/inc.sql", 4),
    }
    assert code == 1


def test_lint_paths_filter_and_invalid_project(make_project):
    root = make_project(
        {"models/x.sql": "select o.order_id from {{ ref('stg') }} o, {{ ref('stg') }} p\n"}
    )
    code, out, _ = run(
        "lint", "--project-dir", str(root), "--format", "json", str(root / "models" / "stg.sql")
    )
    assert code == 0 and json.loads(out) == []
    (root / "rivc_project.yml").write_text("name: t\nprofle: x\n")
    code, _, err = run("lint", "--project-dir", str(root))
    assert code == 2 and "rivc_project.yml:2:1" in err and "'profile'" in err


def test_ls_outputs(make_project):
    root = make_project(
        {
            "models/a.sql": "select order_id from {{ ref('stg') }}\n",
            "sinks/s.yml": "sinks:\n  - {name: a_out, from: a, connector: stdout}\n",
        }
    )
    code, out, _ = run("ls", "--project-dir", str(root), "--select", "+a+", "--output", "name")
    assert out.split() == ["source:demo.orders", "stg", "a", "sink:a_out"]
    # each printed name selects that node alone
    for name in out.split():
        code, one, _ = run("ls", "--project-dir", str(root), "-s", name, "--output", "name")
        assert one.split() == [name]
    code, out, _ = run("ls", "--project-dir", str(root), "-s", "a", "--output", "path")
    assert out.split() == ["models/a.sql"]
    code, out, _ = run("ls", "--project-dir", str(root), "-s", "a", "--output", "json")
    assert json.loads(out)["depends_on"] == ["model:stg"]
    code, _, err = run("ls", "--project-dir", str(root), "-s", "b_nope")
    assert code == 2 and "matches nothing" in err


def test_secrets_redacted_in_manifest_and_errors(make_project):
    root = make_project(
        {
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, password: s3cretpw}\n",
            "sources/pg.yml": """
            sources:
              - name: pg
                connector: postgres
                connection: db
                tables:
                  - {name: o, query: "SELECT id FROM orders", columns: {id: bigint}}
        """,
            "sinks/s.yml": "sinks:\n  - {name: s, from: stg, connector: delta, config: {table_uri: "
            "'s3://lake/t', storage_options: {aws_secret_access_key: topsecretkey, "
            "endpoint: 'http://u:pw123@h'}}}\n",
        }
    )
    assert run("compile", "--project-dir", str(root))[0] == 0
    text = (root / "target/manifest.json").read_text() + (
        root / "target/rivc_manifest.json"
    ).read_text()
    assert "topsecretkey" not in text and "pw123" not in text and "s3cretpw" not in text
    assert "****" in text


def test_compile_and_lint_never_import_pyspark(tmp_path):
    project = REPO / "sample_project"
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from rivc.adapters.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n"
        "    assert 'pyspark' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "    raise\n"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    work = tmp_path / "p"
    subprocess.run(["cp", "-r", str(project), str(work)], check=True)
    for args in (["compile"], ["lint"]):
        proc = subprocess.run(
            [sys.executable, "-c", code, *args, "--project-dir", str(work)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "cmd", [["connectors"], ["--help"], ["connectors", "--category", "lakehouse"]]
)
def test_small_commands(cmd):
    assert run(*cmd)[0] == 0


def test_recompile_removes_stale_compiled_files(make_project):
    root = make_project({"models/a.sql": "select order_id from {{ ref('stg') }}\n"})
    assert run("compile", "--project-dir", str(root))[0] == 0
    (root / "models/a.sql").unlink()
    assert run("compile", "--project-dir", str(root))[0] == 0
    assert not (root / "target/compiled/model/a.sql").exists()
    assert (root / "target/compiled/model/stg.sql").exists()


def test_a_spark_connect_token_is_redacted_in_text():
    from rivc.compiler.loading.secrets import redact_text

    text = "cannot reach sc://localhost:5555/;token=abc_DEF-123;session_id=9 (UNAVAILABLE)"
    shown = redact_text(text)
    assert "abc_DEF-123" not in shown
    assert shown == "cannot reach sc://localhost:5555/;token=****;session_id=9 (UNAVAILABLE)"


def test_a_detached_job_refuses_an_extraction_before_any_connection(make_project, capsys):
    """A job run from a copied project (--project) keeps no state between runs: a relational
    source's cursor would be lost, so the job stops before it reaches Spark or the database."""
    from rivc.adapters.spark.job import run_sink_job

    root = make_project(
        {
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: nowhere}\n",
            "sources/pg.yml": """
            sources:
              - name: pg
                connector: postgres
                connection: db
                tables:
                  - {name: o, query: "SELECT id FROM orders", columns: {id: bigint},
                     mode: incremental, cursor_column: id}
        """,
            "sinks/s.yml": "sinks:\n  - {name: s, from: source:pg.o, connector: delta,"
            " config: {table_uri: out/s}}\n",
        }
    )
    assert run("compile", "--project-dir", str(root))[0] == 0
    assert run_sink_job(root, "s", detached=True) == 2
    said = capsys.readouterr().err
    assert "source:pg.o: a job run from a copied project keeps no state between runs" in said
    assert not (root / "out").exists()


@pytest.mark.parametrize("name", ["parse", "debug"])
def test_a_dbt_command_rivc_lacks_is_named_not_mistaken_for_a_neighbour(name):
    code, out, err = run(name)
    assert code == 2 and f"rivc has no `{name}` command" in out + err
    assert "Did you mean" not in out + err


def test_lint_shows_what_rivc_does_not_run_without_failing(make_project):
    """RV012 is a note: a dbt project's semantic models are shown and do not fail CI."""
    root = make_project({"models/sem.yml": "semantic_models:\n  - name: orders\n"})
    code, out, err = run("lint", "--project-dir", str(root))
    assert code == 0 and "models/sem.yml:1:1: warning: semantic_models" in out
    assert "1 finding(s): 0 error(s), 1 warning(s)" in err
    (root / "models/bad.sql").write_text(
        "select o.order_id from {{ ref('stg') }} o, {{ ref('stg') }} p\n"
    )
    assert run("lint", "--project-dir", str(root))[0] == 1  # a real finding still fails


def test_clean_removes_the_clean_targets_inside_the_project_only(make_project):
    root = make_project({})
    assert run("compile", "--project-dir", str(root))[0] == 0
    (root / "dbt_packages/x").mkdir(parents=True)
    code, out, _ = run("clean", "--project-dir", str(root))
    assert code == 0 and out == "removed target/\n" and (root / "dbt_packages/x").is_dir()
    (root / "rivc_project.yml").write_text("name: t\nclean_targets: [dbt_packages, ../elsewhere]\n")
    code, out, err = run("clean", "--project-dir", str(root))
    assert code == 2 and "'../elsewhere' is not a folder inside the project" in out + err
    assert (root / "dbt_packages/x").is_dir()  # refused before anything is removed


def test_a_compile_cache_of_another_version_is_rebuilt_not_a_crash(make_project):
    """An upgrade can move the classes a pickled cache names: the cache is ignored and
    rewritten, and the compile answers as without it."""
    import pickle
    import types

    from rivc.adapters.ops.target import CACHE, CACHE_DIR, FORMAT

    root = make_project({})
    assert CliRunner().invoke(main, ["compile", "--project-dir", str(root)]).exit_code == 0
    gone = types.ModuleType("rivc.compiler.moved_away")
    exec("class Old:\n    pass", gone.__dict__)
    gone.Old.__module__ = "rivc.compiler.moved_away"
    sys.modules["rivc.compiler.moved_away"] = gone
    try:
        stale = pickle.dumps((FORMAT, gone.Old()))
    finally:
        del sys.modules["rivc.compiler.moved_away"]
    cache = root / "target" / CACHE_DIR / CACHE
    cache.write_bytes(stale)
    (root / "models" / "extra.sql").write_text("select 1 as x\n")  # not up to date: loads it
    again = CliRunner().invoke(main, ["compile", "--project-dir", str(root)])
    assert again.exit_code == 0, again.output
    assert cache.read_bytes() != stale
