# The installer program. It runs inside the installer's own sandbox as the
# sandbox user, with the session's home at /home/sandbox and a network that
# reaches only the mirror. It stages every package, then swaps the live
# folder (a symlink to a generation folder) in one rename: all or nothing,
# also when it is killed midway (leftovers are removed by the next run).
#
# Nothing the session wrote may run here: the installer is started with
# python3 -I -B (no cwd, user site or PYTHON* variables, no bytecode
# written; main checks that no path of the home is importable), works in a
# private folder under the sandbox's own /tmp, and runs pip in this same
# process with an explicit, minimal environment and no pip configuration
# but the rootfs' own.
#
# For pip it first fetches every wheel from the mirror in parallel (each
# checked against its recorded size and sha256) while pip is imported,
# then has pip install those files with --no-index --require-hashes: pip
# checks the hashes again, and reaches nothing itself.
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

# Test hooks, read before pip's environment replaces ours.
DIE_BEFORE_COMMIT = os.environ.get("SANDBOXAPI_INSTALL_DIE_BEFORE_COMMIT") == "1"
DIE_AFTER_MOVE_ASIDE = os.environ.get("SANDBOXAPI_INSTALL_DIE_AFTER_MOVE_ASIDE") == "1"

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


class Failure(Exception):
    pass


def fetch(url, size_limit):
    """One file from the mirror, over plain HTTP as download does: urllib's
    build_opener made an SSL context (reading the system's CA store) for
    every file, about 60 ms each on a host and up to a second in the
    sandbox with eight threads: most of an express tree's install."""
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname or u.query or u.fragment:
        raise Failure("bad mirror address %r" % url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
    try:
        conn.request("GET", u.path)
        r = conn.getresponse()
        if r.status != 200:
            raise Failure("%s: mirror answered %d" % (u.path, r.status))
        data = r.read(size_limit + 1)
    finally:
        conn.close()
    if len(data) > size_limit:
        fail("download of %s is larger than recorded" % url)
    return data


# What a package's package.json loses when it is extracted into a session
# (the mirror serves it as published): the scripts npm would run on
# install, and the dependency fields (the installer lays out and checks
# dependencies itself; nothing in the session resolves them). Other
# scripts ("test", "prepare", ...) never run for an installed package.
LIFECYCLE_SCRIPTS = ("preinstall", "install", "postinstall", "preuninstall", "uninstall", "postuninstall")
STRIPPED_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies", "peerDependenciesMeta",
                   "bundleDependencies", "bundledDependencies", "gypfile", "_hasShrinkwrap", "hasInstallScript")


def strip_manifest(path):
    """Rewrites the extracted package.json at path without lifecycle
    scripts and dependency fields; a file with none of them stays as it
    is. Returns what was removed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            fail("package.json is not a regular file")
        raw = f.read()
    try:
        man = json.loads(raw)
    except (ValueError, RecursionError) as e:
        fail("package.json: %s" % e)
    if not isinstance(man, dict):
        fail("package.json is not an object")
    removed = []
    if "scripts" in man:
        scripts = man["scripts"]
        if not isinstance(scripts, dict):
            del man["scripts"]
            removed.append("scripts")
        else:
            for s in LIFECYCLE_SCRIPTS:
                if s in scripts:
                    del scripts[s]
                    removed.append("scripts." + s)
            if not scripts:
                del man["scripts"]
    for f in STRIPPED_FIELDS:
        if f in man:
            del man[f]
            removed.append(f)
    if removed:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        with os.fdopen(fd, "wb") as out:
            out.write((json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))
    return removed


def extract_npm(data, dest, limits):
    count = 0
    total = 0
    import io
    import tarfile
    # Like npm, the first path component is the package folder, whatever
    # its name ("package", or "node" in @types tarballs); every entry must
    # share it (the mirror admits nothing else as published).
    top = None
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        for m in tf:
            count += 1
            if count > limits["max_entries"]:
                fail("too many entries")
            name = m.name
            first = name.split("/", 1)[0]
            if top is None:
                top = first
            if first != top or first in ("", ".", "..") or "/" not in name:
                fail("entry outside the package folder %r: %r" % (top, name))
            rel = name[len(top) + 1:].strip("/")
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
    manifest = os.path.join(dest, "package.json")
    if not os.path.isfile(manifest) or os.path.islink(manifest):
        fail("package.json missing")
    strip_manifest(manifest)


def pip_argv(stage, req):
    """pip's whole command line: wheels only, no dependencies, no index
    (only the files fetched from the mirror), the hashes the mirror
    recorded."""
    return ["install", "--isolated", "--no-input", "--no-index",
            "--only-binary=:all:", "--no-deps", "--no-build-isolation", "--require-hashes",
            "--no-cache-dir", "--no-compile", "--progress-bar", "off", "--disable-pip-version-check",
            "--target", stage, "-r", req]


def pip_env(work):
    """pip's complete environment: nothing inherited, no configuration."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8", "TMPDIR": work,
        "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


