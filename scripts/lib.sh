# scripts/lib.sh - what scripts/vitess.sh and scripts/tidb.sh share, sourced by both:
# the one-line "NOT TESTED" exit, the build from the Go module proxy into a cache keyed by
# version (once, under a lock, with a deadline), the login check, the pid of the server
# the script started, the wait until it answers, the stop and the status.
#
# The caller sets ENGINE (the name in messages: vitess, tidb), CACHE, LOG (the build log),
# TIMEOUT (the build's deadline, seconds), SELF (the script, run with __build to build),
# PIDFILE (the server's pid), and defines built (true when $CACHE holds a complete build)
# and our_pid (the server it started, if it still runs: running_pid below).

# not_tested prints the engine's one line and exits 3: its tests skip this run.
not_tested() {
	echo "$ENGINE: NOT TESTED this run: $*"
	exit 3
}

# go_build_engine PKG...: the build flags both engines use. Static (no cgo), no DWARF or
# symbol table (-s -w: smaller binaries, a faster link; a panic's stack trace keeps its
# function names and lines), nice 10 so that the tests running beside a cold build keep
# the CPU, and GOGC=400 for the compiler: it spends less time collecting garbage for
# the memory the 2-core CI machine has to spare (24 GiB).
go_build_engine() {
	CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod GOGC=400 nice -n 10 \
		go build -trimpath -ldflags='-s -w' "$@"
}

# build_cached WHAT: build $ENGINE (bash $SELF __build) into $CACHE unless it is there.
# Concurrent callers wait on $CACHE/.build.lock, so one builds and the others find it
# cached. WHAT names the module and version in messages; COLD_HINT says how long a cold
# build takes.
build_cached() {
	local what=$1
	if built; then
		echo "$ENGINE: $what cached in $CACHE"
		return 0
	fi
	command -v go >/dev/null || not_tested "go not in PATH"
	mkdir -p "$CACHE" || not_tested "cannot create $CACHE"
	exec 8>"$CACHE/.build.lock"
	flock -w "$TIMEOUT" 8 || not_tested "another build holds $CACHE/.build.lock"
	if built; then
		echo "$ENGINE: $what cached in $CACHE"
		return 0
	fi
	echo "$ENGINE: building $what into $CACHE (${COLD_HINT:-several minutes}; log $LOG)" >&2
	local t0=$SECONDS
	if ! (timeout -k 10 "$TIMEOUT" bash "$SELF" __build) >>"$LOG" 2>&1; then
		not_tested "build of $what failed or timed out (log: $LOG)"
	fi
	echo "$ENGINE: built in $((SECONDS - t0)) s"
}

# answers PORT [SQL]: a real login over TCP on 127.0.0.1:PORT running SQL (default
# "select 1"), with the host's client if there is one, else a bare TCP connect.
answers() {
	local port=$1 sql=${2:-select 1}
	if command -v mariadb >/dev/null 2>&1; then
		mariadb --protocol=tcp -h127.0.0.1 -P"$port" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	elif command -v mysql >/dev/null 2>&1; then
		mysql --protocol=tcp -h127.0.0.1 -P"$port" -uroot --connect-timeout=2 -Nse "$sql" </dev/null 2>/dev/null
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
	fi
}

# running_pid PIDFILE COMM ARGS: the pid in PIDFILE if that process still runs as COMM
# with ARGS (e.g. "--port 15300 ") on its command line, so a recycled pid is never taken
# for ours.
running_pid() {
	local pidfile=$1 comm=$2 args=$3 pid
	[[ -s $pidfile ]] || return 1
	pid=$(<"$pidfile")
	[[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$args" || return 1
	echo "$pid"
}

# wait_answers PID PORT SECONDS SERVERLOG SIGNAL: wait until the server answers on PORT;
# if process PID exits first, or SECONDS pass (then PID gets SIGNAL), print the end of
# SERVERLOG where it helps and exit with the engine's NOT TESTED line.
wait_answers() {
	local pid=$1 port=$2 seconds=$3 serverlog=$4 signal=$5 end=$((SECONDS + $3))
	until answers "$port" >/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$serverlog" >&2
			not_tested "the server exited at start (log: $serverlog)"
		fi
		if ((SECONDS >= end)); then
			kill "-$signal" "$pid" 2>/dev/null || true
			not_tested "the server did not answer on 127.0.0.1:$port within $seconds s (log: $serverlog)"
		fi
		sleep 0.25
	done
}

# stop_pid PID SIGNAL SECONDS: send SIGNAL to PID, wait for it to exit, SIGKILL it after
# SECONDS.
stop_pid() {
	local pid=$1 signal=$2 seconds=$3 end=$((SECONDS + $3))
	kill "-$signal" "$pid"
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= end)); then
			echo "$ENGINE: pid $pid did not stop within $seconds s after SIG$signal; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.25
	done
}

# stop_ours SIGNAL SECONDS: stop the server this script started (our_pid), if it runs:
# stop_pid, then forget its pid file.
stop_ours() {
	local pid
	if ! pid=$(our_pid); then
		echo "$ENGINE: not running"
		return 0
	fi
	stop_pid "$pid" "$1" "$2"
	rm -f "$PIDFILE"
	echo "$ENGINE: stopped"
}

# status_of PORT [WHAT]: say whether the server answers on 127.0.0.1:PORT (WHAT, e.g.
# "vtgate", names what answers there); exit 1 when it does not.
status_of() {
	if answers "$1" >/dev/null; then
		echo "$ENGINE: up (${2:+$2 }127.0.0.1:$1)"
	else
		echo "$ENGINE: down"
		return 1
	fi
}
