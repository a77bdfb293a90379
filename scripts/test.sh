#!/usr/bin/env bash
# Runs the whole test suite against the real components (runsc sandboxes,
# SQLite, pip, npm, curl): a missing piece fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export SANDBOXAPI_REQUIRE_RUNSC=1
# The real pip and npm client tests fail, not skip, when a client is missing.
export SANDBOXAPI_REQUIRE_CLIENTS=1
# The hosted-product compatibility test runs a Python client with requests.
if ! python3 -c 'import requests' 2>/dev/null && ! /usr/bin/python3 -c 'import requests' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-requests >/dev/null
fi
# The mirror is also read by Debian's own pip (23.0.1), as operators' hosts do.
if ! /usr/bin/python3 -m pip --version >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
fi
# The operator console is tested in Debian's headless Chromium.
if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# PostgreSQL from Debian's packages: the store's tests run on it as well as
# on SQLite (internal/testenv starts a throwaway server with initdb and
# pg_ctl as the postgres user); a missing server fails instead of skipping.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
export SANDBOXAPI_REQUIRE_POSTGRES=1
# Real peers the suite drives: Pebble (an ACME test CA, for TLS) and the MCP
# Inspector (an MCP client, for the stdio transport). Installed once into a
# cache folder; with them present the tests run instead of skipping.
tools=/var/cache/sandboxapi/testtools
mkdir -p "$tools"
retry() { "$@" || { sleep 5; "$@"; } || { sleep 15; "$@"; }; }
retry env GOBIN="$tools/bin" go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.7.0
if [ ! -x "$tools/inspector/node_modules/.bin/mcp-inspector" ]; then
  retry npm install --prefix "$tools/inspector" --no-audit --no-fund --loglevel=error @modelcontextprotocol/inspector@0.15.0 >/dev/null
fi
# The CycloneDX project's validator (SBOM tests) and Redocly's OpenAPI linter.
if [ ! -f "$tools/cyclonedx/node_modules/@cyclonedx/cyclonedx-library/package.json" ]; then
  retry npm install --prefix "$tools/cyclonedx" --no-audit --no-fund --loglevel=error @cyclonedx/cyclonedx-library@10.3.0 ajv@8.20.0 ajv-formats@3.0.1 ajv-formats-draft2019@1.6.1 >/dev/null
fi
export SANDBOXAPI_CYCLONEDX_MODULES="$tools/cyclonedx/node_modules"
if [ ! -x "$tools/redocly/node_modules/.bin/redocly" ]; then
  retry npm install --prefix "$tools/redocly" --no-audit --no-fund --loglevel=error @redocly/cli@2.77.0 >/dev/null
fi
export SANDBOXAPI_REDOCLY="$tools/redocly/node_modules/.bin/redocly"
# E2B's JavaScript SDK, unchanged, for the E2B-compatible API's end-to-end
# test (internal/e2e TestE2BSDK); pinned: docs/e2b.md names the version.
if [ ! -f "$tools/e2b-2.51.0/node_modules/e2b/package.json" ]; then
  retry npm install --prefix "$tools/e2b-2.51.0" --no-audit --no-fund --loglevel=error e2b@2.51.0 >/dev/null
fi
export SANDBOXAPI_E2B_SDK="$tools/e2b-2.51.0/node_modules"
# @e2b/code-interpreter, unchanged, over the same e2b (internal/e2e
# TestE2BCodeInterpreter); pinned: docs/e2b.md names the version.
if [ ! -f "$tools/e2b-ci-2.8.0/node_modules/@e2b/code-interpreter/package.json" ]; then
  retry npm install --prefix "$tools/e2b-ci-2.8.0" --no-audit --no-fund --loglevel=error @e2b/code-interpreter@2.8.0 e2b@2.51.0 >/dev/null
