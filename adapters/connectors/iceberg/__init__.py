"""Apache Iceberg: the iceberg sink (pyiceberg and Spark's tasks), its catalogs, files, maintenance, and the iceberg source."""
