#!/usr/bin/env bash
# Runs the whole test suite against the real components (runsc sandboxes,
# SQLite, pip, npm, curl): a missing piece fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export SANDBOXAPI_REQUIRE_RUNSC=1
go vet ./...
go test -count=1 -timeout 60m ./...
scripts/fuzz.sh
