"""The one test of which Spark a session is: Spark Connect (a client of a server, with no
SparkContext) or classic. Whether Spark's executors see rivc's disk is another question,
answered by storage.shares_disk."""

from __future__ import annotations


def is_connect(spark_or_df: object) -> bool:
    """True for a Spark Connect session, or a DataFrame of one."""
    spark = getattr(spark_or_df, "sparkSession", spark_or_df)
    return type(spark).__module__.startswith("pyspark.sql.connect")
