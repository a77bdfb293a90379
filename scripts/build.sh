#!/usr/bin/env bash
# Builds bin/sandboxapi and bin/sandboxapi-guest (static), stamped with what
# they are for `sandboxapi version`, doctor, /healthz and
# sandboxapi_build_info: Go's VCS stamp (module version, revision, commit
# time; -buildvcs=true wins over a GOFLAGS that turns it off), the build
# time, the runsc version setup pins, and the revision also where Go cannot
# stamp it (a git worktree, whose .git is a file).
#   scripts/build.sh [OUT_DIR]   (default bin)
# SANDBOXAPI_VERSION=v1.2.3 names a release; RUNSC_VERSION defaults to
# setup.sh's pin.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin}
export PATH=/usr/local/go/bin:$PATH
runsc=${RUNSC_VERSION:-$(sed -n 's/^RUNSC_VERSION=\(v[0-9][^ ]*\)$/\1/p' scripts/setup.sh | head -1)}
bi=github.com/sandboxapi/sandboxapi/internal/buildinfo
ldflags="-X $bi.Runsc=$runsc -X $bi.BuildTime=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
if rev=$(git rev-parse HEAD 2>/dev/null); then
  ldflags="$ldflags -X $bi.Revision=$rev"
  git diff --quiet HEAD -- 2>/dev/null || ldflags="$ldflags -X $bi.Modified=true"
fi
if [ -n "${SANDBOXAPI_VERSION:-}" ]; then ldflags="$ldflags -X $bi.Version=$SANDBOXAPI_VERSION"; fi
mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -buildvcs=true -ldflags="$ldflags" -o "$out/sandboxapi" ./cmd/sandboxapi
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/sandboxapi-guest" ./cmd/sandboxapi-guest
