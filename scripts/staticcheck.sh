#!/usr/bin/env bash
# staticcheck.sh: staticcheck (honnef.co/go/tools v0.8.2) over every module of the
# repository: the root module with its example programs, and each nested module (a go.mod
# of its own, which ./... of the root does not enter). Exits non-zero on any finding.
#
#   scripts/staticcheck.sh            every module
#   scripts/staticcheck.sh DIR...     the modules in those folders
#
# It installs nothing outside the Go module and build caches: `go run` builds the pinned
# version there once, and every later run reuses it. The checks are staticcheck's
# defaults less those staticcheck.conf at the root turns off, each with its reason.
# Environment: STATICCHECK (default honnef.co/go/tools/cmd/staticcheck@v0.8.2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOOL=${STATICCHECK:-honnef.co/go/tools/cmd/staticcheck@v0.8.2}

if (($#)); then
	mods=("$@")
else
	mods=(.)
	while IFS= read -r gomod; do
		mods+=("$(dirname "$gomod")")
	done < <(find . -name go.mod -not -path ./go.mod -not -path './.git/*' | sort)
fi

# The root module's example programs: ./... leaves out folders that start with "_".
examples=()
for d in _examples/*/; do
	[[ -f $d/go.mod ]] || examples+=("./${d%/}")
done

failed=()
for mod in "${mods[@]}"; do
	echo "--- staticcheck $mod"
	pkgs=(./...)
	[[ $mod != . ]] || pkgs+=("${examples[@]}")
	# GOWORK=off: each module as its own go.mod says, as its users build it.
	if ! (cd "$mod" && GOWORK=off go run "$TOOL" "${pkgs[@]}"); then
		failed+=("$mod")
	fi
done
if ((${#failed[@]})); then
	echo "staticcheck: findings in ${failed[*]}" >&2
	exit 1
fi
echo "staticcheck: ${#mods[@]} modules clean"
