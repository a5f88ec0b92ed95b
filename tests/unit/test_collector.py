"""The cyclic collector is held off while compiles run and batches are read, and comes back
after the last."""

from __future__ import annotations

import gc
import threading

import pytest

from rivc.compiler.collector import no_cyclic_gc


@pytest.fixture(autouse=True)
def collector_on():
    """On for each test (a compile run by another test leaves it off for the process), then
    as it was."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_comes_back_after_the_last_holder_at_once():
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with no_cyclic_gc():
            inside.set()
            release.wait(5)

    t = threading.Thread(target=other)
    with no_cyclic_gc():
        t.start()
        assert inside.wait(5)
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's batch is still being read
    release.set()
    t.join(5)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with no_cyclic_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_error_while_reading_gives_the_collector_back():
    try:
        with no_cyclic_gc():
            raise ValueError("a refused value")
    except ValueError:
        pass
    assert gc.isenabled()
