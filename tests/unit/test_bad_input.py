"""Hostile and broken input: one line naming file:line, exit code 2, nothing written, no secret
echoed, and no Python traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rivc.adapters.cli import main

SECRET = "s3cr3t/pa55"


def run(root, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--project-dir", str(root)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.parametrize("command", ["compile", "lint"])
def test_a_non_utf8_byte_in_a_model_is_named_with_its_position(make_project, command):
    root = make_project({})
    (root / "models/stg.sql").write_bytes(b"select 1 as a,\n  'caf\xe9' as b\n")
    code, out = run(root, command)
    assert code == 2
    assert one_line_error(out).startswith("models/stg.sql:2:7: error: not UTF-8: byte 0xe9")
    assert not (root / "target").exists()


def test_a_non_utf8_byte_in_yaml_and_a_binary_project_file(make_project):
    root = make_project({})
    (root / "sources/demo.yml").write_bytes(b"sources:\n  - name: d\xff\n")
    code, out = run(root, "compile")
    assert code == 2 and one_line_error(out).startswith("sources/demo.yml:2:12: error: not UTF-8")
    (root / "rivc_project.yml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    code, out = run(root, "compile")
    assert code == 2
    assert one_line_error(out).startswith("rivc_project.yml:3:1: error: not a text file")


def test_an_integer_beyond_64_bits_is_refused_at_compile_time(make_project):
    root = make_project(
        {
            "sources/demo.yml": """
                sources:
                  - name: demo
                    connector: datagen
                    tables:
                      - name: orders
                        config: {pattern: orders, max_events: 99999999999999999999999}
            """
        }
    )
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("sources/demo.yml:6:")
    assert "max_events" in line and "64-bit" in line


def test_a_yaml_alias_bomb_is_refused_quickly(make_project):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        levels.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    root = make_project({"rivc_project.yml": "name: t\nvars:\n  " + "\n  ".join(levels) + "\n"})
    code, out = run(root, "compile")
    assert code == 2
    assert "YAML aliases expand to more than 1,000,000 values" in one_line_error(out)


@pytest.mark.parametrize("name", ["dbt_project.yml", "rivc_project.yml"])
def test_aliases_of_a_long_string_are_refused_by_their_bytes_in_seconds(make_project, name):
    """A 1 MB string aliased a thousand times stays far under the values cap and would expand
    to a gigabyte: refused at its line, before anything is expanded, with no traceback."""
    big = "x" * 1_000_000
    aliases = ", ".join(["*big"] * 1000)
    text = (
        f"name: t\nprofile: t\nconfig-version: 2\nvars:\n  big: &big {big}\n  many: [{aliases}]\n"
    )
    root = make_project({name: text}, base=name == "rivc_project.yml")
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith(f"{name}:6:") and "more than 16 MiB of text" in line, line


def test_a_url_whose_password_holds_a_slash_names_the_fix_not_the_password(make_project):
    root = make_project(
        {
            "profiles.yml": f"default:\n  connections:\n    db:\n      type: postgres\n"
            f"      url: postgresql://app:{SECRET}@127.0.0.1:5432/shop\n",
            "sources/db.yml": """
                sources:
                  - name: db
                    connector: postgres
                    connection: db
                    tables:
                      - {name: t, query: "select 1 as id"}
            """,
        }
    )
    code, out = run(root, "check")
    assert code == 2
    line = one_line_error(out)
    assert "percent-encode" in line and "s3cr3t" not in line and "pa55" not in line


def test_a_non_numeric_port_is_not_echoed(make_project):
    root = make_project(
        {"profiles.yml": f"default:\n  connections:\n    db: {{type: postgres, port: {SECRET}}}\n"}
    )
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("profiles.yml:3:") and "port" in line
    assert "s3cr3t" not in line


def test_a_column_a_sink_cannot_hold_is_refused_at_compile_time(make_project):
    root = make_project(
        {
            "models/gaps.sql": "select order_id, interval 1 day as gap,\n"
            "  cast(map(1, 'a') as map<int, string>) as tags\n"
            "from {{ source('demo', 'orders') }}\n",
            "sinks/out.yml": """
                sinks:
                  - name: lake
                    from: gaps
                    connector: delta
                    config: {table_uri: out/gaps}
                  - name: files
                    from: gaps
                    connector: files
                    config: {path: out/gaps_avro, format: avro}
                  - name: text
                    from: gaps
                    connector: files
                    config: {path: out/gaps_jsonl, format: jsonl}
            """,
        }
    )
    code, out = run(root, "compile")
    assert code == 2
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines == [
        "sinks/out.yml:3:5: error: sink 'lake' cannot hold column 'gap' of 'gaps', of type "
        "interval: no table or file format rivc writes has an interval type; cast it in the "
        "model, e.g. to bigint seconds or to string",
        "sinks/out.yml:7:5: error: sink 'files' cannot hold column 'gap' of 'gaps', of type "
        "interval: no table or file format rivc writes has an interval type; cast it in the "
        "model, e.g. to bigint seconds or to string",
        "sinks/out.yml:7:5: error: sink 'files' cannot hold column 'tags' of 'gaps', of type "
        "map<int,string>: Avro map keys are strings; cast the keys in the model, or use a "
        "Parquet sink",
        "sinks/out.yml:11:5: error: sink 'text' cannot hold column 'gap' of 'gaps', of type "
        "interval: no table or file format rivc writes has an interval type; cast it in the "
        "model, e.g. to bigint seconds or to string",
    ], out
    assert not (root / "target" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("file", "text", "where"),
    [
        (
            "sinks/out.yml",
            "sinks:\n  - name: lake\n    from: orders\n    connector: delta\n"
            "    config: {table_uri: 'hdfs://nn/lake/orders'}\n",
            "sinks/out.yml:5",
        ),
        ("profiles.yml", "default:\n  warehouse: ftp://host/wh\n", "profiles.yml:2"),
    ],
)
def test_a_location_no_store_can_reach_is_refused_at_compile_time(make_project, file, text, where):
    root = make_project({"models/orders.sql": "select 1 as id\n", file: text})
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith(where), line
    assert "is not a storage rivc can write" in line and "s3://" in line
    assert not (root / "target" / "manifest.json").exists()


def test_object_store_locations_compile(make_project):
    root = make_project(
        {
            "models/orders.sql": "select 1 as id\n",
            "sinks/out.yml": "sinks:\n"
            + "".join(
                f"  - {{name: s{n}, from: orders, connector: delta, config: {{table_uri: '{u}'}}}}\n"
                for n, u in enumerate(
                    ["s3://b/t", "gs://b/t", "abfss://c@acct.dfs.core.windows.net/t", "file:///x/t"]
                )
            ),
        }
    )
    code, out = run(root, "compile")
    assert code == 0, out


REMOTE = "default:\n  spark: {remote: 'sc://spark.example:15002'}\n"


def test_a_remote_spark_with_the_default_warehouse_is_refused(make_project):
    root = make_project({"models/orders.sql": "select 1 as id\n", "profiles.yml": REMOTE})
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("profiles.yml:2"), line
    assert "the default path is on this machine" in line and "s3://" in line
    assert not (root / "target" / "manifest.json").exists()


def test_a_remote_spark_refuses_every_local_data_path_in_one_run(make_project):
    root = make_project(
        {
            "models/orders.sql": "select 1 as id\n",
            "profiles.yml": REMOTE + "  warehouse: s3://lake/wh\n",
            "sinks/out.yml": "sinks:\n"
            "  - {name: a, from: orders, connector: delta, config: {table_uri: lake/orders}}\n"
            "  - {name: b, from: orders, connector: files,\n"
            "     config: {path: /data/orders, format: csv}}\n"
            "  - {name: c, from: orders, connector: iceberg,\n"
            "     config: {namespace: n, table: t, catalog: {warehouse: ice}}}\n"
            "  - {name: d, from: orders, connector: delta,\n"
            "     config: {table_uri: 'file:///shared/orders'}}\n",
        }
    )
    code, out = run(root, "compile")
    assert code == 2
    lines = [line for line in out.splitlines() if "cannot reach" in line]
    assert [":".join(line.split(":")[:2]) for line in lines] == [
        "sinks/out.yml:2",
        "sinks/out.yml:4",
        "sinks/out.yml:6",
    ], out
    assert "sink a: table_uri 'lake/orders' is a path on this machine" in lines[0]
    assert "catalog.warehouse 'ice'" in lines[2]
    assert "file:///shared" not in out  # a URI of a shared mount is the user's promise
    assert not (root / "target" / "manifest.json").exists()


def test_pysparks_own_local_connect_server_keeps_local_paths(make_project):
    root = make_project(
        {
            "models/orders.sql": "select 1 as id\n",
            "profiles.yml": "default:\n  spark: {remote: 'local[2]'}\n",
        }
    )
    code, out = run(root, "compile")
    assert code == 0, out


def test_a_sink_location_that_cannot_be_written_stops_the_run_before_any_node(make_project):
    root = make_project(
        {
            "sinks/out.yml": """
                sinks:
                  - name: lake
                    from: stg
                    connector: delta
                    config: {table_uri: out/lake}
            """
        }
    )
    (root / "out").write_text("a file where the sink's directory would be")
    code, out = run(root, "run")
    assert code == 2
    assert one_line_error(out) == (
        "sinks/out.yml:5:5: error: sink lake: cannot write its location: not found: "
        f"{root / 'out'} is not a directory"
    )
    assert not (root / "warehouse").exists()  # nothing extracted, nothing built


def test_a_dead_letter_location_that_cannot_be_written_is_found_before_any_node(make_project):
    root = make_project(
        {
            "sinks/out.yml": """
                sinks:
                  - name: lake
                    from: stg
                    connector: delta
                    config: {table_uri: out/lake}
                    dead_letter: {connector: files, config: {path: dlq/rows, format: jsonl}}
            """
        }
    )
    (root / "dlq").write_text("a file where the dead letters' directory would be")
    code, out = run(root, "run")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("sinks/out.yml:") and "lake__dead_letter: cannot write" in line, line
    assert not (root / "warehouse").exists()


@pytest.mark.parametrize(
    ("connection", "message"),
    [
        ("wh", "connection 'wh' is not in"),
        ("my", "connection 'my' is a mysql connection, not postgres"),
    ],
)
def test_a_database_sink_names_a_connection_of_its_kind(make_project, connection, message):
    root = make_project(
        {
            "profiles.yml": "default:\n  connections:\n"
            "    my: {type: mysql}\n    warehouse: {type: postgres}\n",
            "models/stg.sql": "select 1 as id\n",
            "sinks/out.yml": f"""
                sinks:
                  - name: out
                    from: stg
                    connector: postgres
                    config:
                      connection: {connection}
                      table: marts.stg
            """,
        }
    )
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("sinks/out.yml:6:7: error: " + message), line
    assert not (root / "target").exists()


def test_a_source_names_a_connection_of_its_database(make_project):
    root = make_project(
        {
            "profiles.yml": "default:\n  connections:\n    my: {type: mysql}\n",
            "sources/shop.yml": """
                sources:
                  - name: shop
                    connector: postgres-cdc
                    connection: my
                    tables:
                      - {name: orders, table: public.orders}
            """,
        }
    )
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("sources/shop.yml:"), line
    assert line.endswith("error: connection 'my' is a mysql connection, not postgres"), line
    assert not (root / "target").exists()


@pytest.mark.parametrize(
    ("kind", "config", "field", "message"),
    [
        ("nats", '{url: "http://x:4222", stream: S, subject: a.b}', "url", "is not nats://host"),
        ("nats", '{url: "nats://x:4222", stream: "my stream", subject: a.b}', "stream", "pattern"),
        ("nats", '{url: "nats://x:4222", stream: S, subject: "a.*"}', "subject", "pattern"),
        ("webhook", '{url: "ftp://x/hook"}', "url", "pattern"),
        ("webhook", '{url: "http://x/hook", batch_size: 0}', "batch_size", "greater than or equal"),
        ("rabbitmq", '{url: "http://x", routing_key: q}', "url", "pattern"),
        ("rabbitmq", '{url: "amqp://x"}', "routing_key", "required"),
    ],
)
def test_a_message_sink_config_is_checked_at_compile_time(
    make_project, kind, config, field, message
):
    root = make_project(
        {
            "models/stg.sql": "select 1 as id\n",
            "sinks/out.yml": f"sinks:\n  - {{name: out, from: stg, connector: {kind}, config: {config}}}\n",
        }
    )
    code, out = run(root, "compile")
    assert code == 2
    line = one_line_error(out)
    assert line.startswith("sinks/out.yml:2:") and field in line and message in line, line
    assert not (root / "target").exists()
