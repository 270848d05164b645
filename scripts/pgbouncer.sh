#!/usr/bin/env bash
# pgbouncer.sh: start (or stop) PgBouncer in transaction pooling mode in front of the
# local PostgreSQL, on a loopback port of its own (default 6439), for the conformance
# suite's pgbouncer flavours. No Docker: Debian's pgbouncer package (1.18 on Debian 12),
# installed when missing.
#
#   scripts/pgbouncer.sh [start]  start it unless it answers; print
#                                 "pgbouncer: up (127.0.0.1:6439, pool_mode=transaction)"
#   scripts/pgbouncer.sh stop     stop the PgBouncer this script started
#   scripts/pgbouncer.sh status   exit 0 if it answers a query through to PostgreSQL
#
# Environment:
#   PGBOUNCER_PORT  its port (default 6439)
#   PGBOUNCER_DIR   config, pid and log files (default ${TMPDIR:-/tmp}/inbox-pgbouncer)
#   PGBOUNCER_PG    the PostgreSQL behind it (default "host=127.0.0.1 port=5432")
#   PGBOUNCER_POOL_MODE  transaction (default) or session: the tests start a session-mode
#                   one of their own, on another port and directory, as a control
#
# Every database of that server is reachable through it under its own name, as user
# postgres without a password (trust, like the test server). Each server connection
# starts with lock_timeout = 41s (connect_query): the suite compares what a handler sees
# with a session value that is not the server's default, and a client cannot set one
# through a transaction pooler (a startup parameter is refused, a session SET would leak
# to other clients). The tests reach it through INBOX_PGBOUNCER_DSN, which .ci/run sets:
#   postgres://postgres@127.0.0.1:6439/test?sslmode=disable
set -euo pipefail

PORT="${PGBOUNCER_PORT:-6439}"
DIR="${PGBOUNCER_DIR:-${TMPDIR:-/tmp}/inbox-pgbouncer}"
PG="${PGBOUNCER_PG:-host=127.0.0.1 port=5432}"
MODE="${PGBOUNCER_POOL_MODE:-transaction}"
BIN=/usr/sbin/pgbouncer

die() { echo "pgbouncer: $*" >&2; exit 1; }
answers() { psql "postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable&connect_timeout=2" -Atqc 'select 1' >/dev/null 2>&1 </dev/null; }

stop() {
  if [[ -f "$DIR/pgbouncer.pid" ]]; then
    kill "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null || true
    for _ in $(seq 1 40); do answers || break; sleep 0.25; done
  fi
  rm -rf "$DIR"
}

start() {
  if answers; then echo "pgbouncer: up (127.0.0.1:$PORT, pool_mode=$MODE)"; return; fi
  if [[ ! -x $BIN ]]; then
    [[ $(id -u) == 0 ]] || die "pgbouncer is not installed: apt-get install -y pgbouncer"
    "$(dirname "$0")/apt-get.sh" install -y -q --no-install-recommends pgbouncer >/dev/null ||
      die "apt-get install pgbouncer failed"
  fi
  # A leftover from an earlier run that no longer answers: start from scratch.
  stop
  mkdir -p "$DIR"
  cat >"$DIR/pgbouncer.ini" <<EOF
[databases]
* = $PG connect_query='SET lock_timeout = ''41s'''

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = postgres
pool_mode = $MODE
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 0
reserve_pool_size = 0
server_reset_query =
server_check_delay = 10
; pgx sends these at connect; PgBouncer would refuse the connection otherwise.
ignore_startup_parameters = extra_float_digits,lock_timeout,statement_timeout,search_path,default_transaction_isolation,bytea_output
pidfile = $DIR/pgbouncer.pid
logfile = $DIR/pgbouncer.log
log_connections = 0
log_disconnections = 0
EOF
  echo '"postgres" ""' >"$DIR/userlist.txt"
  # PgBouncer refuses to run as root: it runs as the postgres user.
  if [[ $(id -u) == 0 ]]; then
    chown -R postgres: "$DIR"
    $BIN -d -u postgres "$DIR/pgbouncer.ini" >>"$DIR/start.log" 2>&1 || die "did not start (see $DIR/start.log, $DIR/pgbouncer.log)"
  else
    $BIN -d "$DIR/pgbouncer.ini" >>"$DIR/start.log" 2>&1 || die "did not start (see $DIR/start.log, $DIR/pgbouncer.log)"
  fi
  for _ in $(seq 1 80); do answers && break; sleep 0.25; done
  answers || die "it does not answer on 127.0.0.1:$PORT (see $DIR/pgbouncer.log)"
  echo "pgbouncer: up (127.0.0.1:$PORT, pool_mode=$MODE)"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  *) die "usage: $0 [start|stop|status]" ;;
esac
