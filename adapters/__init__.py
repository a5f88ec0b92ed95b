"""rivc.adapters: the CLI, connectors, the Spark session, the runner and the state store."""
