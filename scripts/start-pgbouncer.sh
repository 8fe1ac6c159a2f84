#!/usr/bin/env bash
# Starts PgBouncer (Debian's package, 1.18) in transaction mode in front of the PostgreSQL server at 127.0.0.1:5432,
# for the pooler suites (PGBOUNCER_URL) and the bench: `scripts/start-pgbouncer.sh` starts it (already running: fine)
# and prints its URL; `scripts/start-pgbouncer.sh stop` stops it.
#
# Its pool is small on purpose (PGBOUNCER_POOL_SIZE, default 4 server connections per database): clients then really
# share server connections, which is what breaks named prepared statements and LISTEN.
#
# PGBOUNCER_PORT (default 6432), PGBOUNCER_UPSTREAM_HOST / PGBOUNCER_UPSTREAM_PORT (default 127.0.0.1:5432) and
# PGBOUNCER_DIR (its config, pid file, log and socket; default /tmp/nest-idempotency-pgbouncer) may be set.
set -euo pipefail

port="${PGBOUNCER_PORT:-6432}"
upstream_host="${PGBOUNCER_UPSTREAM_HOST:-127.0.0.1}"
upstream_port="${PGBOUNCER_UPSTREAM_PORT:-5432}"
pool_size="${PGBOUNCER_POOL_SIZE:-4}"
dir="${PGBOUNCER_DIR:-/tmp/nest-idempotency-pgbouncer}"
pidfile="$dir/pgbouncer.pid"
url="postgres://postgres@127.0.0.1:$port/postgres"

running() {
  [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

accepting() {
  pg_isready -q -h 127.0.0.1 -p "$port" -U postgres -d postgres 2>/dev/null
}

if [[ "${1:-start}" == "stop" ]]; then
  if running; then
    pid="$(cat "$pidfile")"
    kill -INT "$pid" # SIGINT: PgBouncer's immediate shutdown (SIGTERM waits for its clients to leave)
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "PgBouncer ($pid) did not stop within 5 s" >&2
      exit 1
    fi
  fi
  echo "PgBouncer stopped"
  exit 0
fi

if running; then
  echo "$url"
  exit 0
fi

if accepting; then
  echo "127.0.0.1:$port already answers, and not as this script's PgBouncer (Debian's pgbouncer service?):" \
    "stop it, or set PGBOUNCER_PORT" >&2
  exit 1
fi

if ! command -v pgbouncer >/dev/null 2>&1; then
  echo "pgbouncer is not installed (Debian: apt-get install pgbouncer)" >&2
  exit 1
fi

mkdir -p "$dir"
# PgBouncer refuses to run as root: as root it is told to switch to an unprivileged user, who owns its folder.
run_as=""
if [[ "$(id -u)" == "0" ]]; then
  run_as="$(id -un postgres 2>/dev/null || echo nobody)"
  chown "$run_as" "$dir"
fi

# PostgreSQL trusts 127.0.0.1 here (as CI's and the tests' servers do); `trust` still wants the user listed.
echo '"postgres" ""' >"$dir/userlist.txt"
cat >"$dir/pgbouncer.ini" <<EOF
[databases]
; Every database by its name: the tests create one per test file on the server.
* = host=$upstream_host port=$upstream_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $dir
pool_mode = transaction
auth_type = trust
auth_file = $dir/userlist.txt
max_client_conn = 2000
default_pool_size = $pool_size
; A client waiting longer than this for a server connection gets an error rather than hanging a test.
query_wait_timeout = 30
logfile = $dir/pgbouncer.log
pidfile = $pidfile
${run_as:+user = $run_as}
EOF

pgbouncer -d "$dir/pgbouncer.ini"
for _ in $(seq 1 100); do
  if running && accepting; then
    echo "$url"
    exit 0
  fi
  sleep 0.1
done
echo "PgBouncer did not accept connections on 127.0.0.1:$port within 10 s; its log:" >&2
tail -n 20 "$dir/pgbouncer.log" >&2 || true
exit 1
