"""One local SparkSession for the whole integration suite; projects live in tmp directories."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from rivc.adapters.run.spark import get_session
    from rivc.compiler.specs import SparkSpec

    catalog = tmp_path_factory.mktemp("spark-warehouse")  # not the checkout's spark-warehouse/
    spec = SparkSpec(master="local[2]", conf={"spark.sql.warehouse.dir": str(catalog)})
    session = get_session(spec, app_name="rivc-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """A fresh copy of sample_project."""
    root = tmp_path / "sample"
    shutil.copytree(
        REPO / "sample_project",
        root,
        ignore=shutil.ignore_patterns("target", ".rivc", "output", "warehouse"),
    )
    return root
