# The installer program. It runs inside the installer's own sandbox as the
# sandbox user, with the session's home at /home/sandbox and a network that
# reaches only the mirror. It stages every package, then swaps the live
# folder (a symlink to a generation folder) in one rename: all or nothing,
# also when it is killed midway (leftovers are removed by the next run).
#
# Nothing the session wrote may run here: the installer is started with
# python3 -I (no cwd, user site or PYTHON* variables; main checks that no
# path of the home is importable), works in a private folder under the
# sandbox's own /tmp, and runs pip the same way with an explicit, minimal
# environment and no pip configuration but the rootfs' own.
import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

HOME = "/home/sandbox"
STORE = HOME + "/.local/.sandboxapi-pkgs"
LIVE = {"pip": HOME + "/.local/python", "npm": HOME + "/node_modules"}


def fail(msg):
    sys.stderr.write("installer: " + msg + "\n")
    sys.exit(3)


def current_target(live):
    if os.path.islink(live):
        t = os.path.realpath(live)
        if os.path.dirname(t) == STORE and os.path.isdir(t):
            return t
    return None


def restore_moved_aside():
    # commit() moves a real live folder (made by the user) to
    # STORE/old-MANAGER-hex and then renames the new link over its place.
    # An installer killed in between leaves the live path empty: put the
    # user's folder back. Once the link is in place the folder's content is
    # in the live generation (commit copied it), so the moved copy can go.
    # Anything else (live path taken by something not ours) keeps both.
    for e in sorted(os.listdir(STORE)):
        mgr = e[len("old-"):].split("-", 1)[0] if e.startswith("old-") else None
        if mgr not in LIVE:
            continue
        p, live = os.path.join(STORE, e), LIVE[mgr]
        if os.path.islink(p) or not os.path.isdir(p):
            continue
        if not os.path.lexists(live):
            os.rename(p, live)
        elif current_target(live):
            shutil.rmtree(p, ignore_errors=True)


def clean_leftovers():
    restore_moved_aside()
    keep = {current_target(l) for l in LIVE.values()}
    for e in os.listdir(STORE):
        p = os.path.join(STORE, e)
        if p in keep:
            continue
        if e.startswith("old-"):
            continue  # a user's folder restore_moved_aside could not place
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)
    # Links made for a commit that never happened.
    for live in LIVE.values():
        d = os.path.dirname(live)
        if not os.path.isdir(d):
            continue
        for e in os.listdir(d):
            p = os.path.join(d, e)
            if e.startswith(".link-") and os.path.islink(p) and os.path.dirname(os.path.realpath(p)) == STORE:
                os.unlink(p)


def new_dir(prefix):
    p = os.path.join(STORE, prefix + os.urandom(6).hex())
    os.mkdir(p, 0o755)
    return p


def remove(p):
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)


def norm(name):
    out = []
    for c in name.lower():
        out.append("-" if c in "-_." else c)
    return "".join(out)


def fetch(url, size_limit):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=60) as r:
        data = r.read(size_limit + 1)
    if len(data) > size_limit:
        fail("download of %s is larger than recorded" % url)
    return data


def extract_npm(data, dest, limits):
    count = 0
    total = 0
    with tarfile.open(fileobj=__import__("io").BytesIO(data), mode="r:gz") as tf:
        for m in tf:
            count += 1
            if count > limits["max_entries"]:
                fail("too many entries")
            name = m.name
            if not name.startswith("package/"):
                fail("entry outside package/: %r" % name)
            rel = name[len("package/"):].strip("/")
            if rel == "":
                continue
            parts = rel.split("/")
            if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in name:
                fail("unsafe entry %r" % name)
            target = os.path.join(dest, *parts)
            if m.isdir():
                os.makedirs(target, 0o755, exist_ok=True)
                continue
            if not m.isreg():
                fail("entry %r is not a regular file" % name)
            total += m.size
            if total > limits["max_bytes"]:
                fail("package too large once unpacked")
            os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
            mode = 0o755 if m.mode & 0o111 else 0o644
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as out:
                src = tf.extractfile(m)
                left = m.size
                while left > 0:
                    chunk = src.read(min(left, 1 << 16))
                    if not chunk:
                        fail("short entry %r" % name)
                    out.write(chunk)
                    left -= len(chunk)


def pip_argv(job, stage, req):
    """The whole pip command line: wheels only, no dependencies, the hashes
    the mirror recorded, the mirror's index and nothing else."""
    return [sys.executable, "-I", "-B", "-m", "pip", "install", "--isolated", "--no-input",
            "--only-binary=:all:", "--no-deps", "--no-build-isolation", "--require-hashes",
            "--no-cache-dir", "--no-compile", "--progress-bar", "off", "--disable-pip-version-check",
            "--index-url", job["index_url"], "--trusted-host", job["trusted_host"],
            "--target", stage, "-r", req]


