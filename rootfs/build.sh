#!/usr/bin/env bash
# Builds the shared, read-only runtime rootfs with debootstrap, cached by the
# content hash of this script and recipe.conf. Prints the rootfs folder.
#   rootfs/build.sh [CACHE_DIR]    (default /var/cache/sandboxapi/rootfs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${SANDBOXAPI_ROOTFS_CACHE:-/var/cache/sandboxapi/rootfs}}
hash=$(cat "$here/build.sh" "$here/recipe.conf" | sha256sum | cut -c1-16)
out="$cache/$hash"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
# shellcheck source=/dev/null
. "$here/recipe.conf"
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'umount -R "$tmp/rootfs/proc" 2>/dev/null || true; rm -rf "$tmp"' EXIT
echo "building rootfs $hash (debootstrap $SUITE, about a minute or more)" >&2
pkgs=$(echo "$PACKAGES" | tr ' ' ',')
debootstrap --variant="$VARIANT" --include="$pkgs" "$SUITE" "$tmp/rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 || {
  tail -30 "$tmp/debootstrap.log" >&2; exit 1; }
r="$tmp/rootfs"
chroot "$r" /usr/sbin/groupadd -g "$SANDBOX_UID" sandbox
chroot "$r" /usr/sbin/useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -d /home/sandbox -M -s /bin/bash sandbox
mkdir -p "$r/home/sandbox" "$r/opt/sandboxapi/bin" && chown "$SANDBOX_UID:$SANDBOX_UID" "$r/home/sandbox"
# TypeScript is bundled by esbuild from the npm registry at a pinned version,
# installed with the host's npm (the rootfs has no npm).
mkdir -p "$r/opt/esbuild"
npm install --silent --no-audit --no-fund --prefix "$r/opt/esbuild" "esbuild@$ESBUILD_VERSION" >&2
ln -s /opt/esbuild/node_modules/.bin/esbuild "$r/usr/local/bin/esbuild"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*
# Warm Go's build cache for the standard library once, so a session's first
# Go program does not compile the runtime (copied into a session on first use).
mount -t proc proc "$r/proc"
chroot "$r" /bin/sh -c 'mkdir -p /tmp/w && cd /tmp/w && printf "package main\nimport (\"fmt\"; \"os\"; \"strings\"; \"bufio\"; \"sort\"; \"strconv\"; \"math\")\nfunc main(){ fmt.Println(strings.ToUpper(\"x\"), os.Args, sort.IntsAreSorted(nil), strconv.Itoa(1), math.Pi, bufio.MaxScanTokenSize) }\n" > main.go && GOCACHE=/opt/go-cache GOROOT=/usr/lib/go HOME=/tmp go build -o /tmp/w/m main.go && rm -rf /tmp/w' >&2
umount "$r/proc"
# No identity of the build host: debootstrap copies its /etc/hostname and
# /etc/resolv.conf into the tree, and every sandbox would read them. The
# sandbox's own name (the OCI spec's hostname is the same), loopback hosts,
# no resolver (a network session binds its own resolv.conf over this empty
# regular file) and an empty machine-id (nothing in a sandbox may tell two
# hosts apart or link two sandboxes).
echo sandbox > "$r/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' > "$r/etc/hosts"
rm -f "$r/etc/resolv.conf" "$r/etc/machine-id" "$r/var/lib/dbus/machine-id" "$r/etc/mailname"
: > "$r/etc/resolv.conf"
: > "$r/etc/machine-id"
chmod 0644 "$r/etc/hostname" "$r/etc/hosts" "$r/etc/resolv.conf" "$r/etc/machine-id"
# Versions are read from the built tree, never typed by hand.
v() { chroot "$r" /bin/sh -c "$1" 2>&1 | head -1 | tr -d '"\\' ; }
cat > "$tmp/versions.json" <<JSON
{
  "python3": "$(v 'python3 --version' | awk '{print $2}')",
  "javascript": "$(v 'node --version' | tr -d v)",
  "typescript": "esbuild $(v 'esbuild --version') on node $(v 'node --version' | tr -d v)",
  "go": "$(head -1 "$r/usr/lib/go/VERSION" | sed 's/^go//')",
  "java": "$(sed -n 's/^JAVA_VERSION="\(.*\)"/\1/p' "$r/usr/lib/jvm/default-java/release")",
  "c": "$(v 'gcc -dumpfullversion')",
  "cpp": "$(v 'g++ -dumpfullversion')",
  "bash": "$(v 'bash --version' | awk '{print $4}')"
}
JSON
cp "$here/recipe.conf" "$tmp/recipe.conf"
rm -rf "$out"
mv "$tmp" "$out.partial" && mv "$out.partial" "$out"
trap - EXIT
touch "$out/.complete"
echo "$out"
