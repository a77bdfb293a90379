# The kernel bridge: the guest (pid 1) starts it as the sandbox user in a
# kernel session (kernel.go). It is the kernel: one IPython interpreter
# (IPython's InteractiveShell, the interpreter ipykernel runs, with the
# same display formatters, display hook, tracebacks and matplotlib inline
# backend) that runs each cell in this process's main thread. It reads
# requests as JSON lines on stdin and writes what a cell produced as JSON
# lines on stdout:
#   in:  {"op": "execute", "code": "..."} | {"op": "interrupt"}
#   out: {"t": "ready", "pid": N} once the interpreter is up,
#        {"t": "stream", "name": "stdout"|"stderr", "text": "..."},
#        {"t": "display", "type": "display_data"|"execute_result", "data": {...}},
#        {"t": "error", "name": "...", "value": "...", "traceback": [...]},
#        {"t": "done", "restarted": false, "died": false, "truncated": bool,
#         "output_limit": bool}
# Why not ipykernel's own ZMQ kernel (it ran here before): in gVisor every
# cell's six ZMQ messages cross four threads and two processes each, and
# a cell of `x + 1` took 30 to 90 ms, against under 1 ms for the same
# interpreter called directly (bench/kernel/celltime.py times both).
# A kernel that dies (os._exit, the memory limit, an interrupt ignored
# past its grace) takes this process with it; the guest sees its output
# end and starts a fresh one, saying so in the next reply. argv[1] caps
# one message's size.
import builtins
import codecs
import fcntl
import io
import json
import os
import queue
import select
import shutil
import signal
import sys
import tempfile
import threading
import time

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
# After an interrupt, the cell has this long to end before the kernel is
# ended (code in C that never checks for signals ignores SIGINT).
INTERRUPT_GRACE = float(os.environ.get("SANDBOXAPI_KERNEL_GRACE", "3"))
# Stream output is sent at most this long after it was written (or at
# once past FLUSH_BYTES), so a long cell's prints arrive as it runs.
FLUSH_EVERY = 0.05
FLUSH_BYTES = 64 << 10

# The protocol keeps private copies of stdin and stdout, and fd 0 becomes
# /dev/null, so the user's code cannot read or corrupt the protocol. fds 1
# and 2 become pipes this process reads (below): what programs the cell
# starts, and C code, print there reaches the cell's output, as in
# ipykernel. fd 2 stays the guest's until the interpreter is up: a start
# failure's message goes there.
proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="replace")
proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace")
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.close(_null)


def capture_fd(fd):
    r, w = os.pipe()
    os.dup2(w, fd)
    os.close(w)
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_NONBLOCK)
    return r


fd_out = capture_fd(1)

# One bridge runs at a time in a sandbox: the private folders of earlier
# ones (killed by a restart or the memory limit) go.
PREFIX = ".sbx-kernel-"
for old in os.listdir("/tmp"):
    if old.startswith(PREFIX):
        shutil.rmtree(os.path.join("/tmp", old), ignore_errors=True)
private = tempfile.mkdtemp(prefix=PREFIX, dir="/tmp")
# Nothing of the interpreter's own bookkeeping lands in the session's
# home: IPython's profile lives here, and no history is kept.
os.environ["IPYTHONDIR"] = os.path.join(private, "ipython")
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")

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


