#!/usr/bin/env bash
# .ci/services.sh - make sure PostgreSQL, MariaDB, RabbitMQ, NATS (JetStream) and
# Redis are installed, running and answering on 127.0.0.1, with database "test" on
# both SQL servers.
#
# Idempotent and cheap when everything already runs (~1-2 s). Run it or source
# it (sourcing does not change the caller's shell options). Meant for CI as root
# (no stdin); installs a server package only when its binary is missing.
#
#   PostgreSQL  127.0.0.1:5432  user postgres, trust auth, db test
#   MariaDB     127.0.0.1:3306  root, empty password,     db test
#   RabbitMQ    127.0.0.1:5672  guest/guest
#   NATS        127.0.0.1:4222  JetStream enabled
#   Redis       127.0.0.1:6379  no persistence
#
# Env: SERVICES_TIMEOUT (seconds per wait, default 120),
#      SERVICES_LOG (start/install output, default ${TMPDIR:-/tmp}/inbox-services.log).

_inbox_services() (
	set -euo pipefail
	export DEBIAN_FRONTEND=noninteractive
	local timeout="${SERVICES_TIMEOUT:-120}"
	local log="${SERVICES_LOG:-${TMPDIR:-/tmp}/inbox-services.log}"
	: >"$log"

	die() {
		echo "services: ERROR: $*" >&2
		echo "services: last lines of $log:" >&2
		tail -n 15 "$log" >&2 || true
		exit 1
	}
	# wait_for SERVICE WHAT CMD...: retry CMD every 0.25 s for at most $timeout s.
	wait_for() {
		local svc=$1 what=$2 end=$((SECONDS + timeout))
		shift 2
		until "$@" >/dev/null 2>&1 </dev/null; do
			((SECONDS < end)) || die "$svc: $what not reached within ${timeout}s"
			sleep 0.25
		done
	}
	port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
	run() { echo "+ $*" >>"$log"; "$@" </dev/null >>"$log" 2>&1; }

	# --- install only what is missing --------------------------------------
	local need=()
	command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
	[[ -x /usr/sbin/mariadbd ]] || need+=(mariadb-server)
	command -v rabbitmq-server >/dev/null 2>&1 || need+=(rabbitmq-server)
	[[ -x /usr/sbin/nats-server ]] || need+=(nats-server)
	command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
	if ((${#need[@]})); then
		echo "services: installing ${need[*]}"
		run "$(dirname "$0")/../scripts/apt-get.sh" update -q || die "apt-get update failed"
		run "$(dirname "$0")/../scripts/apt-get.sh" install -y -q --no-install-recommends "${need[@]}" ||
			die "apt-get install ${need[*]} failed"
	fi

	# --- PostgreSQL ----------------------------------------------------------
	pg_login() { psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1 </dev/null; }
	local pgver
	pgver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
	if [[ -z $pgver ]]; then
		pgver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
		run pg_createcluster "$pgver" main || die "postgres: pg_createcluster $pgver main failed"
	fi
	if ! pg_isready -q -h 127.0.0.1 -t 2; then
		run pg_ctlcluster --skip-systemctl-redirect "$pgver" main start ||
			echo "pg_ctlcluster start returned non-zero" >>"$log"
		wait_for postgres "pg_isready on 127.0.0.1:5432" pg_isready -q -h 127.0.0.1 -t 2
	fi
	if ! pg_login; then
		local hba="/etc/postgresql/$pgver/main/pg_hba.conf"
		echo "services: postgres: login failed, switching $hba to trust"
		sed -i -E 's/[[:space:]](peer|md5|scram-sha-256|ident)[[:space:]]*$/ trust/' "$hba"
		run pg_ctlcluster --skip-systemctl-redirect "$pgver" main reload || true
		wait_for postgres "login as postgres over TCP" pg_login
	fi
	if [[ $(psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname='test'" </dev/null) != 1 ]]; then
		psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test' </dev/null >>"$log" 2>&1 ||
			die "postgres: CREATE DATABASE test failed"
	fi
	# The test command runs 8 tests at once (-parallel 8), each with pools of its own
	# (tenants open one per database): it peaked at PostgreSQL's default of 100 clients
	# ("too many clients already"). The setting takes a restart.
	local maxconn
	maxconn=$(psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'show max_connections' </dev/null)
	if ((maxconn < 400)); then
		echo "postgres: max_connections $maxconn -> 400 (a restart)"
		psql -h 127.0.0.1 -U postgres -d postgres -qc 'ALTER SYSTEM SET max_connections = 400' </dev/null >>"$log" 2>&1 ||
			die "postgres: ALTER SYSTEM SET max_connections failed"
		run pg_ctlcluster --skip-systemctl-redirect "$pgver" main restart ||
			echo "pg_ctlcluster restart returned non-zero" >>"$log"
		wait_for postgres "login as postgres over TCP after the restart" pg_login
	fi
	echo "postgres: up (127.0.0.1:5432)"

	# --- MariaDB -------------------------------------------------------------
	my_login() { mariadb --protocol=tcp -h127.0.0.1 -P3306 -uroot --connect-timeout=2 -Nse 'select 1' >/dev/null 2>&1 </dev/null; }
	# ping exits 0 even on "access denied": it only says the server is alive.
	my_alive() { mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 --connect-timeout=2 ping >/dev/null 2>&1 </dev/null; }
	if ! my_login; then
		if ! my_alive; then
			install -d -o mysql -g mysql /run/mysqld
			run start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql ||
				die "mariadb: start-stop-daemon failed"
			wait_for mariadb "server on 127.0.0.1:3306" my_alive
		fi
		if ! my_login; then
			# A fresh install's root@localhost is unix_socket only: allow an empty
			# password over TCP too (we are root, so the socket login works).
			echo "services: mariadb: root login over TCP failed, setting empty password"
			run mariadb -uroot -e "ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket" ||
				die "mariadb: could not fix root login (socket login as root failed)"
			wait_for mariadb "login as root over TCP" my_login
		fi
	fi
	mariadb --protocol=tcp -h127.0.0.1 -P3306 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' </dev/null >>"$log" 2>&1 ||
		die "mariadb: CREATE DATABASE test failed"
	# As PostgreSQL's: room for the test command's 8 tests at once (no restart needed).
	mariadb --protocol=tcp -h127.0.0.1 -P3306 -uroot -e 'SET GLOBAL max_connections = GREATEST(@@max_connections, 500)' </dev/null >>"$log" 2>&1 ||
		die "mariadb: SET GLOBAL max_connections failed"
	echo "mariadb: up (127.0.0.1:3306)"

	# --- RabbitMQ ------------------------------------------------------------
	rmq_ok() { port_open 5672 && rabbitmq-diagnostics -q ping >/dev/null 2>&1 </dev/null; }
	if ! rmq_ok; then
		if ! port_open 5672; then
			run rabbitmq-server -detached || echo "rabbitmq-server -detached returned non-zero" >>"$log"
			local node
			node=$(sed -nE 's/^[[:space:]]*(export[[:space:]]+)?NODENAME=["]?([^"[:space:]]+).*/\2/p' \
				/etc/rabbitmq/rabbitmq-env.conf 2>/dev/null | tail -n 1)
			node=${node:-rabbit@$(hostname -s)}
			[[ $node == *@* ]] || node="$node@$(hostname -s)"
			# Returns once the app is up; the poll below is the real (bounded) check.
			run timeout $((timeout + 5)) rabbitmqctl wait --timeout "$timeout" "/var/lib/rabbitmq/mnesia/$node.pid" || true
		fi
		wait_for rabbitmq "port 5672 and rabbitmq-diagnostics ping" rmq_ok
	fi
	echo "rabbitmq: up (127.0.0.1:5672)"

	# --- NATS with JetStream and Redis (the NATS and Redis Streams broker tests) ----------
	# NATS greets every connection with an INFO line; JetStream is on with -js.
	nats_ok() { timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222 && head -c 4 <&3 | grep -q INFO' 2>/dev/null; }
	if ! nats_ok; then
		install -d /var/lib/nats-server
		run start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
			-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log ||
			die "nats: start-stop-daemon failed"
		wait_for nats "INFO on 127.0.0.1:4222" nats_ok
	fi
	echo "nats: up (127.0.0.1:4222)"
	redis_ok() { [[ $(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; }
	if ! redis_ok; then
		install -d -o redis -g redis /var/lib/redis /var/log/redis 2>/dev/null || install -d /var/lib/redis /var/log/redis
		run redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
			--dir /var/lib/redis --logfile /var/log/redis/ci.log || die "redis: redis-server failed"
		wait_for redis "PONG on 127.0.0.1:6379" redis_ok
	fi
	echo "redis: up (127.0.0.1:6379)"
)

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
	_inbox_services "$@"
	return $?
else
	_inbox_services "$@"
	exit $?
fi
