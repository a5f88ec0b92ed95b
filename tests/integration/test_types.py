"""Exact values: edge values of every common type, extracted by each reader into Delta, Iceberg
and Parquet, read back with deltalake, pyiceberg and pyarrow, and compared value by value with
what the database itself returns (docs/types.md)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from rivc_dbs import database, project
from rivc_types import PG_EXPECTED, PG_ROWS, PG_TABLE, READERS, compare, expected_rows, f32

from rivc_testing import at_entry, iceberg_catalog, last_run, rivc, write_files

pytestmark = pytest.mark.integration

NULL_LIKE = ["NA", "N/A", "n/a", "null", "NULL", "nan", "-nan", "#N/A", "", None]

SINKS = """
sinks:
  - {name: lake, from: source:src.types, connector: delta, config: {table_uri: out/delta}}
  - {name: ice, from: source:src.types, connector: iceberg,
     config: {namespace: t, table: types}}
  - {name: files, from: source:src.types, connector: files,
     config: {path: out/parquet, format: parquet}}
"""


def delivered(root: Path) -> dict[str, list[dict[str, Any]]]:
    ice = iceberg_catalog(root)
    files = sorted((root / "out/parquet").rglob("*.parquet"))
    return {
        "delta": DeltaTable(str(root / "out/delta")).to_pyarrow_table().to_pylist(),
        "iceberg": ice.load_table("t.types").scan().to_arrow().to_pylist(),
        "parquet": [r for f in files for r in pq.read_table(f).to_pylist()],
    }


@pytest.mark.parametrize("reader", list(READERS))
def test_postgres_type_matrix_arrives_exactly(spark, tmp_path, reader):
    query, parallel = READERS[reader]
    with database("postgres") as db:
        db.execute(PG_TABLE, "INSERT INTO types VALUES " + ", ".join(PG_ROWS))
        root = project(
            tmp_path,
            db,
            f"""
            - name: types
              query: "{query}"
              parallel: {parallel}
              chunk_column: id
              mode: {"chunked" if parallel > 1 else "full"}
              chunk_size: 3
            """,
            {},
            SINKS,
        )
        result = rivc(root, "run")
        assert result.exit_code == 0, result.output
        via = {"copy": "via COPY", "copy_spark": "via COPY in Spark", "jdbc": "via JDBC"}[reader]
        runs = last_run(root)["results"]
        assert via in next(r for r in runs if r["node"] == "source:src.types")["message"]
        want = expected_rows(db, PG_EXPECTED)
        for sink, rows in delivered(root).items():
            compare(f"{reader} -> {sink}", rows, want)
        # every table opens again after the run, and a second run adds the same rows again
        assert rivc(root, "run").exit_code == 0
        assert DeltaTable(str(root / "out/delta")).to_pyarrow_table().num_rows == 2 * len(want)


PG_REFUSED = {
    # column type, value that does not fit the delivered type, words of the refusal
    "big": ("numeric", "12345678901234567890123.45", "does not fit decimal(38,18)"),
    "small": ("numeric", "0.0000000000000000001234", "does not fit decimal(38,18)"),
    "nan": ("numeric", "'NaN'", "does not fit decimal(38,18)"),
    "avg": ("numeric", "1.00/7", "does not fit decimal(38,18)"),
    "wide": ("numeric(50,10)", "12345678901234567890123456789.5", "does not fit decimal(38,10)"),
    "tsinf": ("timestamptz", "'infinity'", "is not a timestamp"),
    "dinf": ("date", "'-infinity'", "is not a date"),
    "bc": ("date", "'0044-03-15 BC'", "is not a date"),
    # Spark's arrays have one dimension and start at 1 (read through JDBC by every reader)
    "arr2d": ("text[]", "'{{a,b},{c,NULL}}'", "more than one dimension"),
    "int2d": ("int4[]", "'{{1,2},{3,4}}'", "more than one dimension"),
    "lower": ("int4[]", "'[0:1]={7,8}'", "does not start at 1"),
}
# the type each refusal suggests, and the value the database holds (declared below: it works)
PG_ADVICE = {"avg": "decimal(38,20)", "big": "decimal(38,15)", "arr2d": "string"}
BIG = 20 << 20  # a text value larger than the COPY reader's CSV block
EDGE = """
CREATE TABLE edge (id int, n52 numeric(5,-2), n25 numeric(2,5), at timestamptz, big text);
INSERT INTO edge VALUES
    (1, 12345, 0.00099, '2025-01-01 00:00:01+00', repeat('x', {big})),
    (2, -9999900, -0.00001, '2025-06-01 12:00:00.5+02', repeat('y', 300000)),
    (3, NULL, NULL, NULL, NULL);
