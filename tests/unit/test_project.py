from __future__ import annotations

from pathlib import Path

import pytest

from rivc.compiler.errors import CompileFailed, ProjectError
from rivc.compiler.loading.locate import find_project_root
from rivc.compiler.loading.project import load_project


def _error(root: Path, env: dict[str, str] | None = None) -> ProjectError:
    with pytest.raises((ProjectError, CompileFailed)) as info:
        load_project(root, env=env or {})
    exc = info.value
    if isinstance(exc, CompileFailed):
        assert len(exc.errors) == 1, str(exc)
        exc = exc.errors[0]
    assert isinstance(exc, ProjectError)
    return exc


def test_loads_typed_specs(make_project):
    root = make_project({})
    project = load_project(root, env={})
    assert project.name == "t"
    assert set(project.models) == {"stg"}
    assert project.sources["demo.orders"].known_columns()["order_id"] == "bigint"


def test_unknown_key_names_file_line_and_suggestion(make_project):
    root = make_project(
        {
            "sinks/s.yml": """
        sinks:
          - name: s
            from: stg
            connector: delta
            config:
              table_uri: out/t
              mdoe: merge
    """
        }
    )
    exc = _error(root)
    assert exc.location is not None
    assert (exc.location.path.as_posix(), exc.location.line) == ("sinks/s.yml", 7)
    assert "'mode'" in exc.message


def test_unknown_top_level_key_in_source(make_project):
    root = make_project(
        {
            "sources/x.yml": """
        sources:
          - name: x
            connector: datagen
            tabels: []
    """
        }
    )
    exc = _error(root)
    assert exc.location.line == 4 and "tables" in exc.message


def test_wrong_type_and_missing_field(make_project):
    exc = _error(
        make_project(
            {
                "sinks/s.yml": "sinks:\n  - {name: s, from: stg, connector: delta, "
                "config: {table_uri: x, merge_keys: 5}}\n"
            }
        )
    )
    assert exc.location.path == Path("sinks/s.yml") and "merge_keys" in exc.message
    exc = _error(make_project({"sinks/s.yml": "sinks:\n  - {name: s, from: stg}\n"}))
    assert "connector" in exc.message and exc.location.line == 2


def test_unknown_connector_suggests(make_project):
    exc = _error(
        make_project({"sinks/s.yml": "sinks:\n  - {name: s, from: stg, connector: delt}\n"})
    )
    assert "'delta'" in exc.message


def test_env_expansion_and_missing_variable(make_project):
    files = {
        "sinks/s.yml": "sinks:\n  - {name: s, from: stg, connector: delta, config: "
        "{table_uri: '${LAKE:-out}/t', storage_options: {k: '${K}'}}}\n"
    }
    project = load_project(make_project(files), env={"K": "v"})
    assert project.sinks["s"].config.table_uri == "out/t"
    exc = _error(make_project(files))
    assert "K" in exc.message and exc.location.line == 2


def test_secret_values_never_echoed(make_project):
    root = make_project(
        {
            "profiles.yml": """
        default:
          connections:
            db: {type: postgres, password: [hunter2secret]}
    """
        }
    )
    exc = _error(root)
    assert "password" in exc.message and "hunter2secret" not in str(exc)


def test_profiles_lookup_order(make_project, tmp_path, monkeypatch):
    root = make_project({})
    elsewhere = tmp_path / "profiles_dir"
    elsewhere.mkdir()
    (elsewhere / "profiles.yml").write_text("default: {warehouse: wh_from_env_dir}\n")
    project = load_project(root, env={"RIVC_PROFILES_DIR": str(elsewhere)})
    assert project.profile.warehouse == "wh_from_env_dir"
    (root / "profiles.yml").write_text("default: {warehouse: wh_local}\n")
    assert (  # the folder named wins over the project's, as in dbt
        load_project(root, env={"RIVC_PROFILES_DIR": str(elsewhere)}).profile.warehouse
        == "wh_from_env_dir"
    )
    assert load_project(root, env={}).profile.warehouse == "wh_local"


def test_relational_source_checks_connection(make_project):
    root = make_project(
        {
            "profiles.yml": "default:\n  connections:\n    shop_db: {type: postgres, database: shop}\n",
            "sources/pg.yml": """
            sources:
              - name: pg
                connector: postgres
                connection: shop_bd
                tables:
                  - {name: orders, table: public.orders}
        """,
        }
    )
    exc = _error(root)
    assert "shop_db" in exc.message and exc.location.line == 4


def test_mode_needs_its_column(make_project):
    root = make_project(
        {
            "sources/pg.yml": """
        sources:
          - name: pg
            connector: postgres
            connection: db
            tables:
              - {name: orders, table: orders, mode: incremental}
    """
        }
    )
    exc = _error(root)
    assert "cursor_column" in exc.message and exc.location.line == 6


def test_find_project_root_walks_up(make_project):
    root = make_project({})
    deep = root / "models" / "a" / "b"
    deep.mkdir(parents=True)
    assert find_project_root(deep) == root.resolve()
    with pytest.raises(ProjectError):
        find_project_root(root.parent)


