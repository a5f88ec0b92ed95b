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


def test_only_a_local_master_shares_rivcs_disk():
    """A cluster's executors write on their own machines even though rivc is the driver: a
    batch staged for rivc must go under the warehouse, never into `.rivc/`."""
    from types import SimpleNamespace

    from rivc.adapters.util.storage import shares_disk

    def session(master: str) -> object:
        return SimpleNamespace(sparkContext=SimpleNamespace(master=master))

    for master in ("local[*]", "local[2]", "local-cluster[2,1,1024]"):
        assert shares_disk(session(master)), master
        assert shares_disk(SimpleNamespace(sparkSession=session(master))), master  # a DataFrame
    for master in ("spark://10.0.0.5:7077", "yarn", "k8s://https://kube:6443"):
        assert not shares_disk(session(master)), master


def test_a_profiles_java_options_replace_the_gc_and_jit_flags_and_keep_zone_and_logging():
    java = "spark.driver.extraJavaOptions"
    default = session_conf(SparkSpec())[java].split()
    assert "-XX:TieredStopAtLevel=1" in default and "-Duser.timezone=UTC" in default
    mine = session_conf(SparkSpec(conf={java: "-XX:+UseParallelGC"}))[java].split()
    assert "-XX:TieredStopAtLevel=1" not in mine and mine[-1] == "-XX:+UseParallelGC"
    assert "-Duser.timezone=UTC" in mine
    assert any(o.startswith("-Dlog4j2.configurationFile=") for o in mine)