SAFE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")
SAFE_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl")
SAFE_PATH = re.compile(r"/[A-Za-z0-9._~%/+!-]{1,1000}")


def wheel_path(wheels, p):
    """Where p's wheel is kept: its recorded file name in wheels, refused
    unless it is a plain wheel file name."""
    fn = p.get("filename", "")
    if not SAFE_WHEEL.fullmatch(fn) or ".." in fn:
        raise Failure("%r is not a plain wheel file name" % fn)
    return os.path.join(wheels, fn)


def requirements(job, wheels):
    """One line per wheel: its name pinned to the fetched file and to the
    hash the mirror recorded (pip checks the wheel's name, version and
    hash against them)."""
    lines = []
    for p in job["packages"]:
        if not SAFE_NAME.fullmatch(p["name"]) or not re.fullmatch(r"[0-9a-f]{64}", p["sha256"]):
            raise Failure("bad package record %r" % p["name"])
        lines.append("%s @ file://%s --hash=sha256:%s\n" % (p["name"], wheel_path(wheels, p), p["sha256"]))
    return "".join(lines)


def download(base_url, p, path):
    """Streams one file from the mirror into a new file at path; it must
    have the recorded size and sha256."""
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(base_url)
    if u.scheme != "http" or not u.hostname or not SAFE_PATH.fullmatch(p["url_path"]):
        raise Failure("bad mirror address for %s" % p["name"])
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
    try:
        conn.request("GET", p["url_path"])
        r = conn.getresponse()
        if r.status != 200:
            raise Failure("%s: mirror answered %d" % (p["name"], r.status))
        h, n = hashlib.sha256(), 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as out:
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                n += len(chunk)
                if n > p["size"]:
                    raise Failure("%s: larger than recorded" % p["name"])
                h.update(chunk)
                out.write(chunk)
    finally:
        conn.close()
    if n != p["size"] or h.hexdigest() != p["sha256"]:
        raise Failure("%s: size or sha256 differs from the mirror's record" % p["name"])


def download_all(job, wheels, workers=8):
    """Starts fetching every wheel in parallel; the returned function waits
    and raises the first failure."""
    todo = [(p, wheel_path(wheels, p)) for p in job["packages"]]
    if len(set(path for _, path in todo)) != len(todo):
        raise Failure("a wheel is listed twice")
    errors = []

    def work():
        while True:
            try:
                p, path = todo.pop()
            except IndexError:
                return
            try:
                download(job["base_url"], p, path)
            except Exception as e:  # reported by wait
                errors.append(e)
                return
    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(todo)))]
    for t in threads:
        t.start()

    def wait():
        for t in threads:
            t.join()
        if errors:
            raise Failure("fetching from the mirror: %s" % errors[0])
    return wait


def trim_pip():
    """pip builds an HTTP session for every install, though here it fetches
    nothing (--no-index, file:// wheels). Two parts of that session only
    matter for requests and are slow in the sandbox: the user agent (it
    scans every installed distribution and looks for rustc) and the
    system trust store (it parses every CA certificate). Skip both; with
    no trust store pip falls back to its own verified default. Returns
    what was trimmed: nothing when pip's insides have changed."""
    done = []
    try:
        import pip._internal.network.session as session
        if callable(getattr(session, "user_agent", None)):
            session.user_agent = lambda: "pip (sandboxapi installer)"
            done.append("user_agent")
    except ImportError:
        pass
    try:
        import pip._internal.cli.index_command as index_command
        if callable(getattr(index_command, "_create_truststore_ssl_context", None)):
            index_command._create_truststore_ssl_context = lambda: None
            done.append("truststore")
    except ImportError:
        pass
    return done


