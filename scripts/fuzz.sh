#!/usr/bin/env bash
# Fuzz smoke run: every native fuzz target in the module for a short, fixed
# time (FUZZTIME, default 3s), one target at a time. A crash leaves its
# input under the package's testdata/fuzz/ and fails the script.
#
# Go's fuzz coordinator can report "context deadline exceeded" at the
# -fuzztime boundary without having found anything (a race between the
# deadline and its own shutdown); a genuine failure always writes its input
# ("Failing input written to ..."). Such a run is repeated, up to twice.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
fuzztime=${FUZZTIME:-3s}
failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	for attempt in 1 2 3; do
		echo "== $pkg $name ($fuzztime)"
		if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >"$out" 2>&1; then
			cat "$out"
			break
		fi
		cat "$out"
		if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written to' "$out" && [ "$attempt" -lt 3 ]; then
			echo "(coordinator deadline race, nothing found: running $name again)"
			continue
		fi
		echo "FAIL: $pkg $name"
		failed=1
		break
	done
done < <(grep -rHoP --include='*_test.go' '^func \KFuzz\w+(?=\(f \*testing\.F\))' . | sed 's|^\./||' | sort)
exit $failed
