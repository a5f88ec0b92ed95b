"""dbt's targets: a profile's outputs, picked by --target, $RIVC_TARGET or the profile's target:."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rivc.adapters.cli import main

PROFILES = """
default:
  target: dev
  outputs:
    dev:
      warehouse: dev_lake
    prod:
      spark: {remote: "sc://spark.internal:15002"}
"""
MODEL = "select '{{ target.name }}' as target_name, '{{ target.profile_name }}' as profile\n"


def run(root: Path, *args: str, env: str | None = None) -> tuple[int, str]:
    # the env key is given either way, so the runner restores it: --target sets it for the process
    result = CliRunner().invoke(main, [*args, "--project-dir", str(root)], env={"RIVC_TARGET": env})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def compiled(root: Path) -> str:
    return (root / "target/compiled/model/which.sql").read_text()


@pytest.fixture
def project(make_project):
    return make_project({"models/which.sql": MODEL, "profiles.yml": PROFILES})


def test_the_profile_target_is_the_default_and_reaches_jinja(project):
    code, out = run(project, "compile")
    assert code == 0, out
    assert "'dev' as target_name, 'default' as profile" in compiled(project)


def test_target_flag_and_env_pick_another_output(project):
    # prod's Spark is remote and its warehouse is the default folder: refused, which shows that
    # prod's settings are the ones loaded
    for args, env in [(("--target", "prod"), None), ((), "prod"), (("-t", "prod"), "dev")]:
        code, out = run(project, "compile", *args, env=env)
        assert code == 2, out
        assert out.startswith("profiles.yml:7") and "cannot reach" in out, out
    # the flag wins over the environment, and a changed target recompiles (no warm skip)
    assert run(project, "compile")[0] == 0
    assert run(project, "compile", "--target", "dev", env="prod")[0] == 0
    assert "'dev' as target_name" in compiled(project)


def test_an_unknown_target_is_named_with_the_outputs(project):
    code, out = run(project, "compile", "--target", "prd")
    assert code == 2
    assert "target 'prd' is not an output of profile 'default'" in out
    assert "did you mean 'prod'" in out and "outputs: dev, prod" in out
    assert not (project / "target/manifest.json").exists()


def test_a_flat_profile_is_the_target_default(make_project):
    root = make_project({"models/which.sql": MODEL, "profiles.yml": "default:\n  warehouse: w\n"})
    assert run(root, "compile")[0] == 0
    assert "'default' as target_name" in compiled(root)
    code, out = run(root, "compile", "--target", "prod")
    assert code == 2 and "target 'prod': profile 'default' has no outputs" in out, out


def test_outputs_without_a_target_need_one(make_project):
    profiles = "default:\n  outputs:\n    dev: {}\n    prod: {}\n"
    root = make_project({"models/which.sql": MODEL, "profiles.yml": profiles})
    code, out = run(root, "compile")
    assert code == 2 and "has outputs dev, prod and no target" in out, out
    assert run(root, "compile", "--target", "prod")[0] == 0
    assert "'prod' as target_name" in compiled(root)


def test_profiles_are_found_where_dbt_looks_and_render_env_var(make_project, tmp_path):
    """--profiles-dir, then $DBT_PROFILES_DIR, win over the project's profiles.yml (dbt's
    order); `{{ env_var() }}` in a value is rendered, a missing one refused at its line."""
    root = make_project({"models/which.sql": MODEL, "profiles.yml": PROFILES})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "profiles.yml").write_text(
        "default:\n  target: ci\n  outputs:\n"
        "    ci: {warehouse: \"{{ env_var('LAKE_DIR', 'ci_lake') }}\"}\n"
    )

    def target_of(*args: str, **env: str | None) -> str:
        result = CliRunner().invoke(
            main,
            ["compile", *args, "--project-dir", str(root)],
            env={"RIVC_TARGET": None, "RIVC_PROFILES_DIR": None, "DBT_PROFILES_DIR": None, **env},
        )
        assert result.exit_code == 0, result.output
        return compiled(root)

    assert "'dev' as target_name" in target_of()
    assert "'ci' as target_name" in target_of("--profiles-dir", str(elsewhere))
    assert "'ci' as target_name" in target_of(DBT_PROFILES_DIR=str(elsewhere))

    from rivc.compiler.loading.profiles import load_profile

    spec, _, _ = load_profile(root, "default", {"DBT_PROFILES_DIR": str(elsewhere)})
    assert spec.warehouse == "ci_lake"
    spec, _, _ = load_profile(
        root, "default", {"DBT_PROFILES_DIR": str(elsewhere), "LAKE_DIR": "/data/lake"}
    )
    assert spec.warehouse == "/data/lake"
    (elsewhere / "profiles.yml").write_text(
        "default:\n  target: ci\n  outputs:\n    ci:\n      warehouse: \"{{ env_var('NOPE') }}\"\n"
    )
    result = CliRunner().invoke(
        main,
        ["compile", "--project-dir", str(root)],
        env={"DBT_PROFILES_DIR": str(elsewhere), "RIVC_PROFILES_DIR": None, "NOPE": None},
    )
    assert result.exit_code == 2
    assert "elsewhere/profiles.yml:5:7: error: env_var('NOPE'): the variable is not set" in (
        result.output
    )
