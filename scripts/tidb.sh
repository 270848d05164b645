#!/usr/bin/env bash
# scripts/tidb.sh - TiDB (tidb-server, standalone, embedded unistore storage) for tests.
#
#   scripts/tidb.sh build    build tidb-server from the Go module proxy into $TIDB_CACHE
#                            (skipped when cached)
#   scripts/tidb.sh [start]  build if needed, start on 127.0.0.1:$TIDB_PORT (root, no
#                            password, database "test"), wait until it answers
#   scripts/tidb.sh stop     stop the tidb-server this script started
#   scripts/tidb.sh status   exit 0 if it answers
#
# The proxy serves no TiDB version list, so one exact pseudo-version is pinned; its zip
# lacks the nested parser module, which is fetched at the same commit and put in place.
# Cold build ~7 min on 2 cores (nice 10); start ~3 s, ~300 MiB. The data lives in memory
# (-path ""), so every start is empty.
# If it cannot be had it prints one line "tidb: NOT TESTED this run: <reason>" and exits 3.
#
# Env: TIDB_CACHE (/var/cache/inbox-distsql/tidb-<commit>), TIDB_PORT (4000; status port
#      TIDB_PORT+10080), TIDB_TIMEOUT (build, 2400 s).
set -uo pipefail

COMMIT=20251126154744-e4e814fdc0af
VERSION=v1.1.0-beta.0.$COMMIT
PARSER_VERSION=v0.0.0-$COMMIT
CACHE=${TIDB_CACHE:-/var/cache/inbox-distsql/tidb-$COMMIT}
PORT=${TIDB_PORT:-4000}
STATUS_PORT=$((PORT + 10080))
TIMEOUT=${TIDB_TIMEOUT:-2400}
LOG=$CACHE/build.log
BIN=$CACHE/bin/tidb-server
PIDFILE=$CACHE/tidb-server.$PORT.pid
SRVLOG=$CACHE/tidb-server.$PORT.log
SELF=$(readlink -f "${BASH_SOURCE[0]}")

not_tested() {
	echo "tidb: NOT TESTED this run: $*"
	exit 3
}

built() { [[ -x $BIN && -f $CACHE/built.ok ]]; }

do_build() {
	set -e
	local dir pdir src=$CACHE/src
	dir=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/pingcap/tidb@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	pdir=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/pingcap/tidb/pkg/parser@$PARSER_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir && -d $pdir ]] || { echo "module download failed"; exit 1; }
	rm -rf "$src"
	mkdir -p "$src" "$CACHE/bin"
	cp -r "$dir/." "$src/"
	chmod -R u+w "$src"
	rm -rf "$src/pkg/parser"
	cp -r "$pdir" "$src/pkg/parser"
	chmod -R u+w "$src/pkg/parser"
	cd "$src"
	CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod nice -n 10 go build -trimpath -o "$BIN.tmp" ./cmd/tidb-server
	mv -f "$BIN.tmp" "$BIN"
	rm -rf "$src" # 200 MB of sources; the module cache keeps the zips
	echo "$VERSION" >"$CACHE/built.ok"
}

build() {
	if built; then
		echo "tidb: $VERSION cached in $CACHE"
		return 0
	fi
	command -v go >/dev/null || not_tested "go not in PATH"
	mkdir -p "$CACHE" || not_tested "cannot create $CACHE"
	exec 8>"$CACHE/.build.lock"
	flock -w "$TIMEOUT" 8 || not_tested "another build holds $CACHE/.build.lock"
	if built; then
		echo "tidb: $VERSION cached in $CACHE"
		return 0
	fi
	echo "tidb: building $VERSION into $CACHE (cold ~7 min on 2 cores; log $LOG)" >&2
	local t0=$SECONDS
	if ! (timeout -k 10 "$TIMEOUT" bash "$SELF" __build) >>"$LOG" 2>&1; then
		not_tested "build of github.com/pingcap/tidb $VERSION failed or timed out (log: $LOG)"
	fi
	echo "tidb: built in $((SECONDS - t0)) s"
}

# answers: a real login over TCP, with the host's client if there is one.
answers() {
	local sql=${1:-select 1}
	if command -v mariadb >/dev/null 2>&1; then
		mariadb --protocol=tcp -h127.0.0.1 -P"$PORT" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	elif command -v mysql >/dev/null 2>&1; then
		mysql --protocol=tcp -h127.0.0.1 -P"$PORT" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
	fi
}

# pid of the tidb-server this script started, if it still runs.
running_pid() {
	local pid
	[[ -s $PIDFILE ]] || return 1
	pid=$(<"$PIDFILE")
	[[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == tidb-server ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-P $PORT " || return 1
	echo "$pid"
}

start() {
	if answers >/dev/null; then
		echo "tidb: up (127.0.0.1:$PORT)"
		return 0
	fi
	build
	if running_pid >/dev/null; then
		stop >/dev/null
	fi
	local pid end
	# setsid: its own session, so that the CI job's process group does not take it down.
	setsid "$BIN" -store unistore -path "" -host 127.0.0.1 -P "$PORT" -status "$STATUS_PORT" \
		-log-file "$SRVLOG" -log-slow-query "$SRVLOG.slow" -L warn </dev/null >>"$SRVLOG.out" 2>&1 &
	pid=$!
	echo "$pid" >"$PIDFILE"
	end=$((SECONDS + 90))
	until answers >/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$SRVLOG.out" >&2
			not_tested "tidb-server exited at start (log: $SRVLOG.out)"
		fi
		if ((SECONDS >= end)); then
			kill "$pid" 2>/dev/null || true
			not_tested "tidb-server did not answer on 127.0.0.1:$PORT within 90 s"
		fi
		sleep 0.25
	done
	answers 'CREATE DATABASE IF NOT EXISTS test' >/dev/null || not_tested "CREATE DATABASE test failed"
	echo "tidb: up (127.0.0.1:$PORT, $(answers 'select version()'))"
}

stop() {
	local pid end
	if ! pid=$(running_pid); then
		echo "tidb: not running"
		return 0
	fi
	kill -TERM "$pid"
	end=$((SECONDS + 30))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= end)); then
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.25
	done
	rm -f "$PIDFILE"
	echo "tidb: stopped"
}

status() {
	if answers >/dev/null; then echo "tidb: up (127.0.0.1:$PORT)"; else echo "tidb: down"; return 1; fi
}

case "${1:-start}" in
build) build ;;
__build) do_build ;;
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 [build|start|stop|status]" >&2
	exit 2
	;;
esac
