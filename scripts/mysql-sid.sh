#!/usr/bin/env bash
# scripts/mysql-sid.sh - real MySQL 9.x (Debian sid's mysql-server-core) for tests,
# run from a debootstrap chroot (Debian 12 has no MySQL server, only MariaDB).
#
#   scripts/mysql-sid.sh [start]   ensure mysqld answers on 127.0.0.1:3307
#                                  (root, empty password, database "test")
#   scripts/mysql-sid.sh stop      stop the mysqld this script started
#   scripts/mysql-sid.sh status    exit 0 if it answers
#
# The chroot is cached in $MYSQL_SID_ROOT (default /var/cache/inbox-mysql-sid) and
# built only when missing or incomplete (cold ~1 min, ~800 MB; warm start ~2 s).
# Needs root. If it cannot be set up (no mirror, debootstrap fails, timeout ...)
# it prints one line "mysql: NOT TESTED this run: <reason>" and exits 3.
# Noisy output goes to $MYSQL_SID_ROOT/setup.log.
#
# Env: MYSQL_SID_ROOT, MYSQL_SID_PORT (3307), MYSQL_SID_TIMEOUT (whole setup, 300 s),
#      MYSQL_SID_MIRROR (Debian mirror URL; default: taken from this machine's apt sources).

set -uo pipefail

CACHE=${MYSQL_SID_ROOT:-/var/cache/inbox-mysql-sid}
PORT=${MYSQL_SID_PORT:-3307}
TIMEOUT=${MYSQL_SID_TIMEOUT:-300}
ROOT=$CACHE/root           # the chroot
LOG=$CACHE/setup.log
PIDFILE=$CACHE/mysqld.pid
MARKER=$CACHE/built.ok     # written at the end of a successful build
DATADIR=/var/lib/mysqltest # inside the chroot
SELF=$(readlink -f "${BASH_SOURCE[0]}")

not_tested() {
	echo "mysql: NOT TESTED this run: $*"
	exit 3
}

# answers: a real login over TCP, with the host's client or else the chroot's.
answers() {
	local sql=${1:-select 1}
	if command -v mariadb >/dev/null 2>&1; then
		mariadb --protocol=tcp -h127.0.0.1 -P"$PORT" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	elif command -v mysql >/dev/null 2>&1; then
		mysql --protocol=tcp -h127.0.0.1 -P"$PORT" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	elif [[ -x $ROOT/usr/bin/mysql && $EUID -eq 0 ]]; then
		chroot "$ROOT" mysql --protocol=tcp -h127.0.0.1 -P"$PORT" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	else
		return 1
	fi
}

# pid of the mysqld we started, if it still runs.
running_pid() {
	local pid
	for f in "$PIDFILE" "$ROOT/run/mysqld-sid.pid"; do
		[[ -s $f ]] || continue
		pid=$(<"$f")
		[[ $pid =~ ^[0-9]+$ ]] || continue
		[[ $(cat "/proc/$pid/comm" 2>/dev/null) == mysqld ]] || continue
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--port=$PORT " || continue
		echo "$pid"
		return 0
	done
	return 1
}

umount_chroot() { # lazily unmount anything left mounted under the chroot (e.g. by a killed debootstrap)
	local m
	awk -v r="$ROOT" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r |
		while read -r m; do umount -l "$m" || true; done
}

# Candidate "URI SUITE" pairs from this machine's apt sources (one-line and deb822 formats).
apt_sources() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		sed -E 's/#.*//; s/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] || continue
		awk 'BEGIN { RS = ""; FS = "\n" }
		{
			delete kv; last = ""
			for (i = 1; i <= NF; i++) {
				l = $i
				if (l ~ /^#/) continue
				if (l ~ /^[ \t]/ && last != "") { kv[last] = kv[last] " " l; continue }
				if (match(l, /^[A-Za-z-]+:/)) { last = tolower(substr(l, 1, RLENGTH - 1)); kv[last] = substr(l, RLENGTH + 1) }
			}
			if (kv["types"] !~ /(^|[ \t])deb([ \t]|$)/ || kv["enabled"] ~ /no/) next
			n = split(kv["uris"], U, /[ \t]+/); m = split(kv["suites"], S, /[ \t]+/)
			for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) if (U[a] != "" && S[b] != "") print U[a], S[b]
		}' "$f"
	done
}

