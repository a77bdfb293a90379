#!/usr/bin/env bash
# Installs what sandboxapi needs on a fresh Debian 12 machine (as root) and
# builds it: apt packages, a static runsc pinned to a gVisor pseudo-version
# from the Go module proxy, the binaries, and the runtime rootfs (cached by
# the hash of its recipe, so a second run reuses it).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
export PATH=/usr/local/go/bin:$PATH

if [ "$(id -u)" != 0 ]; then echo "setup.sh: run as root (sandboxes need it)" >&2; exit 1; fi
if ! command -v go >/dev/null 2>&1; then
  echo "setup.sh: Go 1.26 is needed at /usr/local/go (https://go.dev/doc/install)" >&2; exit 1
fi

need=()
# npm fetches the pinned esbuild for the rootfs's TypeScript runtime.
for pair in debootstrap:debootstrap mkfs.ext4:e2fsprogs nft:nftables ip:iproute2 curl:curl losetup:mount npm:npm; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# runsc must be static: a cgo build dies with "fork/exec /proc/self/exe".
stamp=/usr/local/lib/sandboxapi/runsc.version
if ! command -v runsc >/dev/null 2>&1 || [ "$(cat "$stamp" 2>/dev/null)" != "$RUNSC_VERSION" ]; then
  echo "setup: building runsc $RUNSC_VERSION (about a minute)" >&2
  CGO_ENABLED=0 GOBIN=/usr/local/bin go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  mkdir -p "$(dirname "$stamp")" && echo "$RUNSC_VERSION" > "$stamp"
fi

echo "setup: building sandboxapi" >&2
# Stamped with its version, revision, build time and this runsc pin.
RUNSC_VERSION=$RUNSC_VERSION scripts/build.sh bin

echo "setup: runtime rootfs" >&2
./bin/sandboxapi rootfs build >/dev/null
echo "setup: done" >&2
