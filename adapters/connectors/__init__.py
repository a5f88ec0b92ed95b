"""Source and sink connectors (runtime side)."""
