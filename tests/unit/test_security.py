"""What compile and lint execute: a template reaches nothing outside its context (Jinja's
sandbox, as dbt), in a model, a macro, a generic test, a hook, dbt_project.yml and a compile-time
query; a secret environment variable is refused outside profiles.yml (dbt's rule)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rivc.adapters.cli import main

PAYLOADS = [
    '{{ cycler.__init__.__globals__.os.popen("touch PWNED").read() }}',
    '{{ joiner.__init__.__globals__.os.popen("touch PWNED").read() }}',
    '{{ namespace.__init__.__globals__.os.popen("touch PWNED").read() }}',
    '{{ lipsum.__globals__["os"].popen("touch PWNED").read() }}',
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ config.__class__.__init__.__globals__ }}",
    "{{ modules.re.__builtins__ }}",
    "{{ adapter.dispatch.__func__.__globals__ }}",
    "{{ '{0.__class__.__mro__}'.format(config) }}",
    "{{ (run_query.__globals__ or {}).get('os') }}",
]


def run(root, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--project-dir", str(root)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize("command", ["compile", "lint"])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_template_cannot_leave_its_context_in_a_model(make_project, command, payload):
    root = make_project({"models/evil.sql": f"select 1 as a\n-- {payload}\n"})
    code, out = run(root, command)
    assert code == (2 if command == "compile" else 1), out  # lint: a finding, RV011
    assert "models/evil.sql:2" in out and "Traceback" not in out
    assert "unsafe" in out or "is undefined" in out or "has no attribute" in out, out
    assert not (root / "PWNED").exists()
    compiled = root / "target/compiled"
    assert not any("<class" in p.read_text() for p in compiled.rglob("*.sql"))


@pytest.mark.parametrize(
    "files, where",
    [
        (
            {"macros/m.sql": "{% macro evil() %}{{ cycler.__init__.__globals__ }}{% endmacro %}\n",
             "models/evil.sql": "select 1 as a -- {{ evil() }}\n"},
            "models/evil.sql:1",
        ),
        (
            {"models/evil.sql": "{{ config(pre_hook=\"{{ cycler.__init__.__globals__ }}\") }}\n"
             "select 1 as a\n"},
            "models/evil.sql",
        ),
        (
            {"macros/t.sql": "{% test evil(model) %}select {{ lipsum.__globals__ }}{% endtest %}\n",
             "models/m.yml": "models:\n  - name: stg\n    data_tests: [evil]\n"},
            "models/m.yml",
        ),
    ],
)  # fmt: skip
def test_a_macro_a_hook_and_a_generic_test_are_sandboxed_too(make_project, files, where):
    root = make_project(files)
    code, out = run(root, "compile")
    assert code == 2, out
    assert where in out and "unsafe" in out, out


def test_dbt_project_yml_values_are_sandboxed(make_project):
    root = make_project(
        {
            "dbt_project.yml": "name: evil\nprofile: evil\nconfig-version: 2\n"
            "models:\n  evil:\n    +tags: \"{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}\"\n",
            "models/m.sql": "select 1 as a\n",
        },
        base=False,
    )
    code, out = run(root, "compile")
    assert code == 2 and "unsafe" in out and "Traceback" not in out, out
    assert not (root / "PWNED").exists()


def test_a_compile_time_query_reads_and_writes_no_file(make_project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    written = tmp_path / "written.csv"
    root = make_project(
        {
            "models/evil.sql": "{% set t = run_query(\"select read_text('"
            + str(secret)
            + "') as x\") %}select '{{ t.rows }}' as a\n",
            "models/copy.sql": "{% set t = run_query(\"select * from read_csv('"
            + str(secret)
            + "')\") %}select 1 as a\n",
        }
    )
    code, out = run(root, "compile")
    assert code == 2, out
    assert "TOP-SECRET-VALUE" not in out
    assert not any("TOP-SECRET" in p.read_text() for p in (root / "target").rglob("*.sql"))
    assert not written.exists()


@pytest.mark.parametrize(
    "files, where",
    [
        ({"models/leak.sql": "select '{{ env_var(\"DBT_ENV_SECRET_TOKEN\") }}' as a\n"}, "models/leak.sql:1"),
        (
            {"dbt_project.yml": "name: leak\nprofile: leak\nconfig-version: 2\n"
             "models:\n  leak:\n    +tags: \"{{ env_var('DBT_ENV_SECRET_TOKEN') }}\"\n",
             "models/m.sql": "select 1 as a\n"},
            "dbt_project.yml",
        ),
    ],
)  # fmt: skip
def test_a_secret_env_var_is_refused_outside_profiles_as_dbt_does(
    make_project, monkeypatch, files, where
):
    monkeypatch.setenv("DBT_ENV_SECRET_TOKEN", "hunter2-secret")
    root = make_project(files, base="dbt_project.yml" not in files)
    code, out = run(root, "compile")
    assert code == 2, out
    assert where in out
    assert "Secret env vars are allowed only in profiles.yml or packages.yml" in out
    assert "hunter2-secret" not in out
    written = [p.read_bytes() for p in (root / "target").rglob("*") if p.is_file()]
    assert not any(b"hunter2" in data for data in written)


def test_config_that_is_no_secret_stays_visible_and_diffable(make_project):
    """Secrets are declared, not guessed from a name: a RabbitMQ sink's `routing_key` and a
    model's `unique_key` are in the manifest as written, so `state:modified` sees them change;
    the sink's password (in its URL) is masked."""
    import json

    root = make_project(
        {
            "models/m.sql": "{{ config(materialized='incremental', unique_key='order_id') }}\n"
            "select order_id, total from {{ ref('stg') }}\n",
            "sinks/s.yml": "sinks:\n  - name: s\n    from: m\n    connector: rabbitmq\n"
            "    config: {url: 'amqp://u:hunter22@127.0.0.1:5672/', routing_key: orders_q}\n",
        }
    )
    code, out = run(root, "compile")
    assert code == 0, out
    assert "u:****@127.0.0.1" in (root / "target/manifest.json").read_text()  # dbt's format too
    manifest = json.loads((root / "target/rivc_manifest.json").read_text())
    sink = manifest["nodes"]["sink:s"]["sink_config"]
    assert sink["routing_key"] == "orders_q" and sink["url"] == "amqp://u:****@127.0.0.1:5672/"
    assert manifest["nodes"]["model:m"]["config"]["unique_key"] == ["order_id"]
    (root / "target").rename(root / "prod")
    (root / "sinks/s.yml").write_text(
        (root / "sinks/s.yml").read_text().replace("orders_q", "orders_q2")
    )
    code, out = run(root, "ls", "--select", "state:modified", "--state", str(root / "prod"))
    assert code == 0 and out.split() == ["sink:s"], out


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://guest@127.0.0.1:5672/%2F", "amqp://guest@127.0.0.1:5672/%2F"),
        ("postgresql://app@db:5432/shop", "postgresql://app@db:5432/shop"),
        ("amqp://guest:s3cret@127.0.0.1/%2F", "amqp://guest:****@127.0.0.1/%2F"),
        ("nats://t0ken@127.0.0.1:4222", "nats://****@127.0.0.1:4222"),
        ("https://t0ken@example.com/hook?sig=abc", "https://****@example.com/hook?sig=****"),
    ],
)
def test_a_url_shows_its_user_and_masks_its_password_and_tokens(url, shown):
    from rivc.compiler.loading.secrets import Scrubber, _url_secrets, mask_url

    assert mask_url(url) == shown
    scrubbed = Scrubber(_url_secrets(url, False))(f"failed: {url}; user guest, user app")
    assert scrubbed == f"failed: {shown}; user guest, user app"
