"""The one place rivc quotes names and writes literals: whatever the text, Spark's parser reads
back exactly the name or value that went in."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from rivc.compiler.sql import literal, quote

TEXTS = ["plain", "it's", "back\\slash", "\\'", "tab\tand\nnewline", "ünïcødé ✓", "`tick`", ""]


@pytest.mark.parametrize("text", TEXTS)
def test_a_spark_string_literal_reads_back_as_the_same_text(text):
    tree = sqlglot.parse_one(f"SELECT {literal(text)} AS v", read="spark")
    value = tree.selects[0].this
    assert isinstance(value, exp.Literal) and value.is_string
    assert value.this == text


@pytest.mark.parametrize("name", ["a", "a`b", "sel ect", "ünï"])
def test_a_quoted_spark_name_reads_back_as_the_same_name(name):
    tree = sqlglot.parse_one(f"SELECT {quote(name)} FROM t", read="spark")
    assert tree.selects[0].name == name


def test_non_strings():
    assert [literal(v) for v in (None, True, 3, 1.5)] == ["NULL", "TRUE", "3", "1.5"]
