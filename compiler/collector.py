"""Python's cyclic garbage collector held off while many long-lived objects are made.

A compile keeps thousands of parse trees alive until it ends; a change log's batch keeps a few
objects per decoded change until it is written. The collector walks every container object
each time a generation fills, so such objects are walked again and again as they age, with
nothing to free: a third of the wall time of a 1,000-model compile and of decoding a batch of
changes (docs/performance.md). Reference counting still frees what is dropped; only reference
cycles wait for the collector, which runs again once nobody holds it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holding = 0  # holders now: threads of one run, or runs and compiles of a warm server
_was_enabled = False


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """No cyclic collection until the last holder is done; a collector that was already off
    stays off."""
    global _holding, _was_enabled
    with _lock:
        if _holding == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holding += 1
    try:
        yield
    finally:
        with _lock:
            _holding -= 1
            if _holding == 0 and _was_enabled:
                gc.enable()