CREATE TABLE arrays (id int, xs int4[], ts text[]);
INSERT INTO arrays VALUES (1, '{{1,NULL,3}}', '{{"a,b",NULL,"{{}}"}}'), (2, '{{}}', '{{}}'), (3, NULL, NULL);
"""
EDGE_EXPECTED = (
    "SELECT id, n52, n25, (at AT TIME ZONE 'UTC') AS at, big FROM edge ORDER BY id",
    "SELECT id, xs, ts FROM arrays ORDER BY id",
)


@pytest.mark.parametrize("reader", ["copy", "jdbc"])
def test_postgres_values_that_do_not_fit_are_refused_by_name(spark, tmp_path, reader):
    with database("postgres") as db:
        tables = []
        for name, (kind, value, _) in PG_REFUSED.items():
            db.execute(f"CREATE TABLE {name} (id int, v {kind})")
            db.execute(f"INSERT INTO {name} VALUES (1, NULL), (2, {value})")
            extra = ", decode('00', 'hex') AS b" if reader == "jdbc" else ""
            tables.append(f'- {{name: {name}, query: "SELECT *{extra} FROM {name}"}}')
        # the declared types that fix it: the refusals' advice followed as written (`columns:`
        # names only the columns it types; chunk_column is another)
        db.execute(
            "CREATE TABLE fixed (id int, avg numeric, txt numeric, dbl numeric, adv numeric, "
            "big numeric, arr2d text[])"
        )
        db.execute(
            "INSERT INTO fixed VALUES (1, 1.00/7, 1.00/7, 'NaN', 1.00/7, "
            "12345678901234567890123.45, '{{a,b},{c,NULL}}'), (2, 2.5, 1e-30, 2.5, 2.5, 1, '{}')"
        )
        tables.append(
            "- {name: fixed, table: fixed, mode: chunked, chunk_column: id, columns: "
            "{avg: 'decimal(38,4)', txt: string, dbl: double, "
            f"adv: '{PG_ADVICE['avg']}', big: '{PG_ADVICE['big']}', arr2d: {PG_ADVICE['arr2d']}}}}}"
        )
        # values at the edges of what each reader carries, exactly
        db.execute(EDGE.format(big=BIG))
        extra = ", decode('00', 'hex') AS b" if reader == "jdbc" else ""
        tables += [
            f'- {{name: edge, query: "SELECT *{extra} FROM edge", columns: {{at: timestamp}}}}',
            f'- {{name: edge2, query: "SELECT *{extra} FROM edge", columns: {{at: timestamp}}, '
            "parallel: 2, mode: chunked, chunk_column: id, chunk_size: 1}",
            "- {name: arrays, table: arrays}",
        ]
        models = {"big_view": "select id, big from {{ source('src', 'edge') }}"}
        sinks = "sinks:\n" + "".join(
            f"  - {{name: s_{n}, from: source:src.{n}, connector: delta, "
            f"config: {{table_uri: out/{n}}}}}\n"
            for n in [*PG_REFUSED, "fixed", "edge", "edge2", "arrays"]
        )
        # a model's batch staged by Spark (more than 256 KiB in one value) into Parquet
        sinks += (
            "  - {name: s_big_view, from: big_view, connector: files, "
            "config: {path: out/big_view, format: parquet}}\n"
        )
        root = project(tmp_path, db, "\n".join(tables), models, sinks)
        result = rivc(root, "run")
        assert result.exit_code == 1, result.output
        runs = {r["node"]: r for r in last_run(root)["results"]}
        for name, (kind, _, words) in PG_REFUSED.items():
            run = runs[f"source:src.{name}"]
            assert run["status"] == "error", name
            error = run["error"]
            assert "\n" not in error and "Traceback" not in error and "SQLSTATE" not in error
            message = at_entry(error, "sources/src.yml")
            assert message.startswith(f"source src.{name}: column v ({kind}) value '"), error
            assert words in error and "columns:" in error, error
            if name in PG_ADVICE:
                assert f"(e.g. v: {PG_ADVICE[name]})" in error, error
            assert runs[f"sink:s_{name}"]["status"] == "skipped"
            assert not (root / "out" / name).exists()
        for name in ("fixed", "edge", "edge2", "arrays", "big_view"):
            assert runs[f"sink:s_{name}"]["status"] == "success", (name, runs)
        rows = sorted(
            DeltaTable(str(root / "out/fixed")).to_pyarrow_table().to_pylist(),
            key=lambda r: r["id"],
        )
        assert [r["avg"] for r in rows] == [Decimal("0.1429"), Decimal("2.5000")]
        assert [r["txt"] for r in rows] == ["0.14285714285714285714", "0." + "0" * 29 + "1"]
        assert math.isnan(rows[0]["dbl"]) and rows[1]["dbl"] == 2.5
        assert [r["adv"] for r in rows] == [Decimal("0.14285714285714285714"), Decimal("2.5")]
        assert [r["big"] for r in rows] == [Decimal("12345678901234567890123.45"), 1]
        assert [r["arr2d"] for r in rows] == ["{{a,b},{c,NULL}}", "{}"]
        edge, arrays = (expected_rows(db, sql) for sql in EDGE_EXPECTED)
        for name, want in (("edge", edge), ("edge2", edge), ("arrays", arrays)):
            got = DeltaTable(str(root / "out" / name)).to_pyarrow_table().to_pylist()
            compare(f"{reader} -> {name}", [{k: r[k] for k in want[0]} for r in got], want)
        big = pq.read_table(root / "out/big_view").to_pylist()
        compare("big_view -> files", big, [{"id": r["id"], "big": r["big"]} for r in edge])


MY_TABLE = """
CREATE TABLE types (
    id int PRIMARY KEY, t1 tinyint(1), tu tinyint unsigned, bu bigint unsigned, i int,
    d6530 decimal(65,30), d102 decimal(10,2), f float, db double, bt bit(8), b1 bit(1),
    st set('a','b'), en enum('x','NA'), tm time(6), y year, d date, dt datetime(6),
    ts timestamp(6) NULL, j json, bl blob, vc varchar(20), ch char(3)
)
"""
MY_ROWS = [
    "(1, 2, 255, 18446744073709551615, -2147483648, 0.000000000000000000000000000001,"
    " 12345678.91, 1.5, -0.0, b'10101010', b'1', '', 'NA', '838:59:59', 2026,"
    " '1000-01-01', '1000-01-01 00:00:00', '1970-01-01 00:00:01', '{\"a\": 1}', x'00ff',"
    " 'a\\\\', 'NA')",
    "(2, -128, 0, 0, 2147483647, 12345678.123456789012345678901234567890, -0.01,"
    " -3.4e38, 1.7976931348623157e308, b'00000000', b'0', 'a,b', 'x', '-01:30:00.500000',"
    " 1901, '9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999',"
    " 'null', '', 'N/A', '')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, 'null', 'nan')",
]
MY_EXPECTED = """
SELECT id, t1, tu, bu, i, d6530, d102, f, db, LPAD(BIN(bt), 8, '0') AS bt, b1 = 1 AS b1,
       CAST(st AS CHAR) AS st, CAST(en AS CHAR) AS en, tm, y, d, dt, ts, j, bl, vc, ch
