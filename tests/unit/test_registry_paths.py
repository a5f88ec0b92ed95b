"""Every import path a connector's registry entry names (its runtime, probe, lag, preflight,
change log, freshness reader) resolves: they are strings, so neither mypy nor an import sees
them until a run needs one."""

from __future__ import annotations

import importlib

import pytest

from rivc.compiler.registry import BUILT_IN

CONNECTORS = {(c.kind, c.name): c for entries in BUILT_IN for c in entries}

HOOKS = ("runtime", "probe", "lag", "preflight", "log", "newest")


@pytest.mark.parametrize("key", sorted(CONNECTORS), ids="-".join)
def test_every_path_an_entry_names_resolves(key):
    info = CONNECTORS[key]
    paths = [getattr(info, hook) for hook in HOOKS if getattr(info, hook)]
    assert paths
    for path in paths:
        module, _, attribute = path.partition(":")
        assert callable(getattr(importlib.import_module(module), attribute)), path
