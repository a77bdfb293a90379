#!/usr/bin/env bash
# Builds the shared, read-only runtime rootfs with debootstrap, cached by the
# content hash of this script and recipe.conf. Prints the rootfs folder.
#   rootfs/build.sh [CACHE_DIR [PLAN]]    (default /var/cache/sandboxapi/rootfs)
# PLAN is the part of the recipe that configs/runtimes.yaml makes (every
# language's packages and versions: `sandboxapi rootfs plan`); run from a
# checkout without one, it is made with `go run`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${SANDBOXAPI_ROOTFS_CACHE:-/var/cache/sandboxapi/rootfs}}
plan=${2:-}
if [ -z "$plan" ]; then
  plan=$(mktemp)
  (cd "$here/.." && go run ./cmd/sandboxapi rootfs plan) > "$plan"
fi
hash=$(cat "$here/build.sh" "$here/recipe.conf" "$plan" | sha256sum | cut -c1-16)
out="$cache/$hash"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
# shellcheck source=/dev/null
. "$here/recipe.conf"
# shellcheck source=/dev/null
. "$plan"
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'umount -R "$tmp/rootfs/proc" 2>/dev/null || true; rm -rf "$tmp"' EXIT
echo "building rootfs $hash (debootstrap $SUITE, about a minute or more)" >&2
pkgs=$(echo "$PACKAGES" | tr ' ' ',')
debootstrap --variant="$VARIANT" --include="$pkgs" "$SUITE" "$tmp/rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 || {
  tail -30 "$tmp/debootstrap.log" >&2; exit 1; }
r="$tmp/rootfs"
# The languages' packages go in with apt, not debootstrap's --include:
# debootstrap configures everything in one loop without apt's ordering,
# and some packages (python3-zmq, which the Jupyter kernel needs) fail it.
had_resolv=false
if [ -e "$r/etc/resolv.conf" ] || [ -L "$r/etc/resolv.conf" ]; then mv "$r/etc/resolv.conf" "$tmp/resolv.conf.orig"; had_resolv=true; fi
cp /etc/resolv.conf "$r/etc/resolv.conf"
mount -t proc proc "$r/proc"
# shellcheck disable=SC2086
chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
  /bin/sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $RUNTIME_PACKAGES" >"$tmp/apt.log" 2>&1 || {
  tail -30 "$tmp/apt.log" >&2; exit 1; }
