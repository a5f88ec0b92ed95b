"""What every database connector shares: connections and sessions (engine), relational sources' windows and JDBC reader, the database sink's exactly-once table writes."""
