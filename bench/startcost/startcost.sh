#!/usr/bin/env bash
# What a server and a sandbox cost in CPU on this host: the numbers behind
# the test suite's budget (a test that starts a server pays the first line
# once; every sandbox it starts pays about the second's sandbox share).
#
#   bench/startcost/startcost.sh [BIN]      (as root, after scripts/setup.sh)
#
# It starts BIN (default bin/sandboxapi) serve on its own data dir, port
# and installer names, with WARM (default 0) warm sandboxes, and prints:
#  - start: wall time to /healthz and until the readiness topology check
#    (one canary sandbox) passes, and the CPU it took: all of the machine,
#    the sandboxes' cgroup, the server itself and its reaped children
#    (runsc commands, nft, ip);
#  - N (default 5) sessions created, run print(6*7) and deleted, one after
#    another;
#  - four idle sessions for 10 s.
# CPU is read from /proc/stat and cgroup v1's cpuacct (sandboxapi's group
# holds every sandbox); run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-bin/sandboxapi}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
cat >"$dir/config.yaml" <<EOF
version: v1
server:
  drain_delay: 0s
executor:
  warm_pool: ${WARM:-0}
  home_size: 64M
installer:
  pool: 10.219.0.0/16
  table: sbxc
  prefix: sbxc
EOF
busy() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; } # 1/100 s
boxes() { echo $(( $(cat /sys/fs/cgroup/cpuacct/sandboxapi/cpuacct.usage 2>/dev/null || echo 0) / 10000000 )); }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
cpu() { python3 -c "import sys; print('%.2f' % (int(sys.argv[1]) / 100))" "$1"; }

m0=$(busy) b0=$(boxes) t0=$(now)
"$bin" serve --config "$dir/config.yaml" --data-dir "$dir" --listen "127.0.0.1:$port" >"$dir/log" 2>&1 &
pid=$!
ids=()
key=
cleanup() {
  for id in "${ids[@]}"; do curl -s -o /dev/null -X DELETE -H "X-RapidAPI-Key: $key" "$base/v1/sessions/$id" || true; done
  kill -TERM "$pid" 2>/dev/null && wait "$pid" || true
  rm -rf "$dir"
}
trap cleanup EXIT
until curl -sf -o /dev/null "$base/healthz"; do
  kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
  sleep 0.05
done
t1=$(now)
until curl -s "$base/readyz" | grep -q '"name":"topology","status":"pass"'; do sleep 0.1; done
t2=$(now) m2=$(busy) b2=$(boxes)
read -r ut st cut cst < <(awk '{ print $14, $15, $16, $17 }' "/proc/$pid/stat")
echo "start: healthz in $(secs "$t0" "$t1") s, topology passed in $(secs "$t0" "$t2") s;" \
  "CPU-s: machine $(cpu $((m2 - m0))), sandboxes $(cpu $((b2 - b0))), server $(cpu $((ut + st))), its children $(cpu $((cut + cst)))"

key=$("$bin" keys create --plan MEGA --name startcost --config "$dir/config.yaml" --data-dir "$dir" | tail -n 1)
create() { curl -sf -H "X-RapidAPI-Key: $key" -d '{"language":"python3"}' "$base/v1/sessions" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'; }
n=${N:-5}
m0=$(busy) b0=$(boxes) t0=$(now)
for _ in $(seq "$n"); do
  id=$(create)
  curl -sf -o /dev/null -H "X-RapidAPI-Key: $key" -d '{"code":"print(6*7)"}' "$base/v1/sessions/$id/execute"
  curl -sf -o /dev/null -X DELETE -H "X-RapidAPI-Key: $key" "$base/v1/sessions/$id"
done
t1=$(now) m1=$(busy) b1=$(boxes)
echo "$n sessions created, run and deleted in $(secs "$t0" "$t1") s; CPU-s: machine $(cpu $((m1 - m0))), sandboxes $(cpu $((b1 - b0)))"

for _ in 1 2 3 4; do ids+=("$(create)"); done
sleep 2
m0=$(busy) b0=$(boxes)
sleep 10
m1=$(busy) b1=$(boxes)
echo "4 idle sessions for 10 s; CPU-s: machine $(cpu $((m1 - m0))), sandboxes $(cpu $((b1 - b0)))"
