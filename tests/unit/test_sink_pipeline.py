"""The parts of a sink's batch handling that need no Spark: retry classification, the rate
limiter's token bucket."""

from __future__ import annotations

import pytest

from rivc.adapters.delivery import sinkwriter as pipeline
from rivc.adapters.delivery.sinkwriter import SinkWriter
from rivc.adapters.util.errortext import transient
from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.specs import RateLimit


@pytest.mark.parametrize(
    "exc, retry",
    [
        (ConnectionResetError("peer"), True),
        (OSError("No such file"), True),
        (ConnectorError("commit to /x failed after 3 retries: conflict"), True),
        (ConnectorError("HTTP 503 Slow Down"), True),
        (ConnectorError("sink s: new columns ['x'] and schema_evolution is strict"), False),
    ],
)
def test_transient_errors(exc, retry):
    assert transient(exc) is retry


def test_token_bucket_waits_for_the_average_rate(monkeypatch):
    clock = [100.0]
    slept: list[float] = []
    monkeypatch.setattr(pipeline.time, "monotonic", lambda: clock[0])

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(pipeline.time, "sleep", sleep)
    writer = SinkWriter(
        "s", main=None, rate_limit=RateLimit(events_per_second=100, burst_capacity=50)
    )  # type: ignore[arg-type]
    writer._throttle(250)  # 50 tokens of burst: 200 rows over, 2 s
    assert slept == [pytest.approx(2.0)]
    clock[0] += 1.0  # a second later 100 tokens came back, capped at the burst of 50
    writer._throttle(50)
    assert len(slept) == 1  # within the allowance: no wait
    writer._throttle(10)
    assert slept[-1] == pytest.approx(0.1)


def test_a_source_rate_limit_reaches_the_sinks_that_read_it(make_project):
    from rivc.adapters.run.plan import Plan
    from rivc.adapters.run.runtime import Runtime
    from rivc.adapters.state import StateStore
    from rivc_testing import rivc

    root = make_project(
        {
            "sources/demo.yml": """
            sources:
              - name: demo
                connector: datagen
                tables:
                  - name: orders
                    config: {pattern: orders, max_events: 10, seed: 1, stream: true}
                    rate_limit: {events_per_second: 50}
        """,
            "sinks/s.yml": """
            sinks:
              - {name: inherits, from: stg, connector: stdout}
              - {name: own, from: stg, connector: stdout, rate_limit: {events_per_second: 500}}
        """,
        }
    )
    assert rivc(root, "compile").exit_code == 0
    state = StateStore.for_project(root)
    try:
        runtime = Runtime(lambda: None, Plan.load(root, env={}), "r", state)  # type: ignore[arg-type,return-value]
        assert runtime.sink_writer("inherits").rate_limit == RateLimit(events_per_second=50)
        assert runtime.sink_writer("own").rate_limit == RateLimit(events_per_second=500)
        assert not runtime.started  # nothing here needed Spark
    finally:
        state.close()


def test_a_data_source_is_registered_once_per_session_from_many_threads():
    """Spark refuses a second registration of a name (DATA_SOURCE_ALREADY_EXISTS); sinks on
    several threads ask at once."""
    import threading
    import time

    from rivc.adapters.plane.base import register_data_source

    class Registry:
        def __init__(self) -> None:
            self.names: list[str] = []

        def register(self, source: type) -> None:
            if source.name() in self.names:
                raise RuntimeError("DATA_SOURCE_ALREADY_EXISTS")
            time.sleep(0.01)  # a registration takes a round trip to the JVM
            self.names.append(source.name())

    class Session:
        def __init__(self) -> None:
            self.dataSource = Registry()

    class Source:
        @classmethod
        def name(cls) -> str:
            return "rivc_test_source"

    session = Session()
    errors: list[BaseException] = []

    def register() -> None:
        try:
            register_data_source(session, Source)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and session.dataSource.names == ["rivc_test_source"]
