"""The only place a SparkSession is built: from the profile's `spark:` block."""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rivc.compiler.loading.specs import SparkSpec

from ..state import StateStore
from ..util.sparkkind import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JDBC_JARS = ("postgresql.jar", "mariadb-java-client.jar")  # from Debian's JDBC driver packages
JAVA_DIR = Path("/usr/share/java")

# Fast local defaults; anything in the profile's `conf:` wins.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.scheduler.mode": "FAIR",
    # the driver's GC and JIT: C1 only starts and runs small jobs faster; a profile's own value
    # replaces these flags (the full JIT runs jobs over millions of rows 2-3x faster,
    # docs/performance.md), never the time zone and logging rivc adds
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches handed to Python tasks (the task writer, a merge's key probe): 100,000 rows
    # instead of 10,000 (the task writer at 92 % of Spark's writer instead of 87 %,
    # docs/performance.md), still cut at maxBytesPerBatch (64 MB) for wide rows
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    # the JVM and its Python workers talk over a Unix domain socket instead of TCP on loopback:
    # each Python task (the task writer, rivc_files, a merge's probe) waited about 18 ms for
    # its first batch over TCP, 0.2 ms over the socket (docs/performance.md)
    "spark.python.unix.domain.socket.enabled": "true",
    # what the driver keeps of finished jobs, stages, tasks and SQL queries for a UI (kept with
    # the UI off too): Spark keeps 1,000 of each (100,000 tasks), which a followed log or the
    # warm server reaches within minutes, so their memory grew for the whole of a long run
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.sql.ui.retainedExecutions": "50",
}


# A Spark Connect session caches the plans it resolved, a file source's listing and file sizes
# included: a later read of the same path would miss new files and read a rewritten one cut at
# its old length. rivc reads sources and tables anew each run, so the cache buys nothing here.
FRESH_READS = {"spark.connect.session.planCache.enabled": "false"}


def jdbc_jars(extra: tuple[str, ...] = (), java_dir: Path = JAVA_DIR) -> list[str]:
    """Driver jars found on this machine, then the profile's own `jars:`."""
    found = [str(java_dir / name) for name in JDBC_JARS if (java_dir / name).is_file()]
    return found + [j for j in extra if j not in found]


LOG4J = Path(__file__).parent.parent / "log4j2.properties"
JOB_LOG4J = Path(__file__).parent.parent / "log4j2-job.properties"


# A local Spark's driver RPC and block manager, which take no authentication, listen on this
# machine's loopback only (Spark's default is its network address); a cluster's executors must
# reach its driver, so a `master: spark://...` or yarn profile keeps Spark's default. The
# profile's `conf:` may bind elsewhere (docs/security.md).
LOOPBACK = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


def session_conf(spec: SparkSpec, state_dir: Path | None = None) -> dict[str, str]:
    """The Spark settings of a profile; `state_dir` (the project's .rivc/) holds an embedded
    metastore."""
    conf = dict(LOCAL_DEFAULTS)
    if spec.master is None or spec.master.startswith("local"):
        conf.update(LOOPBACK)
    jars = jdbc_jars(spec.jars)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(metastore_conf(spec, state_dir))
    conf.update(
        {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in spec.conf.items()}
    )
    java = "spark.driver.extraJavaOptions"  # the profile's -D options come last and win
    ours = f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG4J.as_uri()}"
    if spec.metastore == "embedded":  # Derby's derby.log beside its database, not in the cwd
        ours += f" -Dderby.system.home={(state_dir or Path('.rivc')).resolve()}"
    conf[java] = f"{ours} {conf[java]}"
    return conf


def metastore_conf(spec: SparkSpec, state_dir: Path | None) -> dict[str, str]:
    """A Hive metastore as Spark's catalog: a service's Thrift URI, or Derby embedded in
    `state_dir` (Spark's own default would be ./metastore_db wherever rivc runs)."""
    if spec.metastore is None:
        return {}
    conf = {"spark.sql.catalogImplementation": "hive"}
    if spec.metastore == "embedded":
        where = (state_dir or Path(".rivc")).resolve() / "metastore"
        url = f"jdbc:derby:;databaseName={where};create=true"
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = url
    else:
        conf["spark.hadoop.hive.metastore.uris"] = spec.metastore
    return conf


