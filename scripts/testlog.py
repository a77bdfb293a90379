#!/usr/bin/env python3
"""Reads `go test -json` on stdin and prints what plain `go test` would:
the output of failed tests (with their subtests), of packages, and each
package's ok/FAIL line; a passing test's logs are dropped. With --times
FILE it also writes every top-level test's duration, slowest first, so a
run shows where its time went.

The exit status is go test's, not this script's: test.sh runs it under
`set -o pipefail`."""

import json
import sys


def main():
    times_path = None
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--times":
        times_path = args[1]
    elif args:
        sys.exit("usage: testlog.py [--times FILE]")

    held = {}  # (package, test) -> output lines of a test still running
    times = []  # (seconds, package, test)
    out = sys.stdout
    for line in sys.stdin:
        try:
            ev = json.loads(line)
        except ValueError:
            out.write(line)  # build errors and the like are not JSON
            out.flush()
            continue
        pkg, test, action = ev.get("Package", ""), ev.get("Test"), ev.get("Action")
        if test is None:
            if action == "output":
                out.write(ev.get("Output", ""))
                out.flush()
            continue
        # A subtest's lines belong to its top-level test: they are shown
        # when that test fails, as plain go test shows them.
        top = (pkg, test.split("/", 1)[0])
        if action == "output":
            held.setdefault(top, []).append(ev.get("Output", ""))
        elif action in ("pass", "fail", "skip") and "/" not in test:
            lines = held.pop(top, [])
            if action == "fail":
                out.write("".join(lines))
                out.flush()
            if action != "skip":
                times.append((ev.get("Elapsed", 0.0), pkg, test))
    # A test still running when the binary died (a panic, a timeout):
    # its lines are the evidence.
    for lines in held.values():
        out.write("".join(lines))
    out.flush()
    if times_path:
        times.sort(reverse=True)
        with open(times_path, "w") as f:
            for sec, pkg, test in times:
                f.write(f"{sec:9.1f}s  {pkg}  {test}\n")


if __name__ == "__main__":
    main()
