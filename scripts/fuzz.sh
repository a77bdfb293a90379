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
#
# Each package's instrumented test binary is built once (go test -c -fuzz)
# and its targets run from it, in the package's folder, with the corpus
# cache go test itself would use: a go test per target spent more CPU
# loading and hashing the module than fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export FUZZTIME=${FUZZTIME:-2s}
jobs=${FUZZJOBS:-3}
outdir=$(mktemp -d)
trap 'rm -rf "$outdir"' EXIT
export outdir

mod=$(go list -m)
cache=$(go env GOCACHE)/fuzz
export mod cache

# one FILE:NAME runs one target; its log goes to $outdir/NAME.log and a
# failure leaves $outdir/NAME.failed.
one() {
	local file=${1%%:*} name=${1#*:}
	local dir=$(dirname "$file")
	local bin=$outdir/bin/${dir//\//_}.test log=$outdir/$name.log out=$outdir/$name.out
	local status
	for attempt in 1 2 3; do
		echo "== ./$dir $name ($FUZZTIME)" >>"$log"
		if (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$FUZZTIME" \
			-test.parallel 1 -test.fuzzcachedir "$cache/$mod/$dir" -test.timeout 10m) >"$out" 2>&1; then
			status=ok
		else
			status=FAIL
		fi
		cat "$out" >>"$log"
		if [ "$status" = ok ]; then
			echo "ok  	$mod/$dir $name" >>"$log"
			return 0
		fi
		if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written to' "$out" && [ "$attempt" -lt 3 ]; then
			echo "(coordinator deadline race, nothing found: running $name again)" >>"$log"
			continue
		fi
		echo "FAIL: ./$dir $name" >>"$log"
		touch "$outdir/$name.failed"
		return 0
	done
}
export -f one

targets=$(grep -rHoP --include='*_test.go' '^func \KFuzz\w+(?=\(f \*testing\.F\))' . | sed 's|^\./||' | sort)
# Each package's instrumented test binary, once.
mkdir -p "$outdir/bin"
build() {
	local dir=$1
	go test -c -fuzz . -o "$outdir/bin/${dir//\//_}.test" "./$dir" || {
		echo "FAIL: building ./$dir for fuzzing" >&2
		return 1
	}
}
export -f build
cut -d: -f1 <<<"$targets" | xargs -n1 dirname | sort -u | xargs -P "$jobs" -I{} bash -c 'build "$1"' _ {}
xargs -P "$jobs" -I{} bash -c 'one "$1"' _ {} <<<"$targets"
failed=0
while IFS=: read -r _ name; do
	cat "$outdir/$name.log"
	[ ! -e "$outdir/$name.failed" ] || failed=1
done <<<"$targets"
n=$(wc -l <<<"$targets")
echo "fuzz.sh: $n targets, $(ls "$outdir" | grep -c '\.failed$' || true) failed"
exit $failed
