"""The lakehouse table engine rivc writes with: Delta tables (read, write, commit, merge by key, scd2 history), shared by models, landing tables and the delta sink."""