def pip_env(work):
    """pip's complete environment: nothing inherited, no configuration."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8", "TMPDIR": work,
        "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def requirements(job):
    return "".join("%s==%s --hash=sha256:%s\n" % (p["name"], p["version"], p["sha256"]) for p in job["packages"])


def stage_pip(job, stage, work):
    req = os.path.join(work, "requirements.txt")
    with open(req, "w") as f:
        f.write(requirements(job))
    r = subprocess.run(pip_argv(job, stage, req), env=pip_env(work), cwd=work, stdin=subprocess.DEVNULL)
    os.unlink(req)
    if r.returncode != 0:
        fail("pip exited with %d" % r.returncode)
    # pip --target leaves scripts in bin/; keep only the packages.
    return [e for e in os.listdir(stage)]


def stage_npm(job, stage):
    names = []
    for p in job["packages"]:
        data = fetch(job["base_url"] + p["url_path"], p["size"])
        if hashlib.sha256(data).hexdigest() != p["sha256"]:
            fail("%s: sha256 mismatch" % p["name"])
        if p.get("integrity"):
            algo, _, want = p["integrity"].partition("-")
            if algo != "sha512" or base64.b64encode(hashlib.sha512(data).digest()).decode() != want:
                fail("%s: integrity mismatch" % p["name"])
        dest = os.path.join(stage, *p["name"].split("/"))
        if os.path.lexists(dest):
            fail("%s listed twice" % p["name"])
        os.makedirs(dest, 0o755)
        extract_npm(data, dest, job["limits"])
        names.append(p["name"])
    return names


def commit(job, stage, entries):
    live = LIVE[job["manager"]]
    gen = new_dir(job["manager"] + "-")
    cur = current_target(live)
    src = cur if cur else (live if os.path.isdir(live) and not os.path.islink(live) else None)
    if src:
        os.rmdir(gen)
        r = subprocess.run(["cp", "-a", "-l", "--", src, gen], stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            fail("copying the current packages failed")
    if job["manager"] == "pip":
        wanted = {norm(p["name"]) for p in job["packages"]}
        for e in os.listdir(gen):
            if e.endswith(".dist-info") and norm(e[:-len(".dist-info")].rsplit("-", 1)[0]) in wanted:
                remove(os.path.join(gen, e))
    for e in entries:
        s, d = os.path.join(stage, e), os.path.join(gen, e)
        if e == "bin" and job["manager"] == "pip" and os.path.isdir(d):
            for f in os.listdir(s):
                remove(os.path.join(d, f))
                os.rename(os.path.join(s, f), os.path.join(d, f))
            continue
        os.makedirs(os.path.dirname(d), 0o755, exist_ok=True)
        remove(d)
        os.rename(s, d)
    # No sync: the rename below is the commit point for anything that can
    # kill the installer; the home's file system has no journal anyway.
    link = os.path.join(os.path.dirname(live), ".link-" + os.urandom(4).hex())
    os.symlink(os.path.relpath(gen, os.path.dirname(live)), link)
    if os.path.lexists(live) and not os.path.islink(live):
        # A real folder (made by the user): move it aside first.
        os.rename(live, os.path.join(STORE, "old-%s-%s" % (job["manager"], os.urandom(4).hex())))
        if os.environ.get("SANDBOXAPI_INSTALL_DIE_AFTER_MOVE_ASIDE") == "1":
            os.kill(os.getpid(), 9)
    os.rename(link, live)


def check_isolated():
    """Refuses to go on when anything of the home could be imported."""
    if not sys.flags.isolated:
        fail("must run as python3 -I")
    home = os.path.realpath(HOME)
    for p in sys.path:
        rp = os.path.realpath(p or os.getcwd())
        if rp == home or rp.startswith(home + os.sep):
            fail("home on sys.path: %r" % p)


def main():
    t0 = time.monotonic()
    check_isolated()
    job = json.load(open(sys.argv[1]))
    os.umask(0o022)
    work = tempfile.mkdtemp(prefix="installer-", dir="/tmp")
    os.chdir(work)
    os.makedirs(STORE, 0o755, exist_ok=True)
    clean_leftovers()
    stage = new_dir("stage-")
    tp = time.monotonic()
    if job["manager"] == "pip":
        entries = stage_pip(job, stage, work)
    elif job["manager"] == "npm":
        entries = stage_npm(job, stage)
    else:
        fail("unknown manager")
    t1 = time.monotonic()
    if os.environ.get("SANDBOXAPI_INSTALL_DIE_BEFORE_COMMIT") == "1":
        os.kill(os.getpid(), 9)
    commit(job, stage, entries)
    clean_leftovers()
    t2 = time.monotonic()
    ms = lambda a, b: int((b - a) * 1000)
    print(json.dumps({"ok": True, "entries": sorted(entries), "prepare_ms": ms(t0, tp),
                      "fetch_ms": ms(tp, t1), "commit_ms": ms(t1, t2)}))


if __name__ == "__main__":
    main()
