#!/usr/bin/env bash
# redis-cluster.sh: start (or stop) a local Redis Cluster of 3 primaries for the tests,
# on loopback ports of its own (default 7101-7103), with no persistence. No Docker.
#
#   scripts/redis-cluster.sh [start]  start the nodes that are down and create the
#                                     cluster unless it is ok; print
#                                     "redis-cluster: up (127.0.0.1:7101,...)"
#   scripts/redis-cluster.sh stop     stop the nodes this script started
#   scripts/redis-cluster.sh status   exit 0 if the cluster answers cluster_state:ok
#
# Environment:
#   REDIS_CLUSTER_PORTS  the 3 ports (default "7101 7102 7103"; bus ports are +10000)
#   REDIS_CLUSTER_DIR    data, config, pid and log files (default /tmp/inbox-redis-cluster)
#
# The tests reach it through INBOX_REDIS_CLUSTER=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103.
set -euo pipefail

read -r -a PORTS <<<"${REDIS_CLUSTER_PORTS:-7101 7102 7103}"
DIR="${REDIS_CLUSTER_DIR:-/tmp/inbox-redis-cluster}"
ADDRS=$(printf '127.0.0.1:%s,' "${PORTS[@]}")
ADDRS=${ADDRS%,}

die() { echo "redis-cluster: $*" >&2; exit 1; }
ok() { redis-cli -h 127.0.0.1 -p "${PORTS[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }
answers() { redis-cli -h 127.0.0.1 -p "$1" ping >/dev/null 2>&1; }

stop() {
  for port in "${PORTS[@]}"; do
    if [[ -f "$DIR/$port/redis.pid" ]]; then
      kill "$(cat "$DIR/$port/redis.pid")" 2>/dev/null || true
    fi
  done
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 40); do answers "$port" || break; sleep 0.25; done
  done
  rm -rf "$DIR"
}

start() {
  command -v redis-server >/dev/null || die "redis-server is not installed (apt-get install redis-server)"
  if ok; then echo "redis-cluster: up ($ADDRS)"; return; fi
  # A half-made cluster from an earlier run: start from scratch.
  stop
  for port in "${PORTS[@]}"; do
    mkdir -p "$DIR/$port"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --dir "$DIR/$port" \
      --cluster-enabled yes --cluster-config-file "$DIR/$port/nodes.conf" \
      --save "" --appendonly no --pidfile "$DIR/$port/redis.pid" --logfile "$DIR/$port/redis.log"
  done
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 80); do answers "$port" && break; sleep 0.25; done
    answers "$port" || die "node $port did not start (see $DIR/$port/redis.log)"
  done
  local nodes=()
  for port in "${PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 ||
    die "redis-cli --cluster create failed (see $DIR/create.log)"
  for _ in $(seq 1 120); do ok && break; sleep 0.25; done
  ok || die "the cluster did not reach cluster_state:ok"
  echo "redis-cluster: up ($ADDRS)"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) ok ;;
  *) die "usage: $0 [start|stop|status]" ;;
esac
