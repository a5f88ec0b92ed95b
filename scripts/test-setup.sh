#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine: the local services it talks to (started
# if down), the JDBC drivers Spark loads (Debian's packages; no Maven here), and rivc with its
# test extras in the active Python environment. Safe to run again: it skips what is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
up() { (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if command -v pg_ctlcluster >/dev/null && ! up 5432; then
  as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi
if [ -x /usr/sbin/mariadbd ] && ! up 3306; then
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
if command -v mosquitto >/dev/null && ! up 1883; then
  as_root mosquitto -d -c /etc/mosquitto/mosquitto.conf || true
fi
for port in 5432 3306 1883; do  # a service just started needs a moment
  for _ in $(seq 30); do up "$port" && break; sleep 1; done
done

if [ ! -f /usr/share/java/postgresql.jar ] || [ ! -f /usr/share/java/mariadb-java-client.jar ]; then
  as_root apt-get update -q >/dev/null   # a new machine may have no package lists yet
  as_root apt-get install -y -q libpostgresql-jdbc-java libmariadb-java >/dev/null
fi

# ClickHouse for the clickhouse sink's tests (each starts a server of its own)
if [ ! -x /usr/sbin/clickhouse-server ]; then
  as_root apt-get install -y -q clickhouse-server >/dev/null || {
    as_root apt-get update -q >/dev/null && as_root apt-get install -y -q clickhouse-server >/dev/null; }
fi

# Azurite, Azure's storage emulator, for the az:// and abfss:// tests (npm's registry)
tools="${RIVC_TOOLS:-$HOME/.cache/rivc-tools}"
if ! command -v azurite-blob >/dev/null && [ ! -x "$tools/node_modules/.bin/azurite-blob" ]; then
  if ! command -v npm >/dev/null; then
    as_root apt-get install -y -q nodejs npm >/dev/null
  fi
  npm install --silent --no-audit --no-fund --prefix "$tools" azurite@3.37.0 >/dev/null
fi

# Debian's chromium and npm's playwright-core, for the docs site's browser test
if [ ! -x /usr/bin/chromium ]; then
  as_root apt-get install -y -q chromium >/dev/null || {
    as_root apt-get update -q >/dev/null && as_root apt-get install -y -q chromium >/dev/null; }
fi
if [ ! -d "$tools/node_modules/playwright-core" ]; then
  npm install --silent --no-audit --no-fund --prefix "$tools" playwright-core@1.64.1 >/dev/null
fi

# dbt-core with dbt-duckdb, the peer the dbt-project tests compare with, in a virtualenv of its
# own (dbt pins its own versions of Jinja, protobuf and more)
if [ ! -x "$tools/dbt/bin/dbt" ]; then
  python3 -m venv "$tools/dbt"
  "$tools/dbt/bin/python" -m pip install --quiet "dbt-core~=1.11.0" "dbt-duckdb~=1.11.0"
fi

python -m pip install --quiet -e '.[spark,dev]'