class Cell:
    """The state of the cell running (if any), shared with the threads
    that interrupt it or send its output."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = False
        self.number = 0
        self.truncated = False
        self.over = False
        self.interrupted = False

    def begin(self):
        with self.lock:
            self.number += 1
            self.running, self.truncated, self.over, self.interrupted = True, False, False, False

    def end(self):
        with self.lock:
            self.running = False

    def interrupt(self):
        """KeyboardInterrupt in the running cell, and its kernel ended if
        the cell is still running INTERRUPT_GRACE later."""
        with self.lock:
            if not self.running or self.interrupted:
                return
            self.interrupted = True
            number = self.number
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        def grace():
            with self.lock:
                if self.running and self.number == number:
                    os.kill(os.getpid(), signal.SIGKILL)

        t = threading.Timer(INTERRUPT_GRACE, grace)
        t.daemon = True
        t.start()


cell = Cell()


def on_sigint(signum, frame):
    # Only a running cell is interrupted: a late signal between cells
    # must not break the bridge's own loop.
    if cell.running:
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, on_sigint)


def send(obj):
    """Sends one message of the cell's, capped; stream output over the cap
    interrupts the cell, as a run over its output cap is stopped."""
    obj, cut = capped(obj)
    if cut:
        cell.truncated = True
    # Sent before the interrupt: in the main thread, the KeyboardInterrupt
    # comes at once and would lose the message.
    emit(obj)
    if cut and obj["t"] == "stream" and not cell.over:
        cell.over = True
        cell.interrupt()


class Output:
    """Stream output of the cell, from sys.stdout/sys.stderr and from fds
    1 and 2, merged in order and sent in batches."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = []  # [name, text]
        self.size = 0
        self.since = 0.0
        self.wake_r, self.wake_w = os.pipe()
        self.fds = {}  # read end -> (name, decoder)
        self.fd_lock = threading.Lock()

    def watch(self, fd, name):
        self.fds[fd] = (name, codecs.getincrementaldecoder("utf-8")("replace"))

    def write(self, name, text):
        if not text:
            return
        with self.lock:
            first = not self.pending
            if self.pending and self.pending[-1][0] == name:
                self.pending[-1][1] += text
            else:
                self.pending.append([name, text])
            self.size += len(text)
            if first:
                self.since = time.monotonic()
            full = self.size >= FLUSH_BYTES
        if full:
            self.flush()
        elif first:
            os.write(self.wake_w, b"w")

    def flush(self):
        with self.lock:
            pending, self.pending, self.size = self.pending, [], 0
            # Sent under the lock: two flushes never reorder output.
            for name, text in pending:
                send({"t": "stream", "name": name, "text": text})

    def drain(self):
        """Reads whatever fds 1 and 2 hold now."""
        with self.fd_lock:
            for fd in self.fds:
                self.read_fd(fd)

    def read_fd(self, fd):
        name, dec = self.fds[fd]
        while True:
            try:
                b = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not b:
                return
            self.write(name, dec.decode(b))

    def pump(self):
        """Reads fds 1 and 2 as data comes and sends what waits once it is
        FLUSH_EVERY old; sleeps without a timeout when nothing waits."""
        while True:
            with self.lock:
                wait = None
                if self.pending:
                    wait = max(0.0, FLUSH_EVERY - (time.monotonic() - self.since))
            if wait == 0.0:
                self.flush()
                continue
            ready, _, _ = select.select(list(self.fds) + [self.wake_r], [], [], wait)
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            with self.fd_lock:
                for fd in ready:
                    if fd in self.fds:
                        self.read_fd(fd)


output = Output()
output.watch(fd_out, "stdout")


class Stream(io.TextIOBase):
    """sys.stdout and sys.stderr of the cell's code."""

    def __init__(self, name, fd):
        self.name_, self.fd = name, fd

    @property
    def name(self):
        return "<" + self.name_ + ">"

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self.fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        output.write(self.name_, s)
        return len(s)

    def flush(self):
        output.flush()


def no_input(*args, **kwargs):
    from IPython.core.error import StdinNotImplementedError

    raise StdinNotImplementedError("input() was called, but a kernel cell reads no stdin")


def make_shell():
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            output.flush()
            send({"t": "display", "type": "display_data", "data": data})

        def clear_output(self, wait=False):
            pass  # a reply's outputs are a list: nothing is taken back

    class Hook(DisplayHook):
        def start_displayhook(self):
            pass

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            output.flush()
            send({"t": "display", "type": "execute_result", "data": format_dict})

        def finish_displayhook(self):
            pass

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb):
            output.flush()
            name = getattr(etype, "__name__", str(etype))
            send({"t": "error", "name": name, "value": str(evalue), "traceback": list(stb)})

        def enable_gui(self, gui=None):
            pass

        def ask_exit(self):
            # exit() or quit(): as in Jupyter, the kernel ends after this
            # cell, and the next one finds a fresh kernel (and says so).
            self.exit_now = True

    cfg = Config()
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "NoColor"
    cfg.InteractiveShell.autoindent = False
    cfg.Completer.use_jedi = False
    return Shell.instance(config=cfg)


requests = queue.Queue()


def read_stdin():
    for line in proto_in:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("op") == "interrupt":
            cell.interrupt()
        else:
            requests.put(req)
    requests.put(None)


def run_cell(shell, code):
    cell.begin()
    try:
        shell.run_cell(code, store_history=True)
    except KeyboardInterrupt:
        # Landed outside the user's code, in the interpreter's own steps.
        output.flush()
        send({"t": "error", "name": "KeyboardInterrupt", "value": "", "traceback": ["KeyboardInterrupt"]})
    finally:
        cell.end()
    sys.stdout.flush()
    sys.stderr.flush()
    output.drain()
    output.flush()


def main():
    shell = make_shell()
    # From here the interpreter is up: fd 2 joins the cell's output.
    fd_err = capture_fd(2)
    output.watch(fd_err, "stderr")
    sys.stdout, sys.stderr = Stream("stdout", 1), Stream("stderr", 2)
    builtins.input = no_input
    threading.Thread(target=output.pump, daemon=True).start()
    threading.Thread(target=read_stdin, daemon=True).start()
    emit({"t": "ready", "pid": os.getpid()})
    try:
        while True:
            try:
                req = requests.get()
            except KeyboardInterrupt:
                continue
            if req is None:
                break
            if req.get("op") != "execute":
                continue
            run_cell(shell, req.get("code", ""))
            emit({"t": "done", "restarted": False, "died": False, "truncated": cell.truncated, "output_limit": cell.over})
            if shell.exit_now:
                break
    finally:
        shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    main()
