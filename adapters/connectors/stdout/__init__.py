"""The console: the stdout sink."""
