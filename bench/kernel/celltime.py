"""Times IPython cells with no sandboxapi in the way, two ways in one run:
through jupyter_client (an ipykernel process over ZeroMQ: `x + 1` executed
30 times, the p50 of the time from execute to the kernel's idle status,
and to its first iopub message), and IPython's interpreter called in
process (InteractiveShell.run_cell, what the kernel bridge does since
2026-12-02: the p50 of 30 cells).

Run it where the cost is to be seen (figures in the session note of
2026-12-02 came from these three):
  chroot:   mount -t proc proc $R/proc; cp celltime.py $R/tmp/;
            chroot $R /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp python3 /tmp/celltime.py
  gVisor:   runsc -platform=systrap -network=none do -- /usr/sbin/chroot $R \\
            /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp python3 - < celltime.py
  session:  this file's text as the code of an execute in a python3 session
            (timeout 60)
where R is the rootfs tree (/var/cache/sandboxapi/rootfs/<hash>/rootfs).
The difference to BenchmarkKernelCellVsProcess (executor) is what the
per-call path adds.
"""
import time, os, tempfile, sys
d = tempfile.mkdtemp()
os.environ["JUPYTER_RUNTIME_DIR"] = d
os.environ["IPYTHONDIR"] = d + "/ip"
from jupyter_client import KernelManager
t0 = time.time()
km = KernelManager(kernel_name="python3")
km.start_kernel(extra_arguments=["--HistoryManager.enabled=False", "--Completer.use_jedi=False", "--Kernel._execute_sleep=0"])
kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)
print("start", round(time.time() - t0, 3))
kc.execute("x = 1"); 
def cell(code):
    t = time.perf_counter()
    mid = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    first = None
    while True:
        m = kc.get_iopub_msg(timeout=5)
        if m["parent_header"].get("msg_id") != mid: continue
        if first is None: first = time.perf_counter() - t
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return time.perf_counter() - t, first
for _ in range(3): cell("x + 1")
ts = sorted(cell("x + 1") for _ in range(30))
print("cell p50 ms", round(ts[15][0] * 1000, 2), "first iopub ms", round(ts[15][1] * 1000, 2))
ta=[]
for _ in range(20):
    t=time.perf_counter(); km.is_alive(); ta.append(time.perf_counter()-t)
ta.sort(); print("is_alive p50 ms", round(ta[10]*1000,2))
tb=[]
for _ in range(20):
    t=time.perf_counter()
    try:
        kc.get_shell_msg(timeout=0)
    except Exception:
        pass
    tb.append(time.perf_counter()-t)
tb.sort(); print("get_shell_msg(0) p50 ms", round(tb[10]*1000,2))
km.shutdown_kernel(now=True)

kc.stop_channels(); km.shutdown_kernel(now=True)
import contextlib, io
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
sh.run_cell("x = 1")
with contextlib.redirect_stdout(io.StringIO()):
    for _ in range(3): sh.run_cell("x + 1")
    ts = []
    for _ in range(30):
        t = time.perf_counter(); sh.run_cell("x + 1"); ts.append(time.perf_counter() - t)
ts.sort()
print("in-process run_cell p50 ms", round(ts[15] * 1000, 2))
