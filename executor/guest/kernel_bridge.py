# The kernel bridge: the guest (pid 1) starts it as the sandbox user in a
# kernel session (kernel.go). It starts one IPython kernel with
# jupyter_client (its connection on 127.0.0.1 inside the sandbox, its
# files in a private folder under /tmp), reads requests as JSON lines on
# stdin and writes what the cell produced as JSON lines on stdout:
#   in:  {"op": "execute", "code": "..."} | {"op": "interrupt"}
#   out: {"t": "ready", "pid": N} once a kernel is up (again),
#        {"t": "stream", "name": "stdout"|"stderr", "text": "..."},
#        {"t": "display", "type": "display_data"|"execute_result", "data": {...}},
#        {"t": "error", "name": "...", "value": "...", "traceback": [...]},
#        {"t": "done", "restarted": bool, "died": bool, "truncated": bool,
#         "output_limit": bool}
# A kernel found dead (before or during a cell) is replaced at once and
# the cell's "done" says restarted: the guest must never answer as if the
# lost variables were still there. argv[1] caps one message's size.
import json
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
# After an interrupt, the cell has this long to end before its kernel is
# replaced (code in C that never checks for signals ignores SIGINT).
INTERRUPT_GRACE = float(os.environ.get("SANDBOXAPI_KERNEL_GRACE", "3"))

# The protocol keeps private copies of stdin and stdout (not inherited:
# os.dup's are not), and fds 0 and 1 become /dev/null, so the kernel (which
# inherits them) and the user's code writing to fd 1 cannot corrupt or
# read the protocol. fd 2 stays: what reaches it is kept by the guest, a
# little, for a start failure's message.
proto_in = os.fdopen(os.dup(0), "r")
proto_out = os.fdopen(os.dup(1), "w")
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)
os.close(_null)

# One bridge runs at a time in a sandbox: the private folders of earlier
# ones (killed with their kernel, by a restart or the memory limit) go.
PREFIX = ".sbx-kernel-"
for old in os.listdir("/tmp"):
    if old.startswith(PREFIX):
        shutil.rmtree(os.path.join("/tmp", old), ignore_errors=True)
private = tempfile.mkdtemp(prefix=PREFIX, dir="/tmp")
# Nothing of the kernel's own bookkeeping lands in the session's home:
# connection files, IPython's profile and history live here.
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(private, "runtime")
os.environ["JUPYTER_DATA_DIR"] = os.path.join(private, "data")
os.environ["IPYTHONDIR"] = os.path.join(private, "ipython")
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")

from jupyter_client import KernelManager  # noqa: E402

out_lock = threading.Lock()


def emit(obj):
    line = json.dumps(obj, separators=(",", ":"), default=str)
    with out_lock:
        proto_out.write(line + "\n")
        proto_out.flush()


def capped(obj):
    """obj cut to LIMIT bytes: long texts are cut, values that do not fit
    are left out; says whether anything was cut."""
    size = len(json.dumps(obj, default=str))
    if size <= LIMIT:
        return obj, False
    if obj.get("t") == "stream":
        obj["text"] = obj["text"][: max(0, LIMIT - 256)]
        return obj, True
    if obj.get("t") == "display":
        data, room = {}, LIMIT - 256
        # The plain text first: it always has some room.
        for mime in sorted(obj["data"], key=lambda m: m != "text/plain"):
            v = obj["data"][mime]
            n = len(json.dumps(v, default=str))
            if n <= room:
                data[mime], room = v, room - n
            elif mime == "text/plain" and isinstance(v, str) and room > 0:
                data[mime], room = v[: room // 2], 0
        obj["data"] = data
        return obj, True
    if obj.get("t") == "error":
        obj["value"] = obj["value"][: LIMIT // 4]
        obj["traceback"] = [l[: LIMIT // 16] for l in obj["traceback"][-8:]]
        return obj, True
    return obj, True


class Kernel:
    def __init__(self):
        self.km = None
        self.kc = None
        self.pid = 0

    def start(self):
        self.km = KernelManager(kernel_name="python3")
        # No history database (it would be written per cell), no jedi, and
        # no pause after each cell (ipykernel sleeps 0.5 ms before its
        # reply, a scheduler round in gVisor): a kernel here serves one
        # session's cells, one at a time.
        self.km.start_kernel(extra_arguments=["--HistoryManager.enabled=False", "--Completer.use_jedi=False", "--Kernel._execute_sleep=0"])
        prov = getattr(self.km, "provisioner", None)
        proc = getattr(prov, "process", None) or getattr(self.km, "kernel", None)
        self.pid = getattr(proc, "pid", 0) or 0
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        emit({"t": "ready", "pid": self.pid})

    def alive(self):
        try:
            return self.km is not None and self.km.is_alive()
        except Exception:
            return False

    def stop(self):
        try:
            if self.kc is not None:
                self.kc.stop_channels()
        except Exception:
            pass
        if self.pid:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except Exception:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except Exception:
                    pass
        try:
            if self.km is not None:
                self.km.shutdown_kernel(now=True)
        except Exception:
            pass
        self.km, self.kc, self.pid = None, None, 0

    def restart(self):
        self.stop()
        self.start()

    def interrupt(self):
        # SIGINT to the kernel alone: a KeyboardInterrupt in the cell.
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGINT)
            except Exception:
                pass


kernel = Kernel()
requests = queue.Queue()
interrupted = threading.Event()


def read_stdin():
    for line in proto_in:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("op") == "interrupt":
            interrupted.set()
            kernel.interrupt()
        else:
            requests.put(req)
    requests.put(None)


def drain_shell():
    try:
        while True:
            kernel.kc.get_shell_msg(timeout=0)
    except Exception:
        pass


def run_cell(code):
    restarted, truncated, over = False, False, False
    if not kernel.alive():
        kernel.restart()
        restarted = True
    interrupted.clear()
    msg_id = kernel.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    interrupted_at = None
    while True:
        if interrupted.is_set() and interrupted_at is None:
            interrupted_at = time.monotonic()
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            if not kernel.alive():
                kernel.restart()
                return True, truncated, True, over
            if interrupted_at is not None and time.monotonic() - interrupted_at > INTERRUPT_GRACE:
                # The cell ignores the interrupt: its kernel goes.
                kernel.restart()
                return True, truncated, True, over
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        out = None
        if kind == "stream":
            out = {"t": "stream", "name": content.get("name", "stdout"), "text": content.get("text", "")}
        elif kind in ("display_data", "execute_result", "update_display_data"):
            out = {"t": "display", "type": "execute_result" if kind == "execute_result" else "display_data",
                   "data": content.get("data", {})}
        elif kind == "error":
            out = {"t": "error", "name": content.get("ename", ""), "value": content.get("evalue", ""),
                   "traceback": content.get("traceback", [])}
        elif kind == "status" and content.get("execution_state") == "idle":
            drain_shell()
            return restarted, truncated, False, over
        if out is not None:
            out, cut = capped(out)
            truncated = truncated or cut
            if cut and out["t"] == "stream" and not over:
                # One message of output past the cap: the cell has printed
                # too much, and stops as a run over its output cap does.
                over = True
                interrupted.set()
                kernel.interrupt()
            emit(out)


def main():
    threading.Thread(target=read_stdin, daemon=True).start()
    try:
        kernel.start()
        while True:
            req = requests.get()
            if req is None:
                break
            if req.get("op") != "execute":
                continue
            restarted, truncated, died, over = run_cell(req.get("code", ""))
            emit({"t": "done", "restarted": restarted, "died": died, "truncated": truncated, "output_limit": over})
    finally:
        kernel.stop()
        shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    main()