FROM types ORDER BY id
"""


def _mysql_expected(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pymysql's Python values in the forms docs/types.md promises."""
    out = []
    for r in rows:
        r = dict(r)
        if r["tm"] is not None:  # a duration as ISO 8601
            micros = r["tm"] // __import__("datetime").timedelta(microseconds=1)
            sign, micros = ("-", -micros) if micros < 0 else ("", micros)
            h, rest = divmod(micros, 3_600_000_000)
            m, rest = divmod(rest, 60_000_000)
            s, us = divmod(rest, 1_000_000)
            frac = f".{us:06d}".rstrip("0") if us else ""
            r["tm"] = f"{sign}PT{h}H{m}M{s}{frac}S"
        if r["b1"] is not None:
            r["b1"] = bool(r["b1"])
        if r["bu"] is not None:
            r["bu"] = Decimal(r["bu"])
        if r["f"] is not None:
            r["f"] = f32(r["f"])
        out.append(r)
    return out


def test_mysql_type_matrix_arrives_exactly(spark, tmp_path):
    with database("mysql") as db:
        db.execute(MY_TABLE, "INSERT INTO types VALUES " + ", ".join(MY_ROWS))
        root = project(tmp_path, db, "- {name: types, table: types}", {}, SINKS)
        result = rivc(root, "run")
        assert result.exit_code == 0, result.output
        want = _mysql_expected(expected_rows(db, MY_EXPECTED))
        for sink, rows in delivered(root).items():
            for row in rows:
                if row["f"] is not None:
                    row["f"] = f32(row["f"])
            compare(f"mysql -> {sink}", rows, want)


