#!/usr/bin/env python3
"""Where a hello world's time goes inside gVisor: one language's compile
and run steps (the default version's, as configs/runtimes.yaml has them;
keep STEPS in step with it) timed in a loop inside bare runsc sandboxes
started with different runsc flags, and in a chroot of the same rootfs
outside gVisor, in interleaved rounds. Each sandbox or chroot runs the loop
N+1 times; the first run is reported apart ("first": a fresh sandbox's
kernel has none of the rootfs's files cached, which is what a warm-pool
sandbox's warm-up pays for in advance), the rest make the p50.

    bench/languages/tax.py LANG ROUNDS N VARIANT...
    bench/languages/tax.py c 4 3 chroot base="--overlay2 none" nodirectfs="--overlay2 none --directfs=false"

A VARIANT is NAME=RUNSC-FLAGS (the executor's own are --overlay2 none on
systrap), or chroot. Ratios are to the first variant. Needs root, runsc,
unshare and a built rootfs (SANDBOXAPI_ROOTFS, else the newest build).
"""
import base64
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys

# compile and run steps per language, as bash functions over $d (the
# run's folder); env as the runtimes file sets it for the default version.
STEPS = {
    "python3": ("main.py", 'print("hello")', 'compile(){ :; }; run(){ python3 -u "$d/main.py"; }'),
    "bash": ("main.sh", "echo hello", 'compile(){ :; }; run(){ bash "$d/main.sh"; }'),
    "javascript": ("main.js", 'console.log("hello")',
                   'export PATH=/opt/node/26/node_modules/.bin:$PATH; compile(){ :; }; run(){ node "$d/main.js"; }'),
    "typescript": ("main.ts", 'const m: string = "hello"; console.log(m)',
                   'export PATH=/opt/esbuild/node_modules/.bin:/opt/node/26/node_modules/.bin:$PATH; '
                   'compile(){ esbuild "$d/main.ts" --bundle --platform=node --format=cjs --log-level=warning "--outfile=$d/main.js" >/dev/null; }; '
                   'run(){ node "$d/main.js"; }'),
    "c": ("main.c", '#include <stdio.h>\nint main(){puts("hello");return 0;}',
          'compile(){ gcc -O2 -std=gnu17 -o "$d/main" "$d/main.c" -lm; }; run(){ "$d/main"; }'),
    "cpp": ("main.cpp", '#include <iostream>\nint main(){std::cout<<"hello"<<std::endl;}',
            'compile(){ g++ -O2 -std=gnu++20 -o "$d/main" "$d/main.cpp"; }; run(){ "$d/main"; }'),
    "go": ("main.go", 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello") }',
           'export PATH=/opt/go/1.26/bin:$PATH GOROOT=/opt/go/1.26 GOCACHE=/opt/go-cache/1.26 GO111MODULE=off GOTOOLCHAIN=local GOPROXY=off; '
           'compile(){ sbx-go-build /opt/go-std/1.26/importcfg "$d/main.go" "$d/main.a" "$d/main"; }; run(){ "$d/main"; }'),
    "java": ("Main.java", 'public class Main { public static void main(String[] a) { System.out.println("hello"); } }',
             'export JAVA_HOME=/usr/lib/jvm/java-25-openjdk-amd64; export PATH=$JAVA_HOME/bin:$PATH; compile(){ :; }; '
             'run(){ java -Xss8m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData '
             '-XX:SharedArchiveFile=/opt/sandboxapi/java/25/run.jsa -cp /opt/sandboxapi/java/25/run.jar sandboxapi.Run "$d"; }'),
}

# The loop: $1 the steps (base64), $2 the file name, $3 the code (base64), $4 N.
LOOP = r'''set -e
export PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/sandbox USER=sandbox LANG=C.UTF-8 TMPDIR=/tmp
export PYTHONPATH=/home/sandbox/.local/python PYTHONDONTWRITEBYTECODE=1 NODE_PATH=/home/sandbox/node_modules PIP_CONFIG_FILE=/dev/null
eval "$(printf %s "$1" | base64 -d)"
for i in $(seq 0 $4); do
  d=$(mktemp -d /tmp/floor.XXXXXX); printf %s "$3" | base64 -d > "$d/$2"; cd "$d"
  t0=$EPOCHREALTIME; compile; t1=$EPOCHREALTIME; run > "$d/.out"; t2=$EPOCHREALTIME
  [ "$(cat "$d/.out")" = hello ] || { echo "bad output: $(cat "$d/.out")" >&2; exit 1; }
  echo "$t0 $t1 $t2"; cd /; rm -rf "$d"
done
'''

# The chroot: the rootfs read-only, tmpfs /tmp and home, its own /proc,
# user 1000, an empty environment, 1 CPU (as BenchmarkLanguages's floor).
CHROOT = r'''set -e
R=$1; shift
mount --bind "$R" "$R"; mount -o remount,bind,ro "$R"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$R/tmp"
mount -t tmpfs -o nosuid,nodev,mode=0755,uid=1000,gid=1000 tmpfs "$R/home/sandbox"
mount -t proc proc "$R/proc"
exec chroot --userspec=1000:1000 "$R" /usr/bin/env -i /bin/bash -c "$1" x "${@:2}"
'''