def stage_pip(job, stage, work, timings):
    t0 = time.monotonic()
    wheels = os.path.join(work, "wheels")
    os.mkdir(wheels, 0o700)
    req = os.path.join(work, "requirements.txt")
    with open(req, "w") as f:
        f.write(requirements(job, wheels))
    # What the fetching threads use is imported here, before pip's imports
    # start in this thread: two threads importing at once may see each
    # other's modules half made. (The idna codec resolves the mirror's
    # address.)
    import encodings.idna  # noqa: F401
    import http.client  # noqa: F401
    import urllib.parse  # noqa: F401
    wait = download_all(job, wheels)
    # pip runs in this process (python3 -I -B already), with its own
    # fixed environment, imported while the wheels arrive.
    os.environ.clear()
    os.environ.update(pip_env(work))
    tempfile.tempdir = work
    from pip._internal.cli.main import main as pip_main
    timings["pip_trimmed"] = trim_pip()
    t1 = time.monotonic()
    wait()
    t2 = time.monotonic()
    rc = pip_main(pip_argv(stage, req))
    timings.update(pip_import_ms=ms(t0, t1), download_wait_ms=ms(t1, t2), pip_run_ms=ms(t2, time.monotonic()))
    if rc != 0:
        fail("pip exited with %d" % rc)
    return os.listdir(stage)


NPM_PART = r"(?:@[a-z0-9~][a-z0-9._~-]{0,100}/)?[a-z0-9~][a-z0-9._~-]{0,213}"
NPM_PATH = re.compile(NPM_PART + r"(?:/node_modules/" + NPM_PART + r"){0,31}")


def npm_path(p):
    """Where p goes under node_modules: its planned path ("a",
    "a/node_modules/@s/b"), refused unless it is a chain of package names."""
    rel = p.get("path") or p["name"]
    if len(rel) > 1024 or not NPM_PATH.fullmatch(rel) or any(x in ("", ".", "..") for x in rel.split("/")):
        raise Failure("bad package path %r" % rel)
    return rel


def npm_top(rel):
    """The top-level entry of node_modules that holds rel."""
    parts = rel.split("/")
    return "/".join(parts[:2]) if parts[0].startswith("@") else parts[0]


def stage_npm(job, stage, timings):
    import base64
    t0 = time.monotonic()
    # Parents before the packages nested in them.
    todo = sorted(((npm_path(p), p) for p in job["packages"]), key=lambda x: (x[0].count("/node_modules/"), x[0]))
    # Fetched in parallel (a tree is many small files), unpacked in order.
    import encodings.idna  # noqa: F401 (imported before the threads, see stage_pip)
    import http.client  # noqa: F401
    import urllib.parse  # noqa: F401
    datas, errors = {}, []
    queue = list(range(len(todo)))

    def work():
        while True:
            try:
                k = queue.pop()
            except IndexError:
                return
            p = todo[k][1]
            if not SAFE_PATH.fullmatch(p["url_path"]):
                errors.append("bad mirror path for %s" % p["name"])
                return
            try:
                datas[k] = fetch(job["base_url"] + p["url_path"], p["size"])
            except BaseException as e:  # fetch's fail() too: reported below
                errors.append("%s: %s" % (p["name"], e))
                return
    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(8, len(todo)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("fetching from the mirror: %s" % errors[0])
    t1 = time.monotonic()
    names = []
    for k, (rel, p) in enumerate(todo):
        data = datas.pop(k)
        if hashlib.sha256(data).hexdigest() != p["sha256"]:
            fail("%s: sha256 mismatch" % p["name"])
        if p.get("integrity"):
            algo, _, want = p["integrity"].partition("-")
            if algo != "sha512" or base64.b64encode(hashlib.sha512(data).digest()).decode() != want:
                fail("%s: integrity mismatch" % p["name"])
        dest = os.path.join(stage, *rel.split("/"))
        if os.path.lexists(dest):
            fail("%s listed twice" % rel)
        os.makedirs(dest, 0o755)
        extract_npm(data, dest, job["limits"])
        top = npm_top(rel)
        if top not in names:
            names.append(top)
    timings["npm_download_ms"] = ms(t0, t1)
    timings["npm_unpack_ms"] = ms(t1, time.monotonic())
    return names


def start_copy(manager):
    """Makes the next generation folder and starts filling it with hard
    links to the current packages, in the background while the new ones
    are staged. Returns the folder and the copy (None: nothing to copy)."""
    live = LIVE[manager]
    gen = new_dir(manager + "-")
    cur = current_target(live)
    src = cur if cur else (live if os.path.isdir(live) and not os.path.islink(live) else None)
    if not src:
        return gen, None
    os.rmdir(gen)
    return gen, subprocess.Popen(["cp", "-a", "-l", "--", src, gen], stdin=subprocess.DEVNULL)


def commit(job, stage, entries, copy=None):
    live = LIVE[job["manager"]]
    gen, cp = copy or start_copy(job["manager"])
    if cp is not None and cp.wait() != 0:
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
        if DIE_AFTER_MOVE_ASIDE:
            os.kill(os.getpid(), 9)
    os.rename(link, live)


PLAIN_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,64}")
REPORT_VERSIONS = 64


