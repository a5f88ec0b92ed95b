"""MySQL and MariaDB: mysql-cdc's binlog and change log, the mysql sink."""