umount "$r/proc"
rm -f "$r/etc/resolv.conf"
if $had_resolv; then mv "$tmp/resolv.conf.orig" "$r/etc/resolv.conf"; fi
chroot "$r" /usr/sbin/groupadd -g "$SANDBOX_UID" sandbox
chroot "$r" /usr/sbin/useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -d /home/sandbox -M -s /bin/bash sandbox
mkdir -p "$r/home/sandbox" "$r/opt/sandboxapi/bin" && chown "$SANDBOX_UID:$SANDBOX_UID" "$r/home/sandbox"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*
# Versions that do not come from Debian, fetched on the host with the
# ecosystem's own client, which checks what it fetched: npm packages
# against the registry's integrity hash, Go toolchains against the Go
# checksum database (sum.golang.org).
for i in "${!RT_LANG[@]}"; do
  src=${RT_SOURCE[$i]} prefix=${RT_PREFIX[$i]}
  case "$src" in
  debian) ;;
  npm:*)
    mkdir -p "$r$prefix"
    npm install --silent --no-audit --no-fund --prefix "$r$prefix" "${src#npm:}" >&2 ;;
  go:*)
    dir=$(cd / && GOFLAGS= GOTOOLCHAIN=local go mod download -json "${src#go:}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || { echo "go mod download ${src#go:} failed" >&2; exit 1; }
    # The module cache holds files without execute bits (as the go
    # command's own toolchain switch finds them): the commands get theirs.
    mkdir -p "$r$prefix" && cp -a "$dir/." "$r$prefix/" && chmod -R u+w,go-w,a+rX "$r$prefix"
    find "$r$prefix/bin" "$r$prefix/pkg/tool" -type f -exec chmod 755 {} + ;;
  *) echo "unknown source $src" >&2; exit 1 ;;
  esac
done
# Compiled languages near their toolchains' floor: each step below is a
# speed-up that configs/runtimes.yaml's steps use, run for every version
# whose entry names it (prepare), with that version's PATH.
mount -t proc proc "$r/proc"
# inroot SERIES PATH SCRIPT: runs SCRIPT in the rootfs with a version's PATH.
inroot() { chroot "$r" /usr/bin/env -i HOME=/tmp LANG=C.UTF-8 SERIES="$1" PATH="$2" /bin/sh -c "$3" >&2; }
# Java: one JVM compiles and runs (sandboxapi.Run, the javac API in
# process), started from a class-data archive of the compiler's classes
# dumped by a representative run, one per JVM.
mkdir -p "$r/opt/sandboxapi/java"
cat > "$r/opt/sandboxapi/java/Run.java" <<'JAVA'
package sandboxapi;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import javax.tools.ToolProvider;

/**
 * Compiles DIR/Main.java as javac would (class files into DIR, the working
 * folder on the class path) and runs Main in the same JVM: one JVM start
 * instead of two. Once the compile has succeeded it writes a byte to fd 3
 * and closes it (the guest's compile marker); a compile error ends the JVM
 * with status 1 and the compiler's messages on stderr, without the byte.
 * Usage: java ... sandboxapi.Run DIR [ARGS...]
 */
public final class Run {
    public static void main(String[] args) throws Throwable {
        Path dir = Path.of(args[0]);
        String src = dir.resolve("Main.java").toString();
        // Like the separate javac step: its messages are shown only when
        // the compile fails.
        ByteArrayOutputStream msgs = new ByteArrayOutputStream();
        int rc = ToolProvider.getSystemJavaCompiler().run(null, msgs, msgs, "-d", dir.toString(), "-classpath", ".", src);
        if (rc != 0) {
            System.err.write(msgs.toByteArray());
            System.err.flush();
            System.exit(1);
        }
        // fd 3 is the guest's pipe; never a file (when run by hand).
        Path fd3 = Path.of("/proc/self/fd/3");
        if (Files.exists(fd3) && !Files.isRegularFile(fd3) && !Files.isDirectory(fd3)) {
            try (OutputStream marker = Files.newOutputStream(fd3, StandardOpenOption.WRITE)) {
                marker.write(1);
            } catch (IOException e) {
                // Nobody to tell.
            }
        }
        URLClassLoader loader = new URLClassLoader(new URL[] {dir.toUri().toURL()}, ClassLoader.getSystemClassLoader());
        Thread.currentThread().setContextClassLoader(loader);
        Class<?> main;
        try {
            main = Class.forName("Main", false, loader);
        } catch (ClassNotFoundException e) {
            System.err.println("Error: Could not find or load main class Main");
            System.err.println("Caused by: " + e);
            System.exit(1);
            return;
        }
        Method m;
        try {
            m = main.getMethod("main", String[].class);
        } catch (NoSuchMethodException e) {
            m = null;
        }
        if (m == null || !Modifier.isStatic(m.getModifiers()) || m.getReturnType() != void.class) {
            System.err.println("Error: Main method not found in class Main, please define the main method as:");
            System.err.println("   public static void main(String[] args)");
            System.exit(1);
            return;
        }
        try {
            m.invoke(null, (Object) Arrays.copyOfRange(args, 1, args.length));
        } catch (InvocationTargetException e) {
            Throwable t = e.getCause();
            // The trace ends at Main.main, as when java starts Main itself.
            StackTraceElement[] st = t.getStackTrace();
            int n = st.length;
            while (n > 0 && !(st[n - 1].getClassName().equals("Main") && st[n - 1].getMethodName().equals("main"))) {
                n--;
            }
            if (n > 0) {
                t.setStackTrace(Arrays.copyOf(st, n));
            }
            throw t;
        }
    }
}
JAVA
cat > "$r/opt/sandboxapi/java/Sample.java" <<'JAVA'
import java.io.*;
import java.util.*;
import java.util.stream.*;
public class Main {
    record P(String name, int n) {}
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        Scanner sc = new Scanner("1 2 3");
        List<Integer> xs = new ArrayList<>();
        while (sc.hasNextInt()) xs.add(sc.nextInt());
        Map<String, Integer> m = new HashMap<>(Map.of("a", 1));
        m.merge("a", 1, Integer::sum);
        String s = xs.stream().map(String::valueOf).collect(Collectors.joining(","));
        StringBuilder sb = new StringBuilder(s).reverse();
        System.out.println(String.format("%s %d %.2f", sb, m.get("a"), Math.sqrt(2)) + new P("x", 1) + Arrays.toString(new int[] {1}) + in.readLine());
    }
}
JAVA
prepare_java() {
  inroot "$1" "$2" 'set -e; d=/opt/sandboxapi/java/$SERIES; mkdir -p $d/c && javac -d $d/c /opt/sandboxapi/java/Run.java && jar --create --file $d/run.jar -C $d/c . && rm -rf $d/c
    mkdir -p /tmp/j && cp /opt/sandboxapi/java/Sample.java /tmp/j/Main.java && cd /tmp/j && java -XX:ArchiveClassesAtExit=$d/run.jsa -Xss8m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -cp $d/run.jar sandboxapi.Run /tmp/j </dev/null >/dev/null && cd / && rm -rf /tmp/j && chmod 644 $d/run.jsa'
}
# C++: precompiled headers for the standard headers programs start with,
# beside each header, for the runtime's flags: g++ takes a .gch it finds
# where it finds the header when the flags match, and the header otherwise.
prepare_cpp() {
  for h in iostream bits/stdc++.h; do
    inroot "$1" "$2" 'set -e; p=$(printf "#include <%s>\n" "'"$h"'" | g++ -O2 -std=gnu++20 -x c++ -fsyntax-only -H - 2>&1 | sed -n "1s/^\. //p"); g++ -O2 -std=gnu++20 -x c++-header "$p" -o "$p.gch"'
  done
}
# Go: the build cache warmed with the standard library (go build reads it
# for programs with other imports), the whole standard library prebuilt
# (without cgo) and an import config naming each package's archive, so
# sbx-go-build compiles and links a standard-library-only program without
# the go command; one of each per version. sbx-go-build itself is built
# once, by the default version.
mkdir -p "$r/opt/go-std"
cat > "$r/opt/go-std/gobuild.go" <<'GO'
// sbx-go-build compiles one Go file into a program. A program whose
// imports are all in the standard library is compiled and linked directly
// against the standard library prebuilt in the rootfs (no go command:
// nothing to hash, no cache to look up); any other goes to go build.
//
//	sbx-go-build IMPORTCFG DIR/main.go DIR/main.a DIR/main
package main

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: sbx-go-build IMPORTCFG SRC OBJ OUT")
		os.Exit(2)
	}
	cfg, src, obj, out := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	if !direct(cfg, src) {
		run("go", []string{"go", "build", "-o", out, src})
	}
	// Paths in messages read as go build's do: ./main.go:3:2: ...
	if err := os.Chdir(filepath.Dir(src)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tools := filepath.Join(os.Getenv("GOROOT"), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH)
	c := exec.Command(filepath.Join(tools, "compile"), "-o", obj, "-p", "main", "-complete", "-pack", "-importcfg", cfg, "-c=1", "./"+filepath.Base(src))
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		os.Exit(1)
	}
	run(filepath.Join(tools, "link"), []string{"link", "-o", out, "-importcfg", cfg, "-buildmode=exe", "-s", "-w", obj})
}

