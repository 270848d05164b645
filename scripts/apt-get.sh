#!/usr/bin/env bash
# scripts/apt-get.sh ARGS...: apt-get ARGS, one at a time. .ci/run installs packages from
# stages that run at once (PgBouncer from the services, Chromium and debootstrap in the
# background); apt-get refuses to start while another holds dpkg's lock, so each waits
# for the others here instead of failing.
set -euo pipefail
exec flock -w 900 /var/lock/inbox-apt-get.lock \
	env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
