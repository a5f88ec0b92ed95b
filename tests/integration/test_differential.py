"""The differential test of the change-capture pipeline (tests/rivc_differential.py).

In CI, one program of a fixed seed: DML on PostgreSQL and MariaDB interleaved with runs under
random selections, snapshots, a lost .rivc/, a kill and the warm server, every consumer
compared with the machine's own model after every run. `bench/cdc_soak.py` runs the soak
(`RIVC_SOAK_SECONDS`): new seeds for as long as it is given, each failure shrunk and printed
with its seed."""

from __future__ import annotations

import os
import random
import time

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import get_state_machine_test

from rivc_differential import SEAMS, Pipeline, seams

pytestmark = pytest.mark.integration

# a seed whose program takes every kind of step (a kill and the warm server once) and crosses
# every seam (`seams`): a change to the machine changes the program a seed draws; find
# another with `python bench/cdc_soak.py --find-seed` (the machine's dry mode)
SEED = 20266822
STEPS = 18
KINDS = {"insert", "update_several_times", "move_key", "delete", "truncate", "run", "snapshot"}
KINDS |= {"lose_rivc", "kill_and_rerun", "warm_server"}


def program(steps: int, shrink: bool) -> object:
    """The machine as a Hypothesis test of one program of `steps` steps."""
    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    return get_state_machine_test(
        Pipeline,
        _min_steps=steps,  # the first example of a run is otherwise the shortest: none
        settings=settings(
            max_examples=1,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            phases=phases,  # a failure prints its steps; the soak shrinks them first
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        ),
    )


def test_every_consumer_equals_the_model_of_the_changes_after_every_step(
    spark, tmp_path, logical_pg, binlog_mariadb
):
    Pipeline.pg_port, Pipeline.my_port, Pipeline.base = logical_pg, binlog_mariadb, tmp_path
    Pipeline.slow, Pipeline.dry = True, False
    seed(SEED)(program(STEPS, shrink=False))()
    assert set(Pipeline.steps) == KINDS, Pipeline.steps  # the program this seed drew
    assert Pipeline.last is not None and seams(Pipeline.last) == SEAMS


@pytest.mark.skipif("RIVC_SOAK_SECONDS" not in os.environ, reason="the soak: bench/cdc_soak.py")
def test_soak(spark, tmp_path, logical_pg, binlog_mariadb):
    """New seeds until RIVC_SOAK_SECONDS have passed; a failure is shrunk and raised with its
    seed (replay: RIVC_SOAK_SEED=<seed>)."""
    Pipeline.pg_port, Pipeline.my_port, Pipeline.base = logical_pg, binlog_mariadb, tmp_path
    Pipeline.slow, Pipeline.dry = True, False
    deadline = time.monotonic() + float(os.environ["RIVC_SOAK_SECONDS"])
    steps = int(os.environ.get("RIVC_SOAK_STEPS", "30"))
    given = os.environ.get("RIVC_SOAK_SEED")
    done = 0
    while time.monotonic() < deadline or (given and not done):
        chosen = int(given) if given else random.randrange(2**32)
        print(f"soak: seed {chosen}", flush=True)
        try:
            seed(chosen)(program(steps, shrink=True))()
        except BaseException as exc:
            exc.add_note(f"soak seed {chosen} (replay: RIVC_SOAK_SEED={chosen})")
            raise
        done += 1
        print(f"soak: seed {chosen} held, {dict(Pipeline.steps)}", flush=True)
        if given:
            break
    print(f"soak: {done} programs of {steps} steps held", flush=True)