// direct reports whether src can skip the go command: a package main
// whose every import is a standard package in cfg and that needs nothing
// go build alone supplies (cgo, embedded files).
func direct(cfg, src string) bool {
	have := map[string]bool{}
	f, err := os.Open(cfg)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "packagefile "); ok {
			name, _, _ := strings.Cut(p, "=")
			have[name] = true
		}
	}
	file, err := parser.ParseFile(token.NewFileSet(), src, nil, parser.ImportsOnly)
	if err != nil || file.Name.Name != "main" {
		return false // go build says what is wrong
	}
	for _, imp := range file.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		// internal and vendored packages: go build says they may not be imported.
		if err != nil || p == "embed" || !have[p] || strings.Contains("/"+p+"/", "/internal/") || strings.HasPrefix(p, "vendor/") {
			return false
		}
	}
	return true
}

// run replaces this process with argv[0] (found on PATH when bare).
func run(name string, argv []string) {
	path, err := exec.LookPath(name)
	if err == nil {
		err = syscall.Exec(path, argv, os.Environ())
	}
	fmt.Fprintln(os.Stderr, "sbx-go-build:", err)
	os.Exit(1)
}
GO
prepare_go() {
  inroot "$1" "$2" 'set -e; export GOROOT=$(go env GOROOT) GOCACHE=/opt/go-cache/$SERIES GO111MODULE=off GOTOOLCHAIN=local GOFLAGS=
    mkdir -p /tmp/w /opt/go-std/$SERIES && cd /tmp/w && printf "package main\nimport (\"fmt\"; \"os\"; \"strings\"; \"bufio\"; \"sort\"; \"strconv\"; \"math\")\nfunc main(){ fmt.Println(strings.ToUpper(\"x\"), os.Args, sort.IntsAreSorted(nil), strconv.Itoa(1), math.Pi, bufio.MaxScanTokenSize) }\n" > main.go && go build -o /tmp/w/m main.go && cd / && rm -rf /tmp/w
    CGO_ENABLED=0 go list -export -deps -f "{{if .Export}}packagefile {{.ImportPath}}={{.Export}}{{end}}" std > /opt/go-std/$SERIES/importcfg'
  if [ "$3" = 1 ]; then
    inroot "$1" "$2" 'set -e; cd /opt/go-std && GOCACHE=/tmp/gocache GO111MODULE=off GOTOOLCHAIN=local CGO_ENABLED=0 go build -o /usr/local/bin/sbx-go-build gobuild.go && rm -rf /tmp/gocache'
  fi
}
for i in "${!RT_LANG[@]}"; do
  case "${RT_PREPARE[$i]}" in
  "") ;;
  java) prepare_java "${RT_SERIES[$i]}" "${RT_PATH[$i]}" ;;
  cpp) prepare_cpp "${RT_SERIES[$i]}" "${RT_PATH[$i]}" ;;
  go) prepare_go "${RT_SERIES[$i]}" "${RT_PATH[$i]}" "${RT_DEFAULT[$i]}" ;;
  *) echo "unknown prepare step ${RT_PREPARE[$i]}" >&2; exit 1 ;;
  esac