fi
export SANDBOXAPI_E2B_CI_SDK="$tools/e2b-ci-2.8.0/node_modules"
export PEBBLE="$tools/bin/pebble" SANDBOXAPI_REQUIRE_PEBBLE=1
# The Kubernetes manifests' checks (internal/deploycheck): kubeconform, the
# API's schemas from the k8s.io/kubernetes module, kustomize if no kubectl.
k8s_env=$(scripts/k8s-tools.sh "$tools")
eval "$k8s_env"
export SANDBOXAPI_MCP_INSPECTOR="$tools/inspector/node_modules/.bin/mcp-inspector"
go vet ./...
# Everything runs in three chains side by side. A sandbox test mostly
# waits (on sandboxes, timers, heartbeats: one test stream leaves the
# 2-core machine two-thirds idle), but more sandboxes at once than the
# cores carry make every test slower and the timing checks of the race
# pass fail (measured: six executor tests at a time, or four chains of
# sandbox tests, made the run longer, not shorter). So two streams of
# sandbox tests, and the CPU-bound race pass beside them:
#  - executor: the executor's tests one at a time; the installer's,
#    rootfs's and CLI's; then the mirror's tests and the end-to-end tests
#    whose outcome depends on the store, again on PostgreSQL;
#  - e2e: the end-to-end tests (the built binary, real clients);
#  - race: every other package under the race detector, then the egress
#    benchmark's and the fuzz smoke runs.
# Tests that call t.Parallel run TEST_PARALLEL (default 2) at a time.
# A package not named in `sandboxed` gets the race detector, so a new one
# is never left out. (-race needs cgo: gcc.)
parallel=${TEST_PARALLEL:-2}
sandboxed=(executor internal/e2e installer rootfs internal/cli)
mod=$(go list -m)
pkgs=$(go list ./...)
heavy=()
for p in "${sandboxed[@]}"; do
  grep -qx "$mod/$p" <<<"$pkgs" || { echo "test.sh: no package $p" >&2; exit 1; }
  heavy+=("./$p")
done
plain=$(grep -vxE "$mod/($(IFS='|'; echo "${sandboxed[*]}"))" <<<"$pkgs")
# The store's own tests run on both engines in the race chain; every
# end-to-end test runs on SQLite in the e2e chain, and the cluster
# tests run on PostgreSQL whatever the engine. The PostgreSQL pass is for
# the end-to-end tests whose subject is what the store keeps: state across
# a kill or restart, exactness under concurrency (quotas, deletes), what
# one key sees, sums and bounded lists the store computes (disk budget,
# console, catalogue metrics), installs' all-or-nothing rows and the gate's
# reads, secrets at rest. Left out: tests of data paths and protocols over
# rows any engine gives back alike (egress paths, dependency resolution,
# the hosted client, MCP, input validation, streams, signals, languages,
# output limits, the CLI's start-up checks); the mirror's own tests cover
# its catalogue on PostgreSQL.
store_e2e=(
  TestPlanQuotaIsAtomic TestKeysCannotSeeEachOthersSessions
  TestKilledServerRestartsWithoutLeaks TestKilledServerWithWarmPoolLeaksNothing
  TestSessionSurvivesRestarts TestHibernateForkAndDiskBudgetOverHTTP TestNetworkSessionHibernatesWithItsAllowList
  TestEgressRestartReconciles TestEgressCredentials
  TestFaultKillDuringExecution TestFaultKillDuringCreation TestFaultSandboxKilledFromOutside TestFaultKillDuringInstall
  TestConcurrentDeleteNotFound TestUploadCutByKillLeavesNothing
  TestInstallWheelAndNPMIntoSession TestInstallRefusalsAreAllOrNothing TestInstallGateFailsClosed TestMetricsCountMirrorCatalogue
  TestSecretsStayHiddenServe TestInputCapsAndBoundedConsole TestLiveAllowList
  TestSessionKeepsItsVersion TestSessionWhoseVersionLeftTheRuntimesFile TestE2BSDK
  TestLiveSessionSurvivesKill TestKernelSessionEndToEnd
)
# A name that no longer names a test fails here instead of silently
# running nothing.
e2e_tests=$(go test -list '.*' ./internal/e2e | grep '^Test')
for name in "${store_e2e[@]}"; do
  grep -qx "$name" <<<"$e2e_tests" || { echo "test.sh: no end-to-end test $name" >&2; exit 1; }
