"""Running a compiled project: the scheduler (DAG order, threads, the run lock), the runtime
(Spark on first use, one method per node kind), extraction, delivery to sinks, streaming and
the generated job entry point."""
