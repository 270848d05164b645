#!/usr/bin/env bash
# kafka-dev.sh: start (or stop) the Kafka wire-protocol dev broker from
# cmd/kafka-dev in the background, for the tests and examples. No Docker.
#
#   scripts/kafka-dev.sh [start]   build if needed, start on $KAFKA_DEV_PORT unless
#                                  something already listens there, wait for READY,
#                                  print "kafka: up (127.0.0.1:9092)"
#   scripts/kafka-dev.sh stop      stop the broker this script started
#   scripts/kafka-dev.sh status    exit 0 if something listens on the port
#
# Environment:
#   KAFKA_DEV_PORT     port to listen on (default 9092)
#   KAFKA_DEV_BIN      where the binary is cached (default /tmp/inbox-kafka-dev);
#                      rebuilt when cmd/kafka-dev/{*.go,go.mod,go.sum} is newer
#   KAFKA_DEV_PIDFILE  pid file (default /tmp/inbox-kafka-dev.$KAFKA_DEV_PORT.pid)
#   KAFKA_DEV_LOG      broker log, stdout+stderr (default /tmp/inbox-kafka-dev.$KAFKA_DEV_PORT.log)
#   KAFKA_DEV_ARGS     extra flags, e.g. "-partitions 8 -data-dir /tmp/kdata -log-level info"
#   KAFKA_DEV_WAIT     seconds to wait for READY after starting (default 60)
#
# Clients then use brokers 127.0.0.1:$KAFKA_DEV_PORT.
set -euo pipefail

PORT="${KAFKA_DEV_PORT:-9092}"
BIN="${KAFKA_DEV_BIN:-/tmp/inbox-kafka-dev}"
PIDFILE="${KAFKA_DEV_PIDFILE:-/tmp/inbox-kafka-dev.${PORT}.pid}"
LOG="${KAFKA_DEV_LOG:-/tmp/inbox-kafka-dev.${PORT}.log}"
WAIT="${KAFKA_DEV_WAIT:-60}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/cmd/kafka-dev"

die() { echo "kafka: $*" >&2; exit 1; }

case "$PORT" in
  '' | *[!0-9]*) die "KAFKA_DEV_PORT must be a single port number, got '$PORT'" ;;
esac

# listening PORT: true if a TCP connect to 127.0.0.1:PORT succeeds.
listening() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ours PID: true if PID is alive and is a broker this script started for PORT
# (started as "<bin> -ports PORT ..."), so a recycled pid is never killed.
ours() {
  local pid="$1" args
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 0 # no /proc: trust the pid file
  args="$(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n '2,3p' | tr '\n' ' ')"
  [[ "$args" == "-ports $PORT " ]]
}

build() {
  [[ -f "$SRC/main.go" && -f "$SRC/go.mod" ]] || die "sources not found in $SRC"
  if [[ -x "$BIN" ]] && [[ -z "$(find "$SRC" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$BIN" -print -quit)" ]]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go not found in PATH (needed to build $SRC)"
  echo "kafka: building $BIN (first build takes about a minute)" >&2
  mkdir -p "$(dirname "$BIN")"
  local tmp="$BIN.tmp.$$"
  # Nested module: build it on its own, ignoring any go.work at the root.
  if ! GOWORK=off go build -C "$SRC" -buildvcs=false -o "$tmp" . >&2; then
    rm -f "$tmp"
    die "build of $SRC failed"
  fi
  mv -f "$tmp" "$BIN"
}

start() {
  if listening "$PORT"; then
    if [[ -f "$PIDFILE" ]] && ours "$(cat "$PIDFILE")"; then
      echo "kafka: already running (pid $(cat "$PIDFILE"))" >&2
    else
      echo "kafka: something already listens on 127.0.0.1:$PORT, not starting another broker" >&2
    fi
    echo "kafka: up (127.0.0.1:$PORT)"
    return 0
  fi
  if [[ -f "$PIDFILE" ]] && ours "$(cat "$PIDFILE")"; then
    # Alive but not listening on PORT: a stale or stuck broker of ours; replace it.
    stop >/dev/null
  fi

  build

  mkdir -p "$(dirname "$LOG")" "$(dirname "$PIDFILE")"
  # shellcheck disable=SC2086 # KAFKA_DEV_ARGS is split into flags on purpose
  nohup "$BIN" -ports "$PORT" ${KAFKA_DEV_ARGS:-} </dev/null >"$LOG" 2>&1 &
  local pid=$!
  echo "$pid" >"$PIDFILE"

  local deadline=$((SECONDS + WAIT)) ready=""
  while :; do
    ready="$(grep -m1 '^READY ' "$LOG" 2>/dev/null || true)"
    [[ -n "$ready" ]] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      echo "kafka: broker exited before it was ready; log $LOG:" >&2
      sed 's/^/  /' "$LOG" >&2 || true
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      kill "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      echo "kafka: broker not ready after ${WAIT}s; log $LOG:" >&2
      sed 's/^/  /' "$LOG" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  echo "kafka: up (${ready#READY })"
}

stop() {
  if [[ ! -f "$PIDFILE" ]]; then
    echo "kafka: not running (no pid file $PIDFILE)"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  if ! ours "$pid"; then
    rm -f "$PIDFILE"
    echo "kafka: not running (stale pid file removed)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do # up to 10 s for a clean shutdown (flushes -data-dir)
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
    if kill -0 "$pid" 2>/dev/null; then
      die "could not stop pid $pid"
    fi
    echo "kafka: killed (pid $pid did not exit on SIGTERM within 10s)" >&2
  fi
  rm -f "$PIDFILE"
  echo "kafka: stopped (pid $pid)"
}

status() {
  if listening "$PORT"; then
    echo "kafka: up (127.0.0.1:$PORT)"
  else
    echo "kafka: down (nothing listens on 127.0.0.1:$PORT)"
    return 1
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  -h | --help | help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$1' (want start, stop or status)" ;;
esac
