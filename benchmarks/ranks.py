"""Merged analysis of multi-rank runs: time and peak memory against the number of ranks.

Synthetic synchronised jobs (tests/rank_runs.py: every rank's steps.bin simulated step by step, one
rank taking a generation-2 pause every 50 steps) of 10,000 steps on 8, 16 and 64 ranks. Each
analysis runs in a fresh process that reports its wall time, tracemalloc's peak (Python objects
and numpy buffers) and its peak RSS (and what the imports alone took).
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import json, sys, time, tracemalloc
from profiler.analysis.ranks import analyze_ranks

def high_water():   # VmHWM: peak RSS of this program (ru_maxrss would carry over the parent's from fork)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

base = high_water()
tracemalloc.start()
start = time.perf_counter()
a = analyze_ranks(sys.argv[1])
elapsed = time.perf_counter() - start
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"s": elapsed, "peak_bytes": peak, "rss_base_bytes": base, "rss_peak_bytes": high_water(),
                  "straggler": a.stragglers.rank if a.stragglers else None}))
"""
UNTRACED = """
import sys, time
from profiler.analysis.ranks import analyze_ranks
start = time.perf_counter(); analyze_ranks(sys.argv[1]); print(time.perf_counter() - start)
"""


def _measure(run_dir):
    root = Path(__file__).resolve().parent.parent
    traced = json.loads(subprocess.run([sys.executable, "-c", PROBE, str(run_dir)], cwd=root, check=True,
                                       capture_output=True, text=True).stdout)
    seconds = [float(subprocess.run([sys.executable, "-c", UNTRACED, str(run_dir)], cwd=root, check=True,
                                    capture_output=True, text=True).stdout) for _ in range(3)]
    return dict(traced, s=min(seconds))   # tracemalloc slows numpy's allocations: time untraced


def run(ranks=(8, 16, 64, 256), steps=10_000):
    from tests.rank_runs import synthetic_job
    rows = []
    for n in ranks:
        with tempfile.TemporaryDirectory() as tmp:
            synthetic_job(Path(tmp), n, steps, straggler=n // 2, every=50, pause_s=0.02)
            size = sum(f.stat().st_size for f in Path(tmp).rglob("*.bin"))
            rows.append(dict(_measure(tmp), ranks=n, steps=steps, bin_bytes=size, expected=n // 2))
    return rows


def markdown(rows):
    lines = ["Merged analysis (`profiler report` on a multi-rank directory: `analyze_ranks`) of synthetic jobs, "
             "each analysis in a fresh process (best of 3 for time; memory under tracemalloc, and the process's peak "
             f"RSS, of which the imports take {rows[0]['rss_base_bytes'] / 2**20:.0f} MiB). Steps are read in "
             "blocks of at most 262,144 values across ranks, so memory stops growing once a block is full (32 ranks of "
             "10,000 steps).", "",
             "| ranks x steps | steps.bin on disk | time | peak traced memory | peak RSS | straggler found |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        found = f"rank {r['straggler']}" if r["straggler"] == r["expected"] else f"WRONG: {r['straggler']}"
        lines.append(f"| {r['ranks']} x {r['steps']:,} | {r['bin_bytes'] / 2**20:.1f} MiB | {r['s']:.2f} s | "
                     f"{r['peak_bytes'] / 2**20:.1f} MiB | {r['rss_peak_bytes'] / 2**20:.0f} MiB | {found} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(run()))
