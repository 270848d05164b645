#!/usr/bin/env bash
# scripts/vitess.sh - Vitess (vttestserver: one vtcombo + one mysqld, 2 shards) for tests.
#
#   scripts/vitess.sh download fetch the modules of the build (no compile), e.g. while
#                              another build runs
#   scripts/vitess.sh build    build vttestserver, vtcombo, mysqlctl from the Go module proxy
#                              into $VITESS_CACHE (skipped when cached)
#   scripts/vitess.sh [start]  build if needed, then serve keyspace "inbox" (shards -80, 80-)
#                              with vtgate's MySQL protocol on 127.0.0.1:$VITESS_PORT+3
#   scripts/vitess.sh stop     SIGINT to the vttestserver this script started (SIGTERM leaves
#                              vtcombo and mysqld running), wait for it
#   scripts/vitess.sh status   exit 0 if vtgate answers
#
# mysqlctl refuses to run as root, and Debian 12 has no MySQL server, so vttestserver runs
# as the user "vitess" inside a chroot that is an overlay on scripts/mysql-sid.sh's Debian
# sid chroot (MySQL 9.7 server and client): its packages are reused and never written to,
# and its mysqld on 3307 is not touched. When the mysql-sid chroot is missing it is built
# (scripts/mysql-sid.sh start; it then runs).
# Cold build ~5 min on 2 idle cores (nice 10); warm start ~8 s. Needs root.
# If an engine cannot be had it prints one line "vitess: NOT TESTED this run: <reason>" and
# exits 3. scripts/lib.sh holds what this script shares with scripts/tidb.sh.
#
# Several servers can run from one build, each on its own VITESS_PORT (it uses the port
# and the next three) with its own folder ($VITESS_CACHE/run for 15300, run-<port> for
# another): .ci/run gives the mysqld-kill test one of its own.
#
# Env: VITESS_CACHE (/var/cache/inbox-distsql/vitess-v0.24.4), VITESS_PORT (15300: vtgate
#      MySQL on 15303), VITESS_TIMEOUT (build, 2400 s), MYSQL_SID_ROOT (the mysql-sid cache).
set -uo pipefail

VERSION=v0.24.4
ENGINE=vitess
CACHE=${VITESS_CACHE:-/var/cache/inbox-distsql/vitess-$VERSION}
PORT=${VITESS_PORT:-15300}
MYSQL_PORT=$((PORT + 3))
TIMEOUT=${VITESS_TIMEOUT:-2400}
SID=${MYSQL_SID_ROOT:-/var/cache/inbox-mysql-sid}
LOG=$CACHE/build.log
BIN=$CACHE/bin
RUN=$CACHE/run        # overlay upper/work/merged, data dir, pid, log
[[ $PORT == 15300 ]] || RUN=$CACHE/run-$PORT
PIDFILE=$RUN/vttestserver.pid
SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
COLD_HINT="cold ~5 min on 2 idle cores"
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

built() { [[ -x $BIN/vttestserver && -x $BIN/mysqlctl && -f $CACHE/built.ok && ( -x $BIN/vtcombo.real || -x $BIN/vtcombo ) ]]; }

# src: the module that requires Vitess and imports the three commands, in $CACHE/src,
# with its dependencies downloaded.
src() {
	local src=$CACHE/src
	mkdir -p "$src"
	cd "$src"
	cat >go.mod <<GOMOD
module inboxvitess

go 1.26

require vitess.io/vitess $VERSION

// Repeated from vitess.io/vitess's go.mod: without it the build selects a version it excludes.
exclude github.com/DataDog/opentelemetry-mapping-go/pkg/otlp/attributes v0.33.0
GOMOD
	cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "vitess.io/vitess/go/cmd/mysqlctl"
	_ "vitess.io/vitess/go/cmd/vtcombo"
	_ "vitess.io/vitess/go/cmd/vttestserver"
)
GO
	GOFLAGS=-mod=mod GOWORK=off go mod tidy -e
}