def test_invalid_yaml_has_line(make_project):
    exc = _error(make_project({"sinks/s.yml": "sinks:\n  - name: [unclosed\n"}))
    assert exc.location.path == Path("sinks/s.yml") and exc.location.line is not None


def test_a_model_file_name_must_be_a_valid_name(make_project):
    root = make_project({"models/orders.v2.sql": "select 1 as x\n"})
    with pytest.raises((CompileFailed, ProjectError)) as err:
        load_project(root, env={})
    assert "orders.v2" in str(err.value) and "models/orders.v2.sql" in str(err.value)


def test_the_compile_cache_answers_as_a_compile_without_it(make_project):
    """Edits that break and fix a project, each compiled with the cache the previous compiles
    filled and without any: the findings are the same every time."""
    from rivc.compiler import CompileOptions
    from rivc.compiler.driver import CompileCache, analyze
    from rivc.compiler.loading.project import load_project

    root = make_project(  # the base project's demo.orders source
        {
            "models/stg.sql": None,
            "models/a.sql": "select * from {{ source('demo', 'orders') }}\n",
            "models/b.sql": "select order_id, total from {{ ref('a') }}\n",
            "models/c.sql": "select order_id from {{ ref('b') }}\n",
            "models/d.sql": "select * from {{ ref('b') }}\n",  # its columns: b's
            "models/e.sql": "select total from {{ ref('d') }}\n",
        }
    )
    shared = CompileCache()
    edits = [
        {},
        {"models/a.sql": "select order_id from {{ source('demo', 'orders') }}\n"},  # b breaks
        {"models/a.sql": "select * from {{ source('demo', 'orders') }}\n"},  # fixed back
        {"models/a.sql": "select * frm {{ source('demo', 'orders') }}\n"},  # a syntax error
        {"models/a.sql": "select order_id, total from {{ source('demo', 'orders') }}\n"},
        {"models/b.sql": "select order_id, totl from {{ ref('a') }}\n"},
        {"models/b.sql": "select order_id, total from {{ ref('a') }}\n"},
    ]
    for n, edit in enumerate(edits):
        for rel, text in edit.items():
            (root / rel).write_text(text)
        project = load_project(root, env={})
        warm = analyze(project, CompileOptions(), shared, env={})
        cold = analyze(load_project(root, env={}), CompileOptions(), CompileCache(), env={})
        assert [str(f) for f in warm.findings] == [str(f) for f in cold.findings], n
        assert {n: warm.graph.nodes[n].columns for n in warm.graph.nodes} == {
            n: cold.graph.nodes[n].columns for n in cold.graph.nodes
        }, n


PROFILE_WITH_FILES = """
default:
  connections:
    db: {type: postgres, host: 127.0.0.1, database: "{{ env_var('RIVC_T_DB') }}",
         password: "${file:secrets/pw}"}
"""


def _compile_in_own_process(root, env):
    """`rivc compile` in a process of its own: the .env it loads joins that environment."""
    import subprocess
    import sys

    code = "import sys; from rivc.adapters.cli import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, "compile", "--project-dir", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_dotenv_beside_the_profile_and_secret_files_feed_it(make_project):
    """`.env` beside profiles.yml sets what the environment does not (the environment wins);
    `${file:PATH}` reads a mounted secret, relative to profiles.yml's folder."""
    import os

    from rivc.compiler.loading.profiles import dotenv

    root = make_project(
        {
            "profiles.yml": PROFILE_WITH_FILES,
            ".env": "# for the local run\nRIVC_T_DB=shop  # the database\n"
            "export RIVC_T_QUOTED='x # y'\nRIVC_T_KEPT=from_file\n\n",
            "secrets/pw": "s3cr3t-pw\n",
        }
    )
    env = {"RIVC_T_KEPT": "from_env"}
    found = dotenv(root, env)
    assert found == {"RIVC_T_DB": "shop", "RIVC_T_QUOTED": "x # y"}  # the environment wins
    project = load_project(root, env={**env, **found})
    db = project.profile.connections["db"]
    assert (db.database, db.password) == ("shop", "s3cr3t-pw")

    clean = {k: v for k, v in os.environ.items() if not k.startswith("RIVC_T_")}
    done = _compile_in_own_process(root, clean)
    assert done.returncode == 0, done.stdout + done.stderr
    (root / ".env").unlink()  # without it the variable is missing, named at its line
    done = _compile_in_own_process(root, clean)
    assert done.returncode == 2 and "profiles.yml:3" in done.stderr, done.stderr
    assert "RIVC_T_DB" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_dotenv_line_or_a_missing_secret_file_is_named(make_project):
    import os

    root = make_project(
        {"profiles.yml": PROFILE_WITH_FILES, ".env": "RIVC_T_DB=shop\nnot a variable\n"}
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RIVC_T_")}
    done = _compile_in_own_process(root, clean)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{root / '.env'}:2: expected NAME=value" in done.stderr
    (root / ".env").write_text("RIVC_T_DB=shop\n")
    done = _compile_in_own_process(root, clean)
    assert done.returncode == 2 and "profiles.yml:4" in done.stderr, done.stderr
    assert "${file:secrets/pw}: cannot read" in done.stderr and "Traceback" not in done.stderr
