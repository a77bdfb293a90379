"""Reads compare.sh's results: per language and mode, the medians over the
rounds of the old and new p50 and of the per-round ratio new/old. The old
revision's figures may name a language without its version (before the
runtimes file had versions); the new ones are matched on each language's
default version."""
import collections
import glob
import os
import re
import statistics
import sys

out_dir, runtimes = sys.argv[1], sys.argv[2]

defaults, lang = {}, None
for line in open(runtimes):
    m = re.match(r"^  (\w+):\s*$", line)
    if m:
        lang = m.group(1)
    m = re.match(r'^\s+- version: "([^"]+)"', line)
    if m and lang:
        last = m.group(1)
    if "default: true" in line and lang:
        defaults[lang] = last

figures = collections.defaultdict(dict)  # (round, side) -> metric -> ms
for path in glob.glob(os.path.join(out_dir, "r*-*.txt")):
    rnd, side = re.search(r"r(\d+)-(old|new)\.txt$", path).groups()
    for line in open(path):
        if line.startswith("BenchmarkLanguages"):
            for value, name in re.findall(r"([\d.]+) (\S+)-p50-ms", line):
                figures[(int(rnd), side)][name] = float(value)

rounds = sorted({r for r, _ in figures if (r, "old") in figures and (r, "new") in figures})
print(f"{len(rounds)} rounds; p50 in ms; ratio = new/old (median of the per-round ratios)")
print(f"{'language':<12} {'mode':<10} {'old':>8} {'new':>8} {'ratio':>6}  per round")
for lang, ver in defaults.items():
    for mode in ("stateless", "session"):
        olds, news, ratios = [], [], []
        for r in rounds:
            o = figures[(r, "old")].get(f"{lang}-{mode}") or figures[(r, "old")].get(f"{lang}-{ver}-{mode}")
            n = figures[(r, "new")].get(f"{lang}-{ver}-{mode}") or figures[(r, "new")].get(f"{lang}-{mode}")
            if o and n:
                olds.append(o)
                news.append(n)
                ratios.append(n / o)
        if ratios:
            print(f"{lang:<12} {mode:<10} {statistics.median(olds):8.1f} {statistics.median(news):8.1f} "
                  f"{statistics.median(ratios):6.2f}  {' '.join(f'{x:.2f}' for x in ratios)}")
