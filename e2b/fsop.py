# The E2B adapter's file operations (stat, make dir, move, remove, list
# with depth), run inside a session's sandbox as its user through
# POST /v1/sessions/{id}/execute: the sandbox's kernel applies the user's
# permissions and resolves every path and symlink itself; the host never
# touches one. Arguments come as JSON in SBX_E2B_FS (never in the code);
# the answer is one JSON line on stdout.
import grp
import json
import os
import pwd
import shutil
import stat
import sys

MAX_ENTRIES = 10000
# The answer must fit the server's output limit (max_output_bytes, 1 MiB
# by default): a listing stops short of it with a clear refusal.
MAX_ANSWER_BYTES = 900 * 1024


def name_of(getter, n):
    try:
        return getter(n)[0]
    except (KeyError, OverflowError):
        return str(n)


def entry(p, st=None):
    st = st if st is not None else os.lstat(p)
    m = st.st_mode
    if stat.S_ISDIR(m):
        t = "dir"
    elif stat.S_ISREG(m):
        t = "file"
    elif stat.S_ISLNK(m):
        t = "symlink"
    else:
        t = "other"
    e = {
        "name": os.path.basename(p),
        "type": t,
        "path": p,
        "size": st.st_size,
        "mode": stat.S_IMODE(m),
        "perm": stat.filemode(m),
        "owner": name_of(pwd.getpwuid, st.st_uid),
        "group": name_of(grp.getgrgid, st.st_gid),
        "mtime_ns": st.st_mtime_ns,
    }
    if t == "symlink":
        e["target"] = os.readlink(p)
    return e


class Refused(Exception):
    def __init__(self, kind, msg):
        super().__init__(msg)
        self.kind = kind


def listing(root, depth):
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused("not_dir", root + " is not a directory")
    out = []
    size = 0
    level = [root]
    for _ in range(depth):
        nxt = []
        for d in level:
            with os.scandir(d) as it:
                for de in sorted(it, key=lambda x: x.name):
                    if len(out) >= MAX_ENTRIES:
                        raise Refused("too_many", "the listing holds more than %d entries" % MAX_ENTRIES)
                    e = entry(de.path, de.stat(follow_symlinks=False))
                    size += len(json.dumps(e)) + 2
                    if size > MAX_ANSWER_BYTES:
                        raise Refused("too_many", "the listing is over %d KiB: list a smaller folder or depth" % (MAX_ANSWER_BYTES // 1024))
                    out.append(e)
                    if e["type"] == "dir":
                        nxt.append(de.path)
        level = nxt
    return out


def run(a):
    op, p = a["op"], a["path"]
    if op == "stat":
        return {"entry": entry(p)}
    if op == "mkdir":
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            os.makedirs(p)
            return {"entry": entry(p)}
        if stat.S_ISDIR(st.st_mode):
            raise Refused("exists", p + " exists already")
        raise Refused("not_dir", p + " exists and is not a directory")
    if op == "move":
        os.lstat(p)
        dst = a["dest"]
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(p, dst)
        return {"entry": entry(dst)}
    if op == "remove":
        st = os.lstat(p)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(p)
        else:
            os.remove(p)
        return {}
    if op == "list":
        return {"entries": listing(p, a["depth"])}
    raise Refused("invalid", "unknown operation")


def main():
    try:
        out = run(json.loads(os.environ["SBX_E2B_FS"]))
    except Refused as e:
        out = {"err": e.kind, "msg": str(e)}
    except FileNotFoundError as e:
        out = {"err": "not_found", "msg": "%s: no such file or directory" % (e.filename or "")}
    except FileExistsError as e:
        out = {"err": "exists", "msg": "%s exists already" % (e.filename or "")}
    except NotADirectoryError as e:
        out = {"err": "not_dir", "msg": "%s: not a directory" % (e.filename or "")}
    except PermissionError as e:
        out = {"err": "permission", "msg": "%s: permission denied" % (e.filename or "")}
    except OSError as e:
        out = {"err": "io", "msg": "%s: %s" % (e.filename or "", e.strerror)}
    sys.stdout.write(json.dumps(out))


main()
