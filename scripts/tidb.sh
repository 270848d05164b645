#!/usr/bin/env bash
# scripts/tidb.sh - TiDB (tidb-server, standalone, embedded unistore storage) for tests.
#
#   scripts/tidb.sh download fetch the modules of the build (no compile), e.g. while
#                            another build runs
#   scripts/tidb.sh build    build tidb-server from the Go module proxy into $TIDB_CACHE
#                            (skipped when cached)
#   scripts/tidb.sh [start]  build if needed, start on 127.0.0.1:$TIDB_PORT (root, no
#                            password, database "test"), wait until it answers
#   scripts/tidb.sh stop     stop the tidb-server this script started
#   scripts/tidb.sh status   exit 0 if it answers
#
# The proxy serves no TiDB version list, so one exact pseudo-version is pinned; its zip
# lacks the nested parser module, which is fetched at the same commit and put in place.
# Cold build ~7 min on 2 idle cores (nice 10); start ~3 s, ~300 MiB. The data lives in
# memory (-path ""), so every start is empty.
# If it cannot be had it prints one line "tidb: NOT TESTED this run: <reason>" and exits 3.
# scripts/lib.sh holds what this script shares with scripts/vitess.sh.
#
# Env: TIDB_CACHE (/var/cache/inbox-distsql/tidb-<commit>), TIDB_PORT (4000; status port
#      TIDB_PORT+10080), TIDB_TIMEOUT (build, 2400 s).
set -uo pipefail

COMMIT=20251126154744-e4e814fdc0af
VERSION=v1.1.0-beta.0.$COMMIT
PARSER_VERSION=v0.0.0-$COMMIT
ENGINE=tidb
CACHE=${TIDB_CACHE:-/var/cache/inbox-distsql/tidb-$COMMIT}
PORT=${TIDB_PORT:-4000}
STATUS_PORT=$((PORT + 10080))
TIMEOUT=${TIDB_TIMEOUT:-2400}
LOG=$CACHE/build.log
BIN=$CACHE/bin/tidb-server
PIDFILE=$CACHE/tidb-server.$PORT.pid
SRVLOG=$CACHE/tidb-server.$PORT.log
SELF=$(readlink -f "${BASH_SOURCE[0]}")
COLD_HINT="cold ~7 min on 2 idle cores"
# shellcheck source=scripts/lib.sh
. "$(dirname "$SELF")/lib.sh"

built() { [[ -x $BIN && -f $CACHE/built.ok ]]; }

# module_dir MODULE@VERSION: download a module into the module cache, print its folder.
module_dir() {
	GOWORK=off GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# src: TiDB's source in $CACHE/src with its parser module in place (the module's zip
# lacks the nested parser module, fetched at the same commit), and every module
# tidb-server imports downloaded.
src() {
	local dir pdir src=$CACHE/src
	dir=$(module_dir "github.com/pingcap/tidb@$VERSION")
	pdir=$(module_dir "github.com/pingcap/tidb/pkg/parser@$PARSER_VERSION")
	[[ -d $dir && -d $pdir ]] || { echo "module download failed"; return 1; }
	if [[ ! -f $src/.complete ]]; then
		rm -rf "$src" && mkdir -p "$src" && cp -r "$dir/." "$src/" && chmod -R u+w "$src" &&
			rm -rf "$src/pkg/parser" && cp -r "$pdir" "$src/pkg/parser" && chmod -R u+w "$src/pkg/parser" &&
			touch "$src/.complete" || return 1
	fi
	(cd "$src" && GOWORK=off GOFLAGS=-mod=mod go list -deps ./cmd/tidb-server >/dev/null)
}

do_build() {
	set -e
	src
	mkdir -p "$CACHE/bin"
	cd "$CACHE/src"
	go_build_engine -o "$BIN.tmp" ./cmd/tidb-server
	mv -f "$BIN.tmp" "$BIN"
	rm -rf "$CACHE/src" # 200 MB of sources; the module cache keeps the zips
	echo "$VERSION" >"$CACHE/built.ok"
}

# download: src, under the build lock, unless the build is cached.
download() {
	built && return 0
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.build.lock"
	flock -w "$TIMEOUT" 8 || not_tested "another build holds $CACHE/.build.lock"
	built || src >>"$LOG" 2>&1
}

build() { build_cached "github.com/pingcap/tidb $VERSION" || exit; }

# tidb_answers [SQL]: a real login over TCP.
tidb_answers() { answers "$PORT" "$@"; }

# our_pid: the tidb-server this script started, if it still runs.
our_pid() { running_pid "$PIDFILE" tidb-server "-P $PORT "; }

start() {
	if tidb_answers >/dev/null; then
		echo "tidb: up (127.0.0.1:$PORT)"
		return 0
	fi
	build
	if our_pid >/dev/null; then
		stop >/dev/null
	fi
	local pid
	# setsid: its own session, so that the CI job's process group does not take it down.
	setsid "$BIN" -store unistore -path "" -host 127.0.0.1 -P "$PORT" -status "$STATUS_PORT" \
		-log-file "$SRVLOG" -log-slow-query "$SRVLOG.slow" -L warn </dev/null >>"$SRVLOG.out" 2>&1 &
	pid=$!
	echo "$pid" >"$PIDFILE"
	wait_answers "$pid" "$PORT" 90 "$SRVLOG.out" TERM
	tidb_answers 'CREATE DATABASE IF NOT EXISTS test' >/dev/null || not_tested "CREATE DATABASE test failed"
	echo "tidb: up (127.0.0.1:$PORT, $(tidb_answers 'select version()'))"
}

stop() { stop_ours TERM 30; }

status() { status_of "$PORT"; }

case "${1:-start}" in
download) download ;;
build) build ;;
__build) do_build ;;
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 [download|build|start|stop|status]" >&2
	exit 2
	;;
esac