done
# Each chain's output is also kept, so that a failure ends the log with the
# failing tests and their messages: a failing end-to-end test logs its
# servers' last lines, which would otherwise be all a log's tail shows.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
began=$SECONDS
# mark prints how far into the tests a step ended.
mark() { echo "test.sh: +$((SECONDS - began)) s: $*"; }
failures() {
  echo "test.sh: failed tests and their messages:" >&2
  grep -hE -- '^(\s*--- FAIL|\s+[A-Za-z0-9_]+_test\.go:[0-9]+: |panic: |FAIL\s|FAIL: |test\.sh: failed)' "$@" |
    grep -v 'server log (tail):' | tail -n 200 >&2 || true
}
# gotest NAME ARGS... is go test ARGS... printed as plain go test prints,
# with each top-level test's duration kept in $logs/times-NAME.
gotest() {
  local name=$1 rc=0
  shift
  go test -json "$@" 2>&1 | python3 scripts/testlog.py --times "$logs/times-$name" || rc=$?
  mark "go test $name: exit $rc"
  return "$rc"
}
# slowest prints the slowest tests of every run so far: where the time went.
slowest() {
  echo "test.sh: the slowest tests:"
  for f in "$logs"/times-*; do
    awk -v run="${f##*/times-}" '{ printf "%10s  %-16s %s %s\n", $1, run, $2, $3 }' "$f"
  done | sort -b -g -r | head -n 40 || true
}
# bench/egress is its own module (smokescreen is a peer there, not a
# dependency): build it and smoke-run a short comparison so it keeps
# compiling and working.
egress_smoke() {
  local out
  out=$(cd bench/egress && go vet . && go run . -mib 4 -runs 1 -setups 20) || return 1
  printf '%s\n' "$out"
  grep -q '^| sandboxapi |' <<<"$out" || { echo "test.sh: failed: the egress benchmark printed no sandboxapi row"; return 1; }
  mark "egress benchmark smoke run: ok"
}
# Each chain runs every step even after one fails, so that one run shows
# every failure, and fails if any step did.
chain_executor() {
  local rc=0 rest=() p
  # One test at a time: the executor's tests start sandboxes in every test,
  # and two sandbox streams (this and e2e) are what the 2-core machine
  # carries; then the other packages that start sandboxes.
  gotest executor -count=1 -parallel 1 -timeout 60m ./executor || rc=1
  for p in "${heavy[@]}"; do
    case $p in ./executor | ./internal/e2e) ;; *) rest+=("$p") ;; esac
  done
  gotest sandboxed -count=1 -parallel "$parallel" -timeout 60m "${rest[@]}" || rc=1
  # The mirror's tests, and the end-to-end tests whose outcome depends on
  # the store, again on PostgreSQL, while the e2e chain finishes.
  SANDBOXAPI_TEST_STORE=postgres gotest mirror-postgres -count=1 -timeout 30m ./mirror || rc=1
  SANDBOXAPI_TEST_STORE=postgres gotest e2e-postgres -count=1 -parallel "$parallel" -timeout 45m \
    -run "^($(IFS='|'; echo "${store_e2e[*]}"))\$" ./internal/e2e || rc=1
  return "$rc"
}
chain_e2e() {
  gotest e2e -count=1 -parallel "$parallel" -timeout 60m ./internal/e2e
}
chain_race() {
  local rc=0
  # shellcheck disable=SC2086 # $plain is a list of packages
  gotest race -race -count=1 -timeout 40m $plain || rc=1
  egress_smoke || rc=1
  scripts/fuzz.sh || rc=1
  mark "fuzz smoke run: exit $rc"
  return "$rc"
}
# Where the CPU went: each chain runs in a cpuacct group of its own (cgroup
# v1, as on this machine; elsewhere nothing is counted), which holds the
# test binaries, servers, runsc commands and go tools it starts but not
# the sandboxes, which runsc moves to sandboxapi's own groups (counted
# there, all together), and the machine's busy time frames both.
acct=/sys/fs/cgroup/cpuacct
[ -w "$acct" ] || acct=
usage() { cat "$1/cpuacct.usage" 2>/dev/null || echo 0; }
busy() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; } # in 1/100 s
join_group() {
  [ -n "$acct" ] || return 0
  mkdir -p "$acct/sbxtest-$1-$$" && echo "$BASHPID" >"$acct/sbxtest-$1-$$/cgroup.procs" || true
}
cpu_report() {
  [ -n "$acct" ] || return 0
  local name sum=0 ns
  echo "test.sh: CPU seconds over $((SECONDS - began)) s of wall time:"
  for name in "${names[@]}"; do
    ns=$(usage "$acct/sbxtest-$name-$$")
    sum=$((sum + ns))
    printf '  %-10s %6d (test binaries, servers, runsc commands, go tools)\n' "$name" $((ns / 1000000000))
    rmdir "$acct/sbxtest-$name-$$" 2>/dev/null || true
  done
  ns=$(( $(usage "$acct/sandboxapi") - sandboxes0 ))
  printf '  %-10s %6d (every sandbox, of every chain)\n' sandboxes $((ns / 1000000000))
  printf '  %-10s %6d (of %d on %d CPUs)\n' machine $(( ($(busy) - busy0) / 100 )) $(( (SECONDS - began) * $(nproc) )) "$(nproc)"
}
sandboxes0=$(usage "$acct/sandboxapi")
busy0=$(busy)
pids=()
names=(executor e2e race)
for name in "${names[@]}"; do
  { join_group "$name"; "chain_$name"; } > >(tee "$logs/$name" | sed -u "s/^/[$name] /") 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { rc=1; echo "test.sh: the ${names[$i]} chain failed" >&2; }
done
sleep 1 # the tees finish writing
slowest
cpu_report
if [ "$rc" != 0 ]; then
  failures "${names[@]/#/$logs/}"
  echo "test.sh: failed (see [executor], [e2e] and [race] above)" >&2
  exit 1
fi
mark "every chain passed"