done
rm -f "$r/opt/sandboxapi/java/Run.java" "$r/opt/sandboxapi/java/Sample.java" "$r/opt/go-std/gobuild.go"
# A login shell (`bash -l`, which is how E2B's SDK runs every command)
# reads Debian's /etc/profile, which sets PATH anew: without this file
# node, npm and go would be missing there. It puts back every language's
# default version's folders, as the executor's PATH has them (a session on
# another version gets its own folders first from the executor, but a
# login shell sees the defaults).
rt_dirs=""
for i in "${!RT_LANG[@]}"; do
  [ "${RT_DEFAULT[$i]}" = 1 ] || continue
  IFS=: read -ra ds <<<"${RT_PATH[$i]}"
  for d in "${ds[@]}"; do
    case ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$rt_dirs:" in
    *":$d:"*) ;;
    *) rt_dirs="${rt_dirs:+$rt_dirs:}$d" ;;
    esac
  done
done
mkdir -p "$r/etc/profile.d"
printf '# Written by sandboxapi'"'"'s rootfs build (rootfs/build.sh): the default\n# version of every language on a login shell'"'"'s PATH.\nPATH="%s:$PATH"\nexport PATH\n' "$rt_dirs" > "$r/etc/profile.d/sandboxapi-runtimes.sh"
chmod 0644 "$r/etc/profile.d/sandboxapi-runtimes.sh"
# Debian's /etc/profile starts two programs on every login shell (`id -u`
# and `run-parts --list`), about 45 ms in gVisor, paid by every command
# E2B's SDK runs (`bash -l -c`). This one does the same without starting
# any: the user from bash's EUID (`id -u` only in a shell without it), and
# /etc/profile.d's scripts by a glob with run-parts' own name rule.
cat > "$r/etc/profile" <<'PROFILE'
# /etc/profile: system-wide .profile file for the Bourne shell (sh(1))
# and Bourne compatible shells (bash(1), ksh(1), ash(1), ...).
# Written by sandboxapi's rootfs build (rootfs/build.sh): Debian's, except
# that it starts no program.

