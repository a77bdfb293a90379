#!/usr/bin/env bash
# Fuzz smoke run: every native fuzz target in the module for a short, fixed
# time (FUZZTIME, default 3s), one target at a time. A crash leaves its
# input under the package's testdata/fuzz/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
fuzztime=${FUZZTIME:-3s}
failed=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== $pkg $name ($fuzztime)"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"; then
		echo "FAIL: $pkg $name"
		failed=1
	fi
done < <(grep -rHoP --include='*_test.go' '^func \KFuzz\w+(?=\(f \*testing\.F\))' . | sed 's|^\./||' | sort)
exit $failed