def npm_installed(name):
    """The version of name in the session's node_modules, or None."""
    pj = os.path.join(LIVE["npm"], *name.split("/"), "package.json")
    try:
        fd = os.open(pj, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return json.loads(os.read(fd, 1 << 20)).get("version")
        finally:
            os.close(fd)
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return None


MAX_PIP_ENTRIES = 100000


def pip_installed():
    """Normalised name -> version of every distribution in the session's
    pip folder, from its NAME-VERSION.dist-info folders (at most
    MAX_PIP_ENTRIES entries are read)."""
    out = {}
    try:
        with os.scandir(LIVE["pip"]) as it:
            for n, e in enumerate(it):
                if n >= MAX_PIP_ENTRIES:
                    break
                if not e.name.endswith(".dist-info"):
                    continue
                name, _, version = e.name[:-len(".dist-info")].rpartition("-")
                if name and version:
                    out[norm(name)] = version
    except OSError:
        pass
    return out


def check_requires(job):
    """Stops (exit 4, nothing changed) when a dependency the request does
    not bring is not in the session at a version the catalog lists. The
    report is the first and only line of output and its size is bounded
    whatever the session holds: one mark per requirement in the job's order
    ("." present, "-" absent, "v" another version), and the versions found
    for the first REPORT_VERSIONS marked "v" whose version is plain. The
    host knows each requirement's name, range and mirror versions."""
    marks = []
    installed = {}
    pip_versions = pip_installed() if job["manager"] == "pip" else None
    for r in job.get("requires") or []:
        if pip_versions is not None:
            version = pip_versions.get(norm(r["name"]))
        else:
            version = npm_installed(r["name"])
        if isinstance(version, str) and version in r["versions"]:
            marks.append(".")
        elif isinstance(version, str):
            if len(installed) < REPORT_VERSIONS and PLAIN_VERSION.fullmatch(version):
                installed[str(len(marks))] = version
            marks.append("v")
        else:
            marks.append("-")
    if any(m != "." for m in marks):
        sys.stdout.write(json.dumps({"ok": False, "requires": "".join(marks), "installed": installed}) + "\n")
        sys.stdout.flush()
        sys.exit(4)


def check_isolated():
    """Refuses to go on when anything of the home could be imported, or
    bytecode written."""
    if not sys.flags.isolated or not sys.flags.dont_write_bytecode:
        fail("must run as python3 -I -B")
    home = os.path.realpath(HOME)
    for p in sys.path:
        rp = os.path.realpath(p or os.getcwd())
        if rp == home or rp.startswith(home + os.sep):
            fail("home on sys.path: %r" % p)


def ms(a, b):
    return int((b - a) * 1000)


def main():
    t0 = time.monotonic()
    check_isolated()
    job = json.load(open(sys.argv[1]))
    check_requires(job)
    os.umask(0o022)
    work = tempfile.mkdtemp(prefix="installer-", dir="/tmp")
    os.chdir(work)
    os.makedirs(STORE, 0o755, exist_ok=True)
    clean_leftovers()
    stage = new_dir("stage-")
    copy = start_copy(job["manager"])
    tp = time.monotonic()
    timings = {}
    try:
        if job["manager"] == "pip":
            entries = stage_pip(job, stage, work, timings)
        elif job["manager"] == "npm":
            entries = stage_npm(job, stage, timings)
        else:
            fail("unknown manager")
    except Failure as e:
        fail(str(e))
    t1 = time.monotonic()
    if DIE_BEFORE_COMMIT:
        os.kill(os.getpid(), 9)
    commit(job, stage, entries, copy)
    clean_leftovers()
    t2 = time.monotonic()
    out = {"ok": True, "entries": sorted(entries), "prepare_ms": ms(t0, tp), "fetch_ms": ms(tp, t1), "commit_ms": ms(t1, t2)}
    out.update(timings)
    print(json.dumps(out))
    # Done: everything is committed by renames. Skip tearing the
    # interpreter (and all of pip) down.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
