"""Spark: the session (local, a cluster, Spark Connect), job progress, the warm server, generated jobs' entry point."""
