"""Azure storage (`az://`, `abfss://`) through Azurite, its emulator: the warehouse, a Delta
merge sink and a files sink written by Spark's tasks through pyarrow's AzureFileSystem and
committed by delta-rs, read back with deltalake and pyarrow."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from rivc.adapters.util.storage import Store
from rivc_testing import azurite, rivc, write_files

pytestmark = pytest.mark.integration

MODEL = """{{ config(materialized='table') }}
select id, cast(id * 0.25 as decimal(12, 2)) + {{ var('bump', 0) }} as amount,
       concat('n-', id) as note
from range(0, 3000, 1, 3) where id % {{ var('every', 1) }} = 0
"""
SINKS = """
sinks:
  - name: d
    from: amounts
    connector: delta
    config: {table_uri: "az://lake/sinks/d", mode: merge, merge_keys: [id],
             spark_write_threshold: 0}
  - name: f
    from: amounts
    connector: files
    config: {path: "abfss://lake@devstoreaccount1.dfs.core.windows.net/sinks/f",
             format: parquet, mode: overwrite}
"""


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with azurite() as url:
        monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
        monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", url)
        yield url


def test_tables_and_files_on_azure_storage(spark, tmp_path, emulator):
    root = write_files(
        tmp_path / "p",
        {
            "rivc_project.yml": "name: az\n",
            "profiles.yml": "default:\n  warehouse: az://lake/warehouse\n",
            "models/amounts.sql": MODEL,
            "sinks/out.yml": SINKS,
        },
    )
    first = rivc(root, "run")
    assert first.exit_code == 0, first.output
    second = rivc(root, "run", "--vars", "{bump: 1000, every: 7}")  # a merge of every 7th id
    assert second.exit_code == 0, second.output

    options = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": emulator}
    expected = {i: Decimal(i) * Decimal("0.25") + (1000 if i % 7 == 0 else 0) for i in range(3000)}
    merged = DeltaTable("az://lake/sinks/d", storage_options=options)
    rows = merged.to_pyarrow_table().to_pylist()
    assert len(rows) == 3000 and {r["id"]: r["amount"] for r in rows} == expected
    assert merged.transaction_version("rivc:az:d") == 1
    model = DeltaTable("az://lake/warehouse/amounts", storage_options=options)
    assert model.to_pyarrow_table().num_rows == 3000 // 7 + 1  # the second run's table

    fs, path = Store.of("az://lake/sinks/f").filesystem("az://lake/sinks/f")
    files = [i.path for i in fs.get_file_info(pafs.FileSelector(path)) if i.size]
    assert files and all("/batch-000001-part-" in p for p in files)  # overwrite kept batch 1
    table = pads.dataset(files, filesystem=fs).to_table()
    got = {r["id"]: r["amount"] for r in table.to_pylist()}
    assert got == {i: a for i, a in expected.items() if i % 7 == 0}