def rootfs():
    if os.environ.get("SANDBOXAPI_ROOTFS"):
        p = os.environ["SANDBOXAPI_ROOTFS"]
        return os.path.join(p, "rootfs") if os.path.exists(os.path.join(p, ".complete")) else p
    marks = glob.glob("/var/cache/sandboxapi/rootfs/*/.complete")
    return os.path.join(os.path.dirname(max(marks, key=os.path.getmtime)), "rootfs")


def chroot_cgroup():
    """The chroot's cgroup, beside the sandboxes' (/sandboxapi-tax), with
    their quota of 1 CPU: the scheduler shares CPU out per cgroup."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        parent = "/sys/fs/cgroup/sandboxapi-tax"
        os.makedirs(parent, exist_ok=True)
        with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
            f.write("+cpu")
        with open(parent + "/cgroup.subtree_control", "w") as f:
            f.write("+cpu")
        limits = {"cpu.max": "100000 100000"}
    else:
        parent, limits = "/sys/fs/cgroup/cpu/sandboxapi-tax", {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}
    cg = parent + "/chroot"
    os.makedirs(cg, exist_ok=True)
    for name, value in limits.items():
        with open(os.path.join(cg, name), "w") as f:
            f.write(value)
    return cg


def bundle(d, tree, home, args):
    """An OCI bundle like a sandbox's: read-only rootfs, tmpfs /tmp, a bound
    home (a mount other than the root, as the session's), 1 CPU."""
    spec = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 1000, "gid": 1000}, "args": ["/bin/bash", "-c", LOOP, "x"] + args,
                    "env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "cwd": "/tmp", "noNewPrivileges": True,
                    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096}]},
        "root": {"path": tree, "readonly": True},
        "hostname": "sandbox",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=268435456", "mode=1777"]},
            {"destination": "/home/sandbox", "type": "bind", "source": home, "options": ["rbind", "rw", "nosuid", "nodev"]},
        ],
        "linux": {"namespaces": [{"type": t} for t in ["pid", "ipc", "uts", "mount", "network"]],
                  "resources": {"cpu": {"quota": 100000, "period": 100000}},
                  "cgroupsPath": "/sandboxapi-tax/" + os.path.basename(d)},
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(spec, f)


def main():
    lang, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    variants = [v.split("=", 1) if "=" in v else (v, "") for v in sys.argv[4:]]
    file, code, steps = STEPS[lang]
    args = [base64.b64encode(steps.encode()).decode(), file, base64.b64encode(code.encode()).decode(), str(n)]
    tree, work = rootfs(), "/tmp/sandboxapi-tax"
    runs = {v: [] for v, _ in variants}
    first = {v: [] for v, _ in variants}
    load0 = open("/proc/loadavg").read().split()[:3]
    for r in range(rounds):
        for name, flags in variants:
            if name == "chroot":
                out = subprocess.run(["bash", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', chroot_cgroup(), "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--",
                                      "bash", "-c", CHROOT, "chroot", tree, LOOP] + args, capture_output=True, text=True)
            else:
                d, home, cid = f"{work}/{name}", f"{work}/{name}-home", f"tax-{name}-{r}"
                for p in (d, home):
                    shutil.rmtree(p, ignore_errors=True)
                    os.makedirs(p)
                os.chown(home, 1000, 1000)
                bundle(d, tree, home, args)
                out = subprocess.run(["runsc", "--root", f"{work}/runsc", "--network", "none"] + flags.split()
                                     + ["run", "--bundle", d, cid], capture_output=True, text=True)
                subprocess.run(["runsc", "--root", f"{work}/runsc", "delete", "--force", cid], capture_output=True)
            if out.returncode != 0:
                sys.exit(f"{name}: {out.stderr[-2000:]}{out.stdout[-500:]}")
            rows = [[float(x) for x in line.split()] for line in out.stdout.split("\n") if len(line.split()) == 3]
            first[name].append(rows[0][2] - rows[0][0])
            runs[name] += [t2 - t0 for t0, _, t2 in rows[1:]]
    load1 = open("/proc/loadavg").read().split()[:3]
    print(f"{lang}: {rounds} rounds x {n} runs; load {' '.join(load0)} at start, {' '.join(load1)} at end; rootfs {tree}")
    base = statistics.median(runs[variants[0][0]])
    for name, flags in variants:
        m = statistics.median(runs[name])
        print(f"  {name:12s} p50 {m * 1000:8.1f} ms  x {m / base:5.2f}   first run p50 {statistics.median(first[name]) * 1000:8.1f} ms"
              f"   {flags or ''}")


if __name__ == "__main__":
    main()
