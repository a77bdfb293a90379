#!/usr/bin/env bash
# Fuzz smoke run: every native fuzz target in the module for a short, fixed
# time (FUZZTIME, default 2s), FUZZJOBS targets at a time (default 3), each
# with one fuzzing worker. A crash leaves its input under the package's
# testdata/fuzz/ and fails the script.
#
# Go's fuzz coordinator can report "context deadline exceeded" at the
# -fuzztime boundary without having found anything (a race between the
# deadline and its own shutdown); a genuine failure always writes its input
# ("Failing input written to ..."). Such a run is repeated, up to twice.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export FUZZTIME=${FUZZTIME:-2s}
jobs=${FUZZJOBS:-3}
outdir=$(mktemp -d)
trap 'rm -rf "$outdir"' EXIT
export outdir

# one FILE:NAME runs one target; its log goes to $outdir/NAME.log and a
# failure leaves $outdir/NAME.failed.
one() {
	local file=${1%%:*} name=${1#*:}
	local pkg=./$(dirname "$file") log=$outdir/$name.log out=$outdir/$name.out
	for attempt in 1 2 3; do
		echo "== $pkg $name ($FUZZTIME)" >>"$log"
		if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg" >"$out" 2>&1; then
			cat "$out" >>"$log"
			return 0
		fi
		cat "$out" >>"$log"
		if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written to' "$out" && [ "$attempt" -lt 3 ]; then
			echo "(coordinator deadline race, nothing found: running $name again)" >>"$log"
			continue
		fi
		echo "FAIL: $pkg $name" >>"$log"
		touch "$outdir/$name.failed"
		return 0
	done
}
export -f one

targets=$(grep -rHoP --include='*_test.go' '^func \KFuzz\w+(?=\(f \*testing\.F\))' . | sed 's|^\./||' | sort)
# Build each package's instrumented test binary once (a pattern that names
# no target fuzzes nothing), so that its targets do not all compile it.
cut -d: -f1 <<<"$targets" | xargs -n1 dirname | sort -u | sed 's|^|./|' |
	xargs -P "$jobs" -I{} go test -run '^$' -fuzz '^$' {} >/dev/null
xargs -P "$jobs" -I{} bash -c 'one "$1"' _ {} <<<"$targets"
failed=0
while IFS=: read -r _ name; do
	cat "$outdir/$name.log"
	[ ! -e "$outdir/$name.failed" ] || failed=1
done <<<"$targets"
n=$(wc -l <<<"$targets")
echo "fuzz.sh: $n targets, $(ls "$outdir" | grep -c '\.failed$' || true) failed"
exit $failed