do_build() {
	set -e
	src
	mkdir -p "$BIN"
	# One build of the three commands, so that their shared packages compile once.
	rm -rf "$BIN.tmp"
	mkdir -p "$BIN.tmp"
	go_build_engine -o "$BIN.tmp/" \
		vitess.io/vitess/go/cmd/vttestserver vitess.io/vitess/go/cmd/vtcombo vitess.io/vitess/go/cmd/mysqlctl
	rm -f "$BIN/vtcombo.real"
	mv -f "$BIN.tmp"/* "$BIN/"
	rmdir "$BIN.tmp"
	vtcombo_wrapper
	# $VTROOT/config from the module, with MySQL 9.7's names for two settings.
	local dir
	dir=$(GOWORK=off go list -m -f '{{.Dir}}' vitess.io/vitess)
	rm -rf "$CACHE/vtroot"
	mkdir -p "$CACHE/vtroot"
	cp -r "$dir/config" "$CACHE/vtroot/config"
	chmod -R u+w "$CACHE/vtroot"
	sed -i -e 's/^innodb_log_file_size.*/innodb_redo_log_capacity = 10M/' \
		-e 's/^slave_net_timeout/replica_net_timeout/' "$CACHE/vtroot/config/mycnf/test-suite.cnf"
	echo "$VERSION" >"$CACHE/built.ok"
}

# vtcombo_wrapper puts a script in front of vtcombo: vttestserver gives its tablets 4
# transactions each (--queryserver-config-transaction-cap 4) and leaves a prepared 2PC
# transaction unresolved for 15 min; the flags appended here come last, so they win.
# --schema-change-signal=false turns vtgate's schema tracker off: its rebuild of the
# VSchema after a table is created or dropped can start from the VSchema before a
# concurrent ALTER VSCHEMA and then serve a table without its vindex (vtgate's
# VSchemaManager.Rebuild reads, builds, then overwrites), which the tests, creating and
# dropping tables all the time, hit. Every inbox table is in the VSchema explicitly.
vtcombo_wrapper() {
	[[ -x $BIN/vtcombo.real ]] || mv -f "$BIN/vtcombo" "$BIN/vtcombo.real"
	cat >"$BIN/vtcombo" <<'SH'
#!/bin/sh
exec "$(dirname "$0")/vtcombo.real" "$@" --queryserver-config-transaction-cap 32 --twopc-abandon-age 2s --schema-change-signal=false
SH
	chmod +x "$BIN/vtcombo"
}

build() {
	build_cached "vitess.io/vitess $VERSION" || exit
	# The wrapper's flags are this script's, not the cached build's: write them each time.
	vtcombo_wrapper
}

# vtgate_answers [SQL]: vtgate answers a query on its MySQL port.
vtgate_answers() { answers "$MYSQL_PORT" "$@"; }

# our_pid: the vttestserver this script started, if it still runs.
our_pid() { running_pid "$PIDFILE" vttestserver "--port $PORT "; }

# __serve: runs in a private mount namespace (unshare -m): mounts the overlay chroot and
# execs vttestserver in it as the user vitess. Nothing is mounted in the host's namespace.
serve() {
	set -e
	local m=$RUN/merged
	mount -t overlay overlay -o "lowerdir=$SID/root,upperdir=$RUN/upper,workdir=$RUN/work" "$m"
	mount --rbind /proc "$m/proc"
	mount --rbind /dev "$m/dev"
	mkdir -p "$m/opt/vitess/bin" "$m/opt/vitess/config" "$m/var/lib/vitess"
	mount --bind "$BIN" "$m/opt/vitess/bin"
	mount --bind "$CACHE/vtroot/config" "$m/opt/vitess/config"
	mount --bind "$RUN/data" "$m/var/lib/vitess"
	cd "$m"
	exec chroot --userspec=vitess:vitess "$m" /usr/bin/env -i HOME=/var/lib/vitess USER=vitess \
		PATH=/opt/vitess/bin:/usr/sbin:/usr/bin:/sbin:/bin VTROOT=/opt/vitess \
		VTDATAROOT=/var/lib/vitess/vtdataroot VT_MYSQL_ROOT=/usr \
		/opt/vitess/bin/vttestserver --port "$PORT" --keyspaces inbox --num-shards 2 \
		--schema-dir /var/lib/vitess/schema --data-dir /var/lib/vitess/data \
		--mysql-bind-host 127.0.0.1 --vschema-ddl-authorized-users % --vtcombo-bind-host 127.0.0.1 \
		--extra-my-cnf /var/lib/vitess/durable.cnf --alsologtostderr ${VITESS_ARGS:-}
}

