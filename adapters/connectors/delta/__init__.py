"""Delta Lake: the delta sink and source."""