MY_REFUSED = {
    "zero": ("date", "'0000-00-00'", "is not a date"),
    "month0": ("date", "'2026-00-15'", "is not a date"),
    "zerots": ("datetime", "'0000-00-00 00:00:00'", "is not a timestamp"),
    "big": ("decimal(65,30)", "123456789.5", "does not fit decimal(38,30)"),
}


def test_mysql_values_that_do_not_fit_are_refused_by_name(spark, tmp_path):
    with database("mysql") as db:
        tables = []
        for name, (kind, value, _) in MY_REFUSED.items():
            db.execute(
                "SET SESSION sql_mode = ''",
                f"CREATE TABLE {name} (id int, v {kind})",
                f"INSERT INTO {name} VALUES (1, NULL), (2, {value})",
            )
            tables.append(f"- {{name: {name}, table: {name}}}")
        root = project(tmp_path, db, "\n".join(tables), {})
        result = rivc(root, "run")
        assert result.exit_code == 1
        runs = {r["node"]: r for r in last_run(root)["results"]}
        for name, (_, _, words) in MY_REFUSED.items():
            error = runs[f"source:src.{name}"]["error"]
            assert at_entry(error, "sources/src.yml").startswith(f"source src.{name}: column v (")
            assert words in error and "\n" not in error and "SQLSTATE" not in error, error


NON_FINITE = """
select 1 as id, cast('NaN' as double) as x, cast('Infinity' as float) as y, true as b
union all select 2, cast('Infinity' as double), cast('-Infinity' as float), false
union all select 3, cast('-Infinity' as double), cast('NaN' as float), null
union all select 4, -0.0d, 1.5f, true
"""


@pytest.mark.parametrize("threshold", ["0", "64MB"])  # executors' files, or delta-rs
def test_non_finite_floats_keep_delta_tables_readable(spark, tmp_path, threshold):
    from rivc_testing import write_files

    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: nf\n",
            "models/floats.sql": "{{ config(materialized='table') }}\n" + NON_FINITE,
            "sinks/out.yml": (
                "sinks:\n  - {name: lake, from: floats, connector: delta, config: "
                f"{{table_uri: out/lake, spark_write_threshold: '{threshold}'}}}}\n"
            ),
        },
    )
    for _ in range(2):  # the second run reads the tables the first one wrote
        result = rivc(root, "run")
        assert result.exit_code == 0, result.output
    for table in (root / "out/lake", *sorted((root / "warehouse").glob("*floats*"))):
        dt = DeltaTable(str(table))
        for action in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
            assert action["num_records"] is not None
        for log in sorted((table / "_delta_log").glob("*.json")):
            for line in log.read_text().splitlines():
                json.loads(line, parse_constant=_refuse_constant)
                stats = json.loads(line).get("add", {}).get("stats")
                if stats:
                    json.loads(stats, parse_constant=_refuse_constant)
        by_id = {r["id"]: r for r in dt.to_pyarrow_table().to_pylist()}
        rows = [by_id[i] for i in (1, 2, 3, 4)]
        assert [str(r["x"]) for r in rows] == ["nan", "inf", "-inf", "-0.0"]
        assert [str(r["y"]) for r in rows] == ["inf", "-inf", "nan", "1.5"]
        # no file range for floats: Parquet leaves NaN out of min/max and JSON has no Infinity
        for action in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
            assert action.get("min.x") is None and action.get("max.y") is None


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"{name} in a Delta log: not JSON")