start() {
	if vtgate_answers >/dev/null; then
		echo "vitess: up (vtgate 127.0.0.1:$MYSQL_PORT)"
		return 0
	fi
	[[ $EUID -eq 0 ]] || not_tested "needs root (chroot, mount)"
	build
	# The chroot's packages: scripts/mysql-sid.sh builds them once (and starts its mysqld).
	if [[ ! -f $SID/built.ok || ! -x $SID/root/usr/sbin/mysqld ]]; then
		local rc=0 out
		out=$(MYSQL_SID_ROOT=$SID "$HERE/mysql-sid.sh" start) || rc=$?
		((rc == 0)) || not_tested "no MySQL 9.7 chroot for vttestserver's mysqld: ${out#mysql: NOT TESTED this run: }"
	fi
	mkdir -p "$RUN"
	exec 9>"$RUN/.lock"
	flock -w 60 9 || not_tested "another vitess.sh holds $RUN/.lock"
	if our_pid >/dev/null; then
		stop >/dev/null
	fi
	# The overlay's upper layer: a user vitess (mysqlctl refuses root), localhost, a fresh
	# data folder. The sid chroot itself is only read.
	rm -rf "$RUN/upper" "$RUN/work" "$RUN/data"
	mkdir -p "$RUN/upper/etc" "$RUN/work" "$RUN/merged" "$RUN/data/schema/inbox" "$RUN/data/data" "$RUN/data/vtdataroot"
	cp "$SID/root/etc/passwd" "$SID/root/etc/group" "$RUN/upper/etc/"
	echo "vitess:x:15300:15300:vttestserver:/var/lib/vitess:/bin/sh" >>"$RUN/upper/etc/passwd"
	echo "vitess:x:15300:" >>"$RUN/upper/etc/group"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"$RUN/upper/etc/hosts"
	cat >"$RUN/data/schema/inbox/vschema.json" <<'JSON'
{
  "sharded": true,
  "vindexes": {
    "xxhash": {"type": "xxhash"},
    "hash": {"type": "hash"}
  },
  "tables": {}
}
JSON
	# vttestserver's my.cnf has innodb_flush_log_at_trx_commit = 0: a killed mysqld would
	# lose up to a second of commits it had confirmed. 2 writes the log at every commit,
	# which a mysqld crash cannot lose (an OS crash could; production runs 1).
	printf '[mysqld]\ninnodb_flush_log_at_trx_commit = 2\n' >"$RUN/data/durable.cnf"
	chown -R 15300:15300 "$RUN/data"
	local log=$RUN/vttestserver.log pid
	setsid unshare -m --propagation private bash "$SELF" __serve </dev/null >"$log" 2>&1 9>&- &
	pid=$!
	echo "$pid" >"$PIDFILE"
	wait_answers "$pid" "$MYSQL_PORT" 120 "$log" INT
	echo "vitess: up (vtgate 127.0.0.1:$MYSQL_PORT, keyspace inbox, shards -80 80-)"
}

# SIGINT: vttestserver tears down vtcombo and mysqld (mysqladmin shutdown). SIGTERM would
# leave both running.
stop() { stop_ours INT 60; }

status() { status_of "$MYSQL_PORT" vtgate; }

case "${1:-start}" in
download) built || (mkdir -p "$CACHE" && src) >>"$LOG" 2>&1 ;;
build) build ;;
__build) do_build ;;
__serve) serve ;;
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 [download|build|start|stop|status]" >&2
	exit 2
	;;
esac
