"""Seeds at compile: every column's type inferred from all its values so that no value changes
(1.10 stays a decimal at its scale, 007 stays a string), overrides by `column_types`, and a bad
file or override named at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rivc.compiler.errors import ProjectError
from rivc.compiler.loading.seeds import infer_type, read_csv
from rivc_testing import analyze_dir, only


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["1", "-2", "+3", None], "int"),
        (["2147483647", "-2147483648"], "int"),
        (["2147483648"], "bigint"),
        (["9223372036854775807"], "bigint"),
        (["9223372036854775808"], "decimal(19,0)"),
        (["1" * 39], "string"),  # past Spark's 38 digits: kept as written
        (["1.10", "2.5"], "decimal(3,2)"),  # never a float
        (["1", "-12.125", ".5"], "decimal(5,3)"),
        (["0.001"], "decimal(4,3)"),
        (["1e3", "2.5"], "double"),  # exponent notation is what a float is
        (["1e3", "1e400"], "string"),  # a double would make it Infinity
        (["NaN", "Infinity", "-Infinity"], "string"),  # text, as written
        (["null", "NULL", "none", "."], "string"),  # NULL-looking text stays text
        (["007", "12"], "string"),  # a leading zero (zip codes) is kept
        (["1.", "2"], "string"),
        (["true", "FALSE", None], "boolean"),
        (["2024-02-29", "1999-12-31"], "date"),
        (["2023-02-29"], "string"),  # no such day
        (["2024-01-01 10:00:00", "2024-01-02T10:00:00.123456"], "timestamp"),
        (["2024-01-01", "2024-01-02 10:00"], "timestamp"),
        (["2024-01-01T10:00:00Z", "2024-01-01T10:00:00+02:00"], "timestamp"),
        (["2024-01-01 10:00:00.1234567"], "string"),  # finer than Spark's microseconds
        ([None, None], "string"),
        (["1", "a"], "string"),
        ([" 1"], "string"),  # whitespace is part of the value
    ],
)
def test_each_column_gets_the_narrowest_type_that_holds_every_value(values, expected):
    assert infer_type(tuple(values)) == expected


def test_quotes_apostrophes_empty_fields_and_newlines_read_as_written():
    text = 'id,name,note\n1,kevin parker\'s favorite,\n2,"say ""hi""","two\nlines"\n3,"a, b",""\n'
    data = read_csv(text, Path("seeds/s.csv"))
    assert data.header == ("id", "name", "note")
    assert data.columns[1] == ("kevin parker's favorite", 'say "hi"', "a, b")
    assert data.columns[2] == (None, "two\nlines", None)  # an empty field is NULL, as in dbt


@pytest.mark.parametrize(
    ("text", "line", "said"),
    [
        ("a,b\n1,2\n3\n", 3, "this row has 1 fields, the header 2"),
        ("a,a\n1,2\n", 1, "appears twice"),
        ("a,\n1,2\n", 1, "column 2 of the header has no name"),
        ("", 1, "needs a header row"),
    ],
)
def test_a_malformed_seed_is_one_error_at_its_line(text, line, said):
    with pytest.raises(ProjectError, match=said) as caught:
        read_csv(text, Path("seeds/s.csv"))
    assert caught.value.location is not None and caught.value.location.line == line


SEED = "id,amount,day,code\n1,1.10,2024-01-01,007\n2,20.5,2024-01-02,120\n"


def test_a_model_refs_a_seed_with_its_columns_checked(make_project):
    root = make_project(
        {
            "seeds/prices.csv": SEED,
            "models/priced.sql": "select id, amount * 2 as doubled from {{ ref('prices') }}\n",
            "models/typo.sql": "select amount_x from {{ ref('prices') }}\n",
        }
    )
    compiled = analyze_dir(root)
    seed = compiled.graph.nodes["seed:prices"]
    assert seed.columns == {
        "id": "int",
        "amount": "decimal(4,2)",
        "day": "date",
        "code": "string",
    }
    assert compiled.graph.nodes["model:priced"].depends_on == ["seed:prices"]
    error = only(compiled.findings, "RV009")
    assert error.location is not None and str(error.location.path) == "models/typo.sql"
    assert "amount_x" in str(error)


def test_column_types_override_inference_and_are_checked(make_project):
    props = """
        seeds:
          - name: prices
            config:
              column_types: {code: int, amount: "decimal(10,4)", nope: string, day: "notatype"}
            columns:
              - name: id
                tests: [unique, not_null]
    """
    root = make_project({"seeds/prices.csv": SEED, "seeds/props.yml": props})
    compiled = analyze_dir(root)
    assert compiled.graph.nodes["seed:prices"].columns == {
        "id": "int",
        "amount": "decimal(10,4)",
        "day": "date",
        "code": "int",
    }
    said = sorted(str(f) for f in compiled.errors)
    assert len(said) == 2, said
    assert "seeds/props.yml:4" in said[0] and "'nope' is not a column of seed 'prices'" in said[0]
    assert "seeds/props.yml:4" in said[1] and "'notatype' is not a Spark SQL type" in said[1]
    tests = [n for n in compiled.graph.nodes.values() if n.kind == "test"]
    assert sorted(t.name for t in tests) == ["not_null_prices_id", "unique_prices_id"]
    assert all(t.depends_on == ["seed:prices"] for t in tests)


def test_a_seed_and_a_model_of_one_name_are_refused(make_project):
    from rivc.compiler.errors import CompileFailed

    root = make_project({"seeds/stg.csv": "a\n1\n"})
    with pytest.raises(CompileFailed, match="seed 'stg' has the name of model 'stg'"):
        analyze_dir(root)


def test_a_malformed_seed_fails_compile_at_its_line(make_project):
    root = make_project({"seeds/bad.csv": "a,b\n1,2\n3\n"})
    error = only(analyze_dir(root).findings, "RV011")
    assert error.location is not None and (str(error.location.path), error.location.line) == (
        "seeds/bad.csv",
        3,
    )


def test_a_seed_is_read_again_only_when_its_file_changes(make_project, monkeypatch):
    from rivc.compiler.driver import CompileOptions, analyze
    from rivc.compiler.loading.project import load_project
    from rivc.compiler.nodes import seeds as seed_nodes
    from rivc.compiler.nodes.models import CompileCache

    root = make_project({"seeds/prices.csv": SEED})
    cache = CompileCache()
    first = analyze(load_project(root, env={}), CompileOptions(), cache, env={})

    def unread(*args, **kwargs):
        raise AssertionError("an unchanged seed was read again")

    monkeypatch.setattr(seed_nodes, "read_csv", unread)
    second = analyze(load_project(root, env={}), CompileOptions(), cache, env={})
    assert second.graph.nodes["seed:prices"].columns == first.graph.nodes["seed:prices"].columns
    (root / "seeds/prices.csv").write_text(SEED + "3,x,2024-01-03,1\n")
    with pytest.raises(AssertionError, match="read again"):  # a changed file is read
        analyze(load_project(root, env={}), CompileOptions(), cache, env={})
