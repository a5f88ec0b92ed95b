"""PostgreSQL: the postgres source's COPY, postgres-cdc's slot, pgoutput and change log, the postgres sink."""
