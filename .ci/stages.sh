# .ci/stages.sh - .ci/run's stages, timed: each stage's wall time and CPU time (user +
# system of every process it ran and waited for), printed as one table when the run
# ends, passed or failed. Sourced by .ci/run.
#
#   stage NAME CMD...      run CMD (a command or a function) now, in a subshell; returns
#                          its status
#   stage_bg NAME CMD...   the same in the background; its output goes to a log that
#                          stage_wait prints
#   stage_wait NAME        wait for a background stage, print its output, return its status
#   stages_report          the table (.ci/run calls it on exit)
#
# A server a stage starts in a session of its own (setsid: PostgreSQL, vttestserver,
# tidb-server ...) is not waited for, so its CPU is not counted: the figures are the
# run's own processes, the tests and the builds.

STAGES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/inbox-ci-stages.XXXXXX")
STAGES_T0=$EPOCHREALTIME
STAGES_ORDER=()
declare -A STAGES_PID=()

# _stage_cpu FILE: the user + system seconds in the output of `times` saved in FILE.
_stage_cpu() {
	awk '{ for (i = 1; i <= NF; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } } END { printf "%.0f", t }' "$1" 2>/dev/null || echo "?"
}

# _stage_run NAME CMD...: run CMD in a subshell with errexit on, and record when the
# stage started and ended, its status and its CPU (the subshell's `times`).
_stage_run() {
	local name=$1 rc
	shift
	echo "$EPOCHREALTIME" >"$STAGES_DIR/$name.start"
	# Not in a condition, so that errexit holds inside CMD when it is a function.
	set +e
	(
		set -e
		"$@"
	)
	rc=$?
	times >"$STAGES_DIR/$name.times"
	echo "$EPOCHREALTIME $rc" >"$STAGES_DIR/$name.end"
	return "$rc"
}

stage() {
	local name=$1 rc errexit=${-//[^e]/}
	shift
	STAGES_ORDER+=("$name")
	echo "=== stage $name"
	# A subshell of its own, so the `times` it records are this stage's alone; run plainly
	# (errexit off meanwhile), not in a condition, which would turn errexit off in CMD.
	set +e
	(_stage_run "$name" "$@")
	rc=$?
	[[ -z $errexit ]] || set -e
	return "$rc"
}

stage_bg() {
	local name=$1
	shift
	STAGES_ORDER+=("$name")
	echo "=== stage $name (in the background)"
	(_stage_run "$name" "$@") >"$STAGES_DIR/$name.log" 2>&1 &
	STAGES_PID[$name]=$!
}

stage_wait() {
	local name=$1 rc=0
	wait "${STAGES_PID[$name]}" || rc=$?
	unset "STAGES_PID[$name]"
	echo "=== stage $name (background) ended with status $rc; its output:"
	cat "$STAGES_DIR/$name.log"
	return "$rc"
}

# _stage_tree PID: PID and its descendants, parents first.
_stage_tree() {
	local child
	echo "$1"
	for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		_stage_tree "$child"
	done
}

# stages_kill: end the background stages still running (the run failed before waiting
# for them), each process of each by its pid, and print what they had written.
stages_kill() {
	local name pid
	for name in "${!STAGES_PID[@]}"; do
		pid=${STAGES_PID[$name]}
		# shellcheck disable=SC2046
		kill -TERM $(_stage_tree "$pid") 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		echo "=== stage $name (background) stopped: the run ended first; its output:"
		cat "$STAGES_DIR/$name.log"
	done
}

# _stage_secs A B: B - A, whole seconds, for two $EPOCHREALTIME values.
_stage_secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

stages_report() {
	local name start end rc cpu now
	now=$EPOCHREALTIME
	echo
	echo "Stages (seconds from the start; wall; CPU = user + system of the stage's own processes):"
	printf '  %-26s %6s %6s %6s  %s\n' stage start wall cpu result
	for name in "${STAGES_ORDER[@]}"; do
		[[ -f $STAGES_DIR/$name.start ]] || continue
		start=$(<"$STAGES_DIR/$name.start")
		if [[ -f $STAGES_DIR/$name.end ]]; then
			read -r end rc <"$STAGES_DIR/$name.end"
			cpu=$(_stage_cpu "$STAGES_DIR/$name.times")
			case $rc in 0) rc=ok ;; 3) rc="not tested (exit 3)" ;; *) rc="FAILED (exit $rc)" ;; esac
		else
			end=$now cpu="?" rc="did not finish"
		fi
		printf '  %-26s %6s %6s %6s  %s\n' "$name" "$(_stage_secs "$STAGES_T0" "$start")" "$(_stage_secs "$start" "$end")" "$cpu" "$rc"
	done
	times >"$STAGES_DIR/total.times"
	printf '  %-26s %6s %6s %6s\n' total 0 "$(_stage_secs "$STAGES_T0" "$now")" "$(_stage_cpu "$STAGES_DIR/total.times")"
	rm -rf "$STAGES_DIR"
}
