#!/usr/bin/env bash
# Runs the whole test suite against the real components (runsc sandboxes,
# SQLite, pip, npm, curl): a missing piece fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export SANDBOXAPI_REQUIRE_RUNSC=1
# The hosted-product compatibility test runs a Python client with requests.
if ! python3 -c 'import requests' 2>/dev/null && ! /usr/bin/python3 -c 'import requests' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-requests >/dev/null
fi
go vet ./...
go test -count=1 -timeout 60m ./...
scripts/fuzz.sh
