"""Honest statistics, measured: how often the slowdown test (profiler.analysis.stats.change) calls
a stationary run slower (false alarms) and how often it catches a real slowdown (detection), on
seeded simulated runs; and how long analysis of a million steps takes, and the memory it adds.

Stationary runs: 10 ms epochs with heavy-tailed jitter (exp(0.03 t3)), one-off outliers (3% of
epochs, 1.5-4x) and level switches that revert (Poisson(2) episodes of 3-20 epochs at 1.2-1.5x,
each over before the run's last 5 epochs). Slowdown runs: the same noise times a ramp to +15% at
the end of the run.
"""

import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from profiler.analysis import stats


def stationary(rng, n, base=0.010):
    y = base * np.exp(0.03 * rng.standard_t(3, n))
    out = rng.random(n) < 0.03
    y[out] *= rng.uniform(1.5, 4, out.sum())
    for _ in range(rng.poisson(2)):
        length = int(rng.integers(3, 21))
        start = int(rng.integers(0, max(n - length - 5, 1)))
        y[start:start + length] *= rng.uniform(1.2, 1.5)
    return y


def slowdown(rng, n, growth=0.15):
    """Stationary noise times a ramp to 1 + growth at the last epoch (negative: a speed-up)."""
    return stationary(rng, n) * (1 + growth * np.arange(n) / (n - 1))


def rates(runs=1000, n=150, seed=0):
    """Shares of `runs` seeded runs of `n` epochs: stationary runs called slower ("false_slower")
    or faster ("false_faster"); runs slowing 15% called slower ("detected") and how many of those
    intervals hold the true +15% ("covered"); runs speeding up 15% called faster ("faster")."""
    rng = np.random.default_rng(seed)
    x = np.arange(n)
    out = dict.fromkeys(("false_slower", "false_faster", "detected", "covered", "faster"), 0.0)
    for _ in range(runs):
        c = stats.change(x, stationary(rng, n))
        out["false_slower"] += c.sustained and c.relative > 0
        out["false_faster"] += c.sustained and c.relative < 0
        c = stats.change(x, slowdown(rng, n))
        if c.sustained and c.relative > 0:
            out["detected"] += 1
            out["covered"] += c.relative_low <= 0.15 <= c.relative_high
        c = stats.change(x, slowdown(rng, n, -0.15))
        out["faster"] += c.sustained and c.relative < 0
    out["covered"] /= max(out["detected"], 1)
    return {k: (v if k == "covered" else v / runs) for k, v in out.items()}


def analysis_speed(steps=1_000_000, steps_per_epoch=1000):
    """Seconds to analyze a run of `steps` steps, and the peak of the memory analysis allocates
    while it runs (MiB; numpy and Python allocations, traced by tracemalloc in a second pass; the
    memory-mapped steps.bin pages are the file's, not counted)."""
    from profiler.analysis import analyze
    from tests.fixtures import epoch, step_records, write_run
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        epochs = steps // steps_per_epoch
        wall = rng.lognormal(np.log(0.005), 0.1, steps)
        gc2 = np.where(rng.random(steps) < 0.01, 0.05, 0.0)
        wall += gc2
        start = np.concatenate([[0.0], np.cumsum(wall[:-1])])
        records = step_records(np.arange(steps) // steps_per_epoch, start, wall, (0 * gc2, 0 * gc2, gc2))
        by_epoch = wall.reshape(epochs, -1).sum(axis=1)
        gc_by_epoch = gc2.reshape(epochs, -1).sum(axis=1)
        run = write_run(Path(tmp) / "run", [epoch(e, float(by_epoch[e]), pause=(0.0, 0.0, float(gc_by_epoch[e])),
                                                  start_s=float(start[e * steps_per_epoch])) for e in range(epochs)])
        records.tofile(run / "steps.bin")
        del records, wall, gc2, start
        t = time.perf_counter()
        d = analyze(run)
        seconds = time.perf_counter() - t
        assert d.steps.count > 0.9 * steps
        tracemalloc.start()
        analyze(run)
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
        tracemalloc.stop()
    return seconds, peak


def run(runs=1000, steps=1_000_000):
    seconds, peak = analysis_speed(steps)
    large_seconds, large_peak = analysis_speed(steps * 4)
    return {"runs": runs, **rates(runs), "steps": steps, "seconds": seconds, "peak_mib": peak,
            "large_seconds": large_seconds, "large_peak_mib": large_peak}


def markdown(r):
    return "\n".join([
        "| measure | result | target |", "|---|---:|---:|",
        f"| false alarms: stationary runs of 150 epochs called slower (jitter, outliers, reverting level switches), "
        f"{r['runs']:,} seeded runs | {100 * r['false_slower']:.1f}% | <= 1% |",
        f"| stationary runs called faster | {100 * r['false_faster']:.1f}% | |",
        f"| detection: runs slowing down 15% over 150 epochs (same noise) called slower | {100 * r['detected']:.1f}% "
        f"| >= 95% |",
        f"| detected slowdowns whose stated 95% interval holds the true +15% | {100 * r['covered']:.0f}% | |",
        f"| runs speeding up 15% over 150 epochs called faster | {100 * r['faster']:.1f}% | |",
        f"| `analyze` of a run with {r['steps']:,} steps (steps.bin) | {r['seconds']:.2f} s | <= 5 s |",
        f"| `analyze` of a run with {4 * r['steps']:,} steps | {r['large_seconds']:.2f} s | |",
        f"| peak memory analysis allocates (tracemalloc; steps.bin is memory-mapped, read in chunks of 2^18 "
        f"steps): {r['steps']:,} / {4 * r['steps']:,} steps | {r['peak_mib']:.0f} / {r['large_peak_mib']:.0f} MiB "
        f"| constant in the step count |",
    ])


if __name__ == "__main__":
    print(markdown(run()))
