"""Session settings from the profile, without starting Spark."""

from __future__ import annotations

from rivc.adapters.spark.session import jdbc_jars, session_conf
from rivc.compiler.loading.specs import SparkSpec


def test_spark_conf_puts_found_jdbc_jars_first(tmp_path):
    (tmp_path / "postgresql.jar").write_text("")
    assert jdbc_jars(("/opt/extra.jar",), tmp_path) == [
        str(tmp_path / "postgresql.jar"),
        "/opt/extra.jar",
    ]
    conf = session_conf(SparkSpec(conf={"spark.sql.shuffle.partitions": 8, "x.flag": True}))
    assert conf["spark.sql.shuffle.partitions"] == "8"  # the profile wins over defaults
    assert conf["x.flag"] == "true"
    assert conf["spark.ui.enabled"] == "false"
