"""rivc-ledger: a sink connector in a package of its own (spec.py: its compile half; sink.py:
its runtime), added to rivc by the rivc.connectors entry point in its pyproject.toml."""
