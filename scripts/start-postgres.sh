#!/usr/bin/env bash
# Start (idempotently) a throwaway PostgreSQL cluster on a loopback port for the
# tests, installing the Debian packages first when missing. Prints the URL to
# export as PERFWATCH_TEST_POSTGRES_URL.
#
#   eval "$(scripts/start-postgres.sh --export)"
#
# Environment: PERFWATCH_PG_DIR (data directory, default /tmp/perfwatch-postgres),
# PERFWATCH_PG_PORT (default 25432: below Linux's ephemeral range, 32768-60999,
# so an outgoing connection's local port can never be holding it).
set -euo pipefail

data_dir="${PERFWATCH_PG_DIR:-/tmp/perfwatch-postgres}"
port="${PERFWATCH_PG_PORT:-25432}"
database=perfwatch_test
user=perfwatch

find_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

bin_dir="$(find_bin)"
if [ -z "$bin_dir" ]; then
  echo "installing PostgreSQL from the Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  bin_dir="$(find_bin)"
fi

# The server refuses to run as root: run it as the packages' postgres user.
run_as=()
if [ "$(id -u)" -eq 0 ]; then
  run_as=(runuser -u postgres --)
fi

if [ ! -f "$data_dir/PG_VERSION" ]; then
  mkdir -p "$data_dir"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data_dir"
  chmod 700 "$data_dir"
  "${run_as[@]}" "$bin_dir/initdb" -D "$data_dir" -U postgres --auth=trust \
    --encoding=UTF8 --locale=C.UTF-8 >&2
fi

if ! "${run_as[@]}" "$bin_dir/pg_ctl" -D "$data_dir" status >/dev/null 2>&1; then
  "${run_as[@]}" "$bin_dir/pg_ctl" -D "$data_dir" -l "$data_dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$data_dir \
        -c fsync=off -c synchronous_commit=off -c max_connections=50" start >&2
fi

psql_admin=("${run_as[@]}" "$bin_dir/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -qtA)
if [ -z "$("${psql_admin[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = '$user'")" ]; then
  "${psql_admin[@]}" -c "CREATE ROLE $user LOGIN" >&2
fi
if [ -z "$("${psql_admin[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$database'")" ]; then
  "${psql_admin[@]}" -c "CREATE DATABASE $database OWNER $user" >&2
fi

url="postgresql://$user@127.0.0.1:$port/$database"
if [ "${1:-}" = "--export" ]; then
  echo "export PERFWATCH_TEST_POSTGRES_URL=$url"
else
  echo "$url"
fi
