#!/usr/bin/env bash
# Compares this checkout's per-language hello world with an older revision's,
# side by side in one run: each revision's own binary on its own rootfs
# (built from its own recipe, cached by hash), in ROUNDS interleaved rounds
# (old then new, then new then old, ...) of `-bench Languages` with N
# samples per figure; prints, per language and mode, the medians over the
# rounds of each side's p50 and of the per-round ratio new/old.
#
#	bench/languages/compare.sh e392893          # ROUNDS=4 N=6 by default
#	ROUNDS=6 N=8 LANGS=go,c bench/languages/compare.sh e392893
#
# Needs root, runsc and what scripts/setup.sh installs. The old revision's
# worktree and results stay under $WORK (default /tmp/sbx-langcompare).
set -euo pipefail
old_rev=${1:?usage: compare.sh OLD_REVISION}
ROUNDS=${ROUNDS:-4} N=${N:-6} LANGS=${LANGS:-python3,bash,javascript,typescript,c,cpp,go,java}
WORK=${WORK:-/tmp/sbx-langcompare}
export PATH=/usr/local/go/bin:$PATH
new_dir=$(cd "$(dirname "$0")/../.." && pwd)
old_dir=$WORK/old
mkdir -p "$WORK/out"
if [ ! -d "$old_dir" ]; then
  git -C "$new_dir" worktree add --detach "$old_dir" "$old_rev" >&2
else
  git -C "$old_dir" checkout -q --detach "$old_rev"
fi
rootfs_of() { (cd "$1" && CGO_ENABLED=0 go build -o "$WORK/$2-sandboxapi" ./cmd/sandboxapi && "$WORK/$2-sandboxapi" rootfs build | tail -1); }
old_rootfs=$(rootfs_of "$old_dir" old)
new_rootfs=$(rootfs_of "$new_dir" new)
(cd "$old_dir" && go test -c -o "$WORK/old.test" ./internal/e2e)
(cd "$new_dir" && go test -c -o "$WORK/new.test" ./internal/e2e)
echo "old $old_rev on $old_rootfs; new $(git -C "$new_dir" rev-parse --short HEAD) on $new_rootfs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" >&2
rm -f "$WORK"/out/*.txt
for r in $(seq 1 "$ROUNDS"); do
  order="old new"; [ $((r % 2)) = 1 ] || order="new old"
  for v in $order; do
    if [ "$v" = old ]; then dir=$old_dir rfs=$old_rootfs; else dir=$new_dir rfs=$new_rootfs; fi
    echo "round $r $v: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    (cd "$dir/internal/e2e" && SANDBOXAPI_ROOTFS=$rfs SANDBOXAPI_REQUIRE_RUNSC=1 SANDBOXAPI_BENCH_N=$N SANDBOXAPI_BENCH_LANGS=$LANGS \
      "$WORK/$v.test" -test.run '^$' -test.bench Languages -test.benchtime 1x -test.timeout 60m) > "$WORK/out/r$r-$v.txt" 2>&1
  done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 "$(dirname "$0")/compare.py" "$WORK/out" "$new_dir/configs/runtimes.yaml"
