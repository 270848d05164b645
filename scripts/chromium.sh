#!/usr/bin/env bash
# chromium.sh: make sure Debian's Chromium is installed, for inboxui's browser tests
# (the nested module inboxui/browsertest drives it over the DevTools protocol with
# chromedp; no chromedriver is needed). Idempotent: it installs only when the binary is
# missing, and then prints "chromium: installed <version>"; otherwise it prints
# "chromium: <version>". Exit status 1 when the install failed (the log's last lines
# are printed). Meant for CI as root, with no stdin, like .ci/services.sh.
#
#   scripts/chromium.sh
#
# Environment:
#   CHROMIUM_LOG  install output (default ${TMPDIR:-/tmp}/inbox-chromium.log)
#
# The tests run it themselves when Chromium is missing and CI=true, and skip outside CI.
# They start it headless with a new empty profile and without background networking
# (the machine has no internet: Chromium's own update, sync and component downloads
# would only be refused).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
LOG="${CHROMIUM_LOG:-${TMPDIR:-/tmp}/inbox-chromium.log}"

version() { chromium --version 2>/dev/null | head -n 1; }

if command -v chromium >/dev/null 2>&1; then
	echo "chromium: $(version)"
	exit 0
fi
: >"$LOG"
if ! { "$(dirname "$0")/apt-get.sh" update -q && "$(dirname "$0")/apt-get.sh" install -y -q --no-install-recommends chromium fonts-dejavu-core; } </dev/null >>"$LOG" 2>&1; then
	echo "chromium: ERROR: apt-get install chromium failed; last lines of $LOG:" >&2
	tail -n 15 "$LOG" >&2 || true
	exit 1
fi
echo "chromium: installed $(version)"