def _launch_quiet(conf: dict[str, str], log: Path) -> None:
    """Start the local JVM with its stdout and stderr in `log`: Spark's start-up lines, log4j
    output and stack traces stay out of the console (rivc prints its own one-line errors)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            SparkConf(loadDefaults=False).setAll(list(conf.items())),
            popen_kwargs={"stdout": out, "stderr": out},
        )
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm
    _quiet_python_loggers(log)


def _quiet_submitted(spark: SparkSession, log: Path) -> None:
    """Under spark-submit the JVM is up before Python runs and logs to the console, and the
    SparkContext resets log4j to Spark's defaults as it starts: once it has, point log4j at the
    project's log file. The JVM's start-up lines (about 50) stay on the console; docs/running.md
    says how to silence them too."""
    log.parent.mkdir(parents=True, exist_ok=True)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.java.lang.System.setProperty("rivc.spark.log", str(log))
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(
        jvm.java.net.URI(JOB_LOG4J.as_uri())
    )
    _quiet_python_loggers(log)


def _quiet_python_loggers(log: Path) -> None:
    """PySpark logs every failed query with its stack trace to stderr from Python: there too,
    into the log file."""
    import logging

    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(logging.FileHandler(log, delay=True))  # created by a first record
        logger.propagate = False


def fence(spark: SparkSession, state: StateStore, run_id: str, warn: Callable[[str], None]) -> None:
    """On Spark Connect, a killed rivc leaves its operations running in the server. Stop those
    of every killed run before this one writes, then record this run's session."""
    for killed, session in state.killed_sessions(run_id):
        stopped = interrupt_session(spark, session)
        if stopped:
            warn(
                f"run {killed} was killed: stopped {stopped} of its Spark operation"
                f"{'s' if stopped != 1 else ''} still running on the server"
            )
        state.set_spark_session(killed, None)
    state.set_spark_session(run_id, spark.session_id)  # type: ignore[attr-defined]


def peak_rss_mb(spark: SparkSession | None) -> float:
    """Peak resident memory of this process plus, for local Spark, its JVM."""
    total = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if spark is None or is_connect(spark):
        return round(total, 1)  # the server's memory is not ours to read
    try:
        pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
    except (AttributeError, OSError, ValueError):
        pass  # spark-submit started the JVM: only this Python process is counted
    return round(total, 1)


def interrupt_session(spark: SparkSession, session_id: str) -> int:
    """Attach to another Spark Connect session of the server `spark` talks to, stop its streams
    and interrupt its running operations, then release it. Returns how many were stopped; a
    session the server no longer has counts none."""
    from pyspark.errors import PySparkException
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if session_id == getattr(spark, "session_id", None):  # the warm server's shared session
        running = spark.streams.active
        for mine in running:
            mine.stop()
        return len(running) + len(spark.interruptAll())
    url = spark.client._builder.url.geturl().replace("http", "sc", 1)  # type: ignore[attr-defined]
    base, _, params = url.partition(";")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    other = ConnectSession.builder.remote(
        ";".join([base.rstrip("/") + "/", *kept, f"session_id={session_id}"])
    ).create()
    try:
        streams = other.streams.active
        for query in streams:
            query.stop()
        return len(streams) + len(other.interruptAll())
    except PySparkException:
        return 0
    finally:
        other.stop()  # releases the session: its views and state go with it


def get_session(
    spec: SparkSpec,
    app_name: str = "rivc",
    log: Path | None = None,
    state_dir: Path | None = None,
) -> SparkSession:
    """One session per process: an active session (a test's, spark-submit's) is reused as is.
    With `log`, a local JVM started here writes its own output there (see _launch_quiet);
    `state_dir` is the project's .rivc/ (an embedded metastore's home)."""
    from pyspark.sql import SparkSession

    # Python workers (data sources, UDFs) must run this interpreter, with rivc importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    remote = spec.remote or os.environ.get("SPARK_REMOTE")
    if remote:
        builder = builder.remote(remote)
        conf = {k: v for k, v in session_conf(spec).items() if k.startswith("spark.sql.")}
        conf.pop("spark.sql.catalogImplementation", None)  # the server's own
        conf = {**FRESH_READS, **conf}
    else:
        if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, its --master wins
            builder = builder.master(spec.master or "local[*]")
        conf = session_conf(spec, state_dir)
        if log is not None:  # Spark's catalog (dbt sources in it) keeps its folder in .rivc/
            conf.setdefault("spark.sql.warehouse.dir", str(log.parent / "spark-warehouse"))
        if log is not None and "PYSPARK_GATEWAY_PORT" not in os.environ:
            _launch_quiet({**conf, "spark.master": spec.master or "local[*]"}, log)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if log is not None and not remote and "PYSPARK_GATEWAY_PORT" in os.environ:
        _quiet_submitted(session, log)
    if log is not None and remote:  # the client logs a failed query's context as JSON
        log.parent.mkdir(parents=True, exist_ok=True)
        _quiet_python_loggers(log)
    return session