# find_mirror: first http(s) Debian archive (not security) from apt sources that serves sid.
find_mirror() {
	local uri suite seen=" "
	if [[ -n ${MYSQL_SID_MIRROR:-} ]]; then
		echo "${MYSQL_SID_MIRROR%/}"
		return 0
	fi
	while read -r uri suite; do
		uri=${uri%/}
		[[ $uri =~ ^https?:// ]] || continue
		[[ $uri == *security* || $suite == *-security* ]] && continue
		[[ $seen == *" $uri "* ]] && continue
		seen+="$uri "
		if curl -fsS --max-time 20 -o /dev/null "$uri/dists/sid/Release" 2>>"$LOG"; then
			echo "$uri"
			return 0
		fi
		echo "mirror candidate has no reachable dists/sid/Release" >>"$LOG"
	done < <(apt_sources)
	return 1
}

# ---------------------------------------------------------------------------
# __setup: runs under `timeout`, stdout/stderr to $LOG; on failure writes the
# reason to $MYSQL_SID_REASON and exits non-zero.
setup() {
	set -eo pipefail
	exec </dev/null
	export DEBIAN_FRONTEND=noninteractive LC_ALL=C
	fail() {
		printf '%s\n' "$*" >"$MYSQL_SID_REASON"
		echo "FAIL: $*"
		exit 3
	}
	log() { echo "[$(date +%T)] $*"; }

	if [[ ! -f $MARKER ]]; then
		log "building chroot in $ROOT"
		umount_chroot
		if [[ -e $ROOT ]]; then
			log "removing incomplete chroot"
			rm -rf --one-file-system "$ROOT" || fail "cannot remove incomplete chroot $ROOT"
		fi
		if ! command -v debootstrap >/dev/null; then
			"$(dirname "$0")/apt-get.sh" install -y -q --no-install-recommends debootstrap ||
				{ "$(dirname "$0")/apt-get.sh" update -q && "$(dirname "$0")/apt-get.sh" install -y -q --no-install-recommends debootstrap; } ||
				fail "cannot install debootstrap with apt-get (see $LOG)"
		fi
		local mirror
		mirror=$(find_mirror) || fail "no Debian mirror from this machine's apt sources serves sid (no network?)"
		log "debootstrap sid"
		debootstrap --variant=minbase sid "$ROOT" "$mirror" || { umount_chroot; fail "debootstrap sid failed (see $LOG)"; }
		umount_chroot
		log "apt-get install mysql-server-core mysql-client-core"
		# The mirror may be a snapshot whose Release is "expired" against this clock.
		chroot "$ROOT" apt-get -q -o Acquire::Check-Valid-Until=false update ||
			fail "apt-get update in the sid chroot failed (see $LOG)"
		chroot "$ROOT" apt-get install -y -q --no-install-recommends mysql-server-core mysql-client-core ||
			fail "apt-get install mysql-server-core in the sid chroot failed (see $LOG)"
		chroot "$ROOT" apt-get clean || true
		[[ -x $ROOT/usr/sbin/mysqld ]] || fail "no /usr/sbin/mysqld in the chroot after install"
		rm -rf "${ROOT:?}$DATADIR"
		log "mysqld --initialize-insecure"
		chroot "$ROOT" /usr/sbin/mysqld --no-defaults --initialize-insecure --user=root --datadir="$DATADIR" ||
			fail "mysqld --initialize-insecure failed (see $LOG)"
		chroot "$ROOT" /usr/sbin/mysqld --version >"$MARKER.tmp" && mv "$MARKER.tmp" "$MARKER"
		log "build done: $(cat "$MARKER")"
	fi

	if [[ ! -d $ROOT$DATADIR/mysql ]]; then
		log "data dir missing, initializing"
		rm -rf "${ROOT:?}$DATADIR"
		chroot "$ROOT" /usr/sbin/mysqld --no-defaults --initialize-insecure --user=root --datadir="$DATADIR" ||
			fail "mysqld --initialize-insecure failed (see $LOG)"
	fi

	local pid end errlog=$ROOT/var/log/mysqld-sid.err errpos
	errpos=$(stat -c %s "$errlog" 2>/dev/null || echo 0) # the error log is appended to
	if pid=$(running_pid); then
		log "mysqld $pid runs but does not answer yet; waiting"
	else
		rm -f "$ROOT/run/mysqld-sid.sock" "$ROOT/run/mysqld-sid.sock.lock" "$ROOT/run/mysqld-sid.pid"
		mkdir -p "$ROOT/run" "$ROOT/var/log"
		log "starting mysqld on 127.0.0.1:$PORT"
		# setsid: own session, so neither `timeout` nor the CI job's group kills it.
		# chroot execs mysqld, so $! is mysqld's pid. 9>&- : do not inherit the lock.
		setsid chroot "$ROOT" /usr/sbin/mysqld --no-defaults --user=root --datadir="$DATADIR" \
			--port="$PORT" --bind-address=127.0.0.1 --socket=/run/mysqld-sid.sock \
			--pid-file=/run/mysqld-sid.pid --mysqlx=OFF --secure-file-priv= --max-connections=500 \
			--log-error=/var/log/mysqld-sid.err </dev/null >/dev/null 2>&1 9>&- &
		pid=$!
		echo "$pid" >"$PIDFILE"
	fi
	end=$((SECONDS + 90))
	until answers >/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -c +$((errpos + 1)) "$errlog" 2>/dev/null | tail -n 20 || true
			fail "mysqld exited at start: $(tail -c +$((errpos + 1)) "$errlog" 2>/dev/null | grep -m1 -F '[ERROR]' | cut -c1-200)"
		fi
		if ((SECONDS >= end)); then
			kill "$pid" 2>/dev/null || true
			fail "mysqld did not answer on 127.0.0.1:$PORT within 90 s"
		fi
		sleep 0.25
	done
	echo "$pid" >"$PIDFILE"
	answers 'CREATE DATABASE IF NOT EXISTS test' >/dev/null || fail "CREATE DATABASE test failed"
	log "up: $(answers 'select version()')"
}

start() {
	if answers >/dev/null; then
		echo "mysql: up (127.0.0.1:$PORT)"
		return 0
	fi
	[[ $EUID -eq 0 ]] || not_tested "needs root for debootstrap/chroot"
	command -v timeout >/dev/null && command -v setsid >/dev/null || not_tested "timeout/setsid missing"
	mkdir -p "$CACHE" 2>/dev/null || not_tested "cannot create cache folder $CACHE"
	exec 9>"$CACHE/.lock"
	flock -w "$TIMEOUT" 9 || not_tested "another mysql-sid.sh holds $CACHE/.lock"
	if answers >/dev/null; then # started by whoever held the lock
		echo "mysql: up (127.0.0.1:$PORT)"
		return 0
	fi
	[[ -f $MARKER ]] || echo "mysql: building MySQL chroot in $CACHE (first run, ~1 min; log: $LOG)" >&2
	local reason rc
	reason=$(mktemp)
	echo "=== $(date -u +%FT%TZ) start" >>"$LOG"
	MYSQL_SID_REASON=$reason timeout -k 10 "$TIMEOUT" bash "$SELF" __setup >>"$LOG" 2>&1
	rc=$?
	if ((rc == 0)) && answers >/dev/null; then
		rm -f "$reason"
		echo "mysql: up (127.0.0.1:$PORT)"
		return 0
	fi
	local why
	why=$(head -n 1 "$reason" 2>/dev/null)
	rm -f "$reason"
	if ((rc == 124 || rc == 137)); then
		umount_chroot
		why="setup did not finish within ${TIMEOUT}s (log: $LOG)"
	fi
	not_tested "${why:-setup failed with exit $rc (log: $LOG)}"
}

stop() {
	local pid end
	if ! pid=$(running_pid); then
		echo "mysql: not running"
		return 0
	fi
	kill -TERM "$pid"
	end=$((SECONDS + 60))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= end)); then
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.25
	done
	rm -f "$PIDFILE"
	echo "mysql: stopped"
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
status)
	if answers >/dev/null; then echo "mysql: up (127.0.0.1:$PORT)"; else echo "mysql: down"; exit 1; fi
	;;
__setup) setup ;;
*)
	echo "usage: $0 [start|stop|status]" >&2
	exit 2
	;;
esac