TEXT_SINKS = "sinks:\n" + "".join(
    f"  - {{name: {fmt}, from: source:src.types, connector: files, "
    f"config: {{path: out/{fmt}, format: {fmt}}}}}\n"
    for fmt in ("csv", "jsonl", "json", "avro")
)


def _from_text(text: Any, want: Any) -> Any:
    """A value read back from CSV or JSON, in the Python type of the value it stands for."""
    from datetime import date

    if text is None or want is None:
        return text
    if isinstance(want, bool):
        return text if isinstance(text, bool) else text == "true"
    if isinstance(want, int):
        return int(text)
    if isinstance(want, float):
        return float(text)
    if isinstance(want, Decimal):
        return Decimal(str(text))
    if isinstance(want, datetime):
        return datetime.fromisoformat(text)
    if isinstance(want, date):
        return date.fromisoformat(text)
    return text


def test_every_file_format_carries_the_matrix(spark, tmp_path):
    import fastavro
    import pyarrow.csv as pacsv

    with database("postgres") as db:
        db.execute(PG_TABLE, "INSERT INTO types VALUES " + ", ".join(PG_ROWS))
        root = project(tmp_path, db, "- {name: types, table: types}", {}, TEXT_SINKS)
        result = rivc(root, "run")
        assert result.exit_code == 0, result.output
        want = expected_rows(db, PG_EXPECTED)
    by_id = {w["id"]: w for w in want}

    def typed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: _from_text(v, by_id[int(r["id"])][k]) for k, v in r.items()} for r in rows]

    files = {fmt: sorted((root / "out" / fmt).rglob(f"*.{fmt}")) for fmt in ("csv", "jsonl")}
    files["json"] = sorted((root / "out/json").rglob("*.json"))
    files["avro"] = sorted((root / "out/avro").rglob("*.avro"))
    text = pacsv.ConvertOptions(
        column_types={k: pa.string() for k in want[0]},
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    csv_rows = [
        r for f in files["csv"] for r in pacsv.read_csv(f, convert_options=text).to_pylist()
    ]
    compare("csv", typed(csv_rows), want)
    jsonl = [json.loads(line) for f in files["jsonl"] for line in f.read_text().splitlines()]
    compare("jsonl", typed(jsonl), want)
    compare("json", typed([r for f in files["json"] for r in json.loads(f.read_text())]), want)
    avro = []
    for f in files["avro"]:
        with open(f, "rb") as fh:
            avro += list(fastavro.reader(fh))
    compare("avro", avro, want)


def test_a_json_string_past_jacksons_limit_arrives_whole(spark, tmp_path):
    """Spark's JSON parser makes a string of over 20,000,000 characters a malformed record,
    which its default mode turns into NULLs; a files source reads it whole."""
    big = 21_000_000  # 100 MiB arrives too (tried by hand; too slow for the suite)
    (tmp_path / "data").mkdir()
    lines = [{"id": 1, "text": "x" * big}, {"id": 2, "text": "short"}]
    (tmp_path / "data/rows.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    root = write_files(
        tmp_path,
        {
            "rivc_project.yml": "name: big\n",
            "sources/files.yml": """
sources:
  - name: files
    connector: files
    tables:
      - name: rows
        config: {path: data, format: json}
        columns: {id: bigint, text: string}
""",
            "sinks/out.yml": "sinks:\n  - {name: lake, from: source:files.rows, connector: delta, "
            "config: {table_uri: out/rows}}\n",
        },
    )
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    rows = sorted(DeltaTable(str(root / "out/rows")).to_pyarrow_table().to_pylist(), key=str)
    assert [(r["id"], len(r["text"])) for r in rows] == [(1, big), (2, 5)]
