"""The executor data plane at scale, on one local SparkSession (docs/performance.md).

    python bench/scale_bench.py                    # 20M rows, a 1M-row merge
    python bench/scale_bench.py --rows 5000000 --changed 250000
    python bench/scale_bench.py --rows 2000000 --repeat 3   # writers only, medians of 3
    python bench/scale_bench.py --full-jit          # the JVM with C2, as executors run
    python bench/scale_bench.py --cluster           # a standalone master and two workers

Measures, side by side on the same DataFrame:
- Spark's own `df.write.parquet` (the reference);
- rivc's table write on a local Spark (Spark's Parquet writer + footer statistics + one Delta
  commit from this process): what `materialized: table` does;
- rivc's task writer (`mapInArrow` tasks writing through pyarrow's filesystem, as on a remote
  Spark or an object store), without the commit;
- a merge of `--changed` rows whose keys fall in 5% of the table's files, against a full
  rewrite of the table: files rewritten and seconds.
The peak RSS of this Python process is printed after each step: it must not grow with rows.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

FILES = 40  # the table's files: contiguous id ranges, so a key range maps to few files


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def frame(spark: Any, first: int, count: int, parts: int, v: int) -> Any:
    """`count` rows of five columns (bigint, bigint, decimal(18,2), string, int) from id
    `first`, in `parts` tasks; `v` marks the version."""
    return spark.range(first, first + count, 1, parts).selectExpr(
        "id",
        "id % 100 as grp",
        "cast(id * 0.01 as decimal(18,2)) as amount",
        "concat('note-', id) as note",
        f"{v} as v",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--changed", type=int, default=1_000_000)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="above 1: Spark's writer and the task writer only, "
        "each run this many times in turn, medians compared",
    )
    parser.add_argument(
        "--full-jit",
        action="store_true",
        help="the driver JVM with HotSpot's full JIT (C2), as a cluster's executors run, "
        "instead of rivc's local C1-only default",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on a standalone master and two one-core workers started here, the tables on S3 "
        "(a moto server) and Spark's writer on a file:// folder they share",
    )
    args = parser.parse_args()
    if args.cluster:
        on_cluster(args.rows, args.changed)
        return

    from rivc.adapters.lake import deltamerge, deltatable
    from rivc.adapters.plane.taskwrite import task_write
    from rivc.adapters.spark.session import get_session
    from rivc.adapters.util.storage import Store
    from rivc.compiler.loading.specs import SparkSpec

    conf = {"spark.sql.shuffle.partitions": "2"}
    if args.full_jit:
        conf["spark.driver.extraJavaOptions"] = "-XX:+UseSerialGC -Duser.timezone=UTC"
    spark = get_session(SparkSpec(master="local[2]", conf=conf), app_name="bench")
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="rivc-scale-"))
    n = args.rows

    df = frame(spark, 0, n, FILES, 1)
    spark.range(1000).selectExpr("id").write.mode("overwrite").parquet(str(base / "warm"))
    # Python workers started before any timing (4-6 s here, once per session; a warm server
    # keeps them): the task writer is timed for its writing
    spark.range(1000, numPartitions=2).mapInArrow(lambda it: it, "id long").collect()

    def timed(label: str, fn: object) -> float:
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        took = time.perf_counter() - started
        print(f"{label:<44} {took:7.1f} s  {n / took / 1e6:6.2f} M rows/s  rss {rss_mb():6.0f} MB")
        return took

    print(f"{n:,} rows, {FILES} tasks, 2 cores")
    if args.repeat > 1:
        import statistics

        spark_runs, task_runs = [], []
        for i in range(args.repeat):
            spark_runs.append(
                timed(
                    "Spark df.write.parquet",
                    lambda: df.write.mode("overwrite").parquet(str(base / "plain")),
                )
            )
            into = str(base / f"tasks-{i}")
            task_runs.append(
                timed("rivc task writer", lambda u=into: task_write(df, u, Store(), "rivc-bench"))
            )
        ratio = statistics.median(spark_runs) / statistics.median(task_runs)
        print(f"medians of {args.repeat}: task writer at {ratio:.0%} of Spark's rows/s")
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
        return
    spark_s = timed(
        "Spark df.write.parquet", lambda: df.write.mode("overwrite").parquet(str(base / "plain"))
    )
    uri = str(base / "table")
    rivc_s = timed(
        "rivc table (Spark writer + Delta commit)",
        lambda: deltatable.write_batch(df, uri, Store(), "replace", deltatable.arrow_schema(df)),
    )
    tasks_s = timed(
        "rivc task writer (mapInArrow, pyarrow fs)",
        lambda: task_write(df, str(base / "tasks"), Store(), "rivc-bench"),
    )
    print(
        f"rivc table at {spark_s / rivc_s:.0%} of Spark's rows/s; task writer at "
        f"{spark_s / tasks_s:.0%}"
    )

    changed = frame(spark, 0, args.changed, 4, 2)  # keys in the first files only
    share = args.changed / n
    started = time.perf_counter()
    result = deltamerge.merge(changed, uri, Store(), ("id",))
    merge_s = time.perf_counter() - started
    full_s = timed(
        "full rewrite of the table",
        lambda: deltatable.write_batch(
            deltatable.read(spark, uri).where("id >= 0"),
            str(base / "rewrite"),
            Store(),
            "replace",
            deltatable.arrow_schema(df),
        ),
    )
    print(
        f"merge of {args.changed:,} rows ({share:.0%} of keys): {merge_s:.1f} s, "
        f"{result.removed} of {FILES} files rewritten; full rewrite {full_s:.1f} s "
        f"({merge_s / full_s:.0%}); rss {rss_mb():.0f} MB"
    )
    got = deltatable.read(spark, uri)
    assert got.count() == n and got.where("v = 2").count() == args.changed
    spark.stop()
    shutil.rmtree(base, ignore_errors=True)


def on_cluster(n: int, changed_rows: int) -> None:
    """The same DataFrame written by two one-core executors in JVMs of their own (the full JIT,
    as a cluster runs them), rivc being the driver: Spark's writer into a folder the executors
    share with it (file://), rivc's task writer into the same and onto S3, what
    `materialized: table` does on a cluster (on S3: the task writer; on file://: Spark's writer;
    then the Delta commit) and the 5% merge on S3."""
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from rivc_remote import Cluster

    from rivc.adapters.lake import deltamerge, deltatable
    from rivc.adapters.plane.taskwrite import task_write
    from rivc.adapters.spark.session import get_session
    from rivc.adapters.util.storage import Store
    from rivc.compiler.loading.specs import SparkSpec
    from rivc_testing import S3_KEYS, moto_s3

    base = Path(tempfile.mkdtemp(prefix="rivc-scale-cluster-"))
    cluster = Cluster(None, base / "logs", memory="3g")
    (base / "logs").mkdir()
    with moto_s3() as s3:
        try:
            cluster.start(workers=2)
            conf = {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "2"}
            spark = get_session(SparkSpec(master=cluster.url, conf=conf), app_name="bench")
            spark.sparkContext.setLogLevel("ERROR")
            store = Store.of(
                "s3://lake", {**S3_KEYS, "AWS_ENDPOINT_URL": s3, "AWS_ALLOW_HTTP": "true"}
            )
            local = Store.of(base.as_uri())

            df = frame(spark, 0, n, FILES, 1)
            spark.range(1000, numPartitions=2).mapInArrow(lambda it: it, "id long").collect()
            spark.range(1000, numPartitions=2).write.parquet((base / "warm").as_uri())

            def timed(label: str, fn: object) -> float:
                started = time.perf_counter()
                fn()  # type: ignore[operator]
                took = time.perf_counter() - started
                print(
                    f"{label:<44} {took:7.1f} s  {n / took / 2e6:6.2f} M rows/s per core  "
                    f"rss {rss_mb():6.0f} MB",
                    flush=True,
                )
                return took

            print(f"{n:,} rows, {FILES} tasks, 2 executors of 1 core ({os.cpu_count()} cores here)")
            spark_s = timed(
                "Spark df.write.parquet (file://)",
                lambda: df.write.mode("overwrite").parquet((base / "plain").as_uri()),
            )
            local_s = timed(
                "rivc task writer (file://)",
                lambda: task_write(df, (base / "tasks").as_uri(), local, "rivc-bench"),
            )
            s3_s = timed(
                "rivc task writer (S3)",
                lambda: task_write(df, "s3://lake/scale/tasks", store, "rivc-bench"),
            )
            uri = "s3://lake/scale/table"
            table_s = timed(
                "rivc table on S3 (task writer + Delta commit)",
                lambda: deltatable.write_batch(
                    df, uri, store, "replace", deltatable.arrow_schema(df)
                ),
            )
            timed(
                "rivc table on file:// (Spark's writer + commit)",
                lambda: deltatable.write_batch(
                    df, (base / "table").as_uri(), local, "replace", deltatable.arrow_schema(df)
                ),
            )
            spark_s = min(  # once more, the executors' JIT warm as for the writers after it
                spark_s,
                timed(
                    "Spark df.write.parquet (file://) again",
                    lambda: df.write.mode("overwrite").parquet((base / "plain").as_uri()),
                ),
            )
            print(
                f"task writer at {spark_s / local_s:.0%} of Spark's rows/s on the same disk, "
                f"{spark_s / s3_s:.0%} onto S3; the table {spark_s / table_s:.0%}"
            )
            changed = frame(spark, 0, changed_rows, 4, 2)
            started = time.perf_counter()
            result = deltamerge.merge(changed, uri, store, ("id",))
            merge_s = time.perf_counter() - started
            print(
                f"merge of {changed_rows:,} rows ({changed_rows / n:.0%} of keys): {merge_s:.1f} s, "
                f"{result.removed} of {FILES} files rewritten, against {table_s:.1f} s for the "
                f"table; rss {rss_mb():.0f} MB"
            )
            got = deltatable.read(spark, uri, store)
            assert got.count() == n and got.where("v = 2").count() == changed_rows
            spark.stop()
        finally:
            cluster.stop()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