if [ -n "${EUID-}" ]; then _uid=$EUID; else _uid=$(id -u); fi
if [ "$_uid" -eq 0 ]; then
  PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
else
  PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
fi
export PATH

if [ "${PS1-}" ]; then
  if [ "${BASH-}" ] && [ "$BASH" != "/bin/sh" ]; then
    # The file bash.bashrc already sets the default PS1.
    if [ -f /etc/bash.bashrc ]; then
      . /etc/bash.bashrc
    fi
  else
    if [ "$_uid" -eq 0 ]; then
      PS1='# '
    else
      PS1='$ '
    fi
  fi
fi
unset _uid

if [ -d /etc/profile.d ]; then
  # run-parts --list --regex '^[a-zA-Z0-9_][a-zA-Z0-9._-]*\.sh$'
  # without starting it (the same order under the sandbox's C.UTF-8).
  for i in /etc/profile.d/*.sh; do
    case ${i##*/} in
      [!a-zA-Z0-9_]* | *[!a-zA-Z0-9._-]*) continue ;;
    esac
    if [ -r "$i" ] && [ ! -d "$i" ]; then
      . "$i"
    fi
  done
  unset i
fi
PROFILE
chmod 0644 "$r/etc/profile"
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
# Versions are read from the built tree, never typed by hand: language ->
# version as the runtimes file lists it -> exact version.
json=""
last=""
for i in "${!RT_LANG[@]}"; do
  lang=${RT_LANG[$i]}
  got=$(chroot "$r" /usr/bin/env -i PATH="${RT_PATH[$i]}" /bin/sh -c "${RT_PROBE[$i]}" 2>&1 | head -1 | tr -cd 'A-Za-z0-9.+~_-')
  [ -n "$got" ] || { echo "probe of $lang ${RT_SERIES[$i]} printed nothing" >&2; exit 1; }
  if [ "$lang" = "$last" ]; then json+=", "; else [ -z "$last" ] || json+=$'},\n'; json+="  \"$lang\": {"; fi
  json+="\"${RT_SERIES[$i]}\": \"$got\""
  last=$lang
done
[ -z "$last" ] || json+="}"
printf '{\n%s\n}\n' "$json" > "$tmp/versions.json"
umount "$r/proc"
cp "$here/recipe.conf" "$tmp/recipe.conf"
cp "$plan" "$tmp/plan.sh"
rm -rf "$out"
mv "$tmp" "$out.partial" && mv "$out.partial" "$out"
trap - EXIT
touch "$out/.complete"
echo "$out"
