"""The Axon report on our engine: does epoch time drift with the epoch index, or depend on max_epochs?

This machine switches between ~8 and ~12 ms per mlp epoch for seconds at a time, whatever the
run: a median of 100 epochs moved 1.57x between the start and end of one 10,000-epoch run with
nothing in it that drifts. So besides the issue's own measure (median of the first and last 100
epochs) the long run is also compared over 1,000 epochs at each end by their 10th percentile, and
the max_epochs runs by each run's 10th percentile: a real drift, like the Axon report's full collections
walking a growing heap, slows every epoch, the fastest included.
"""

import gc

import numpy as np

from profiler.workloads import scenarios
from profiler.workloads.engine import Events, Loop


def _fast(times):
    return float(np.percentile(times, 10))


def _times(max_epochs, halt=None, history="append", gc_collect="never"):
    sc = scenarios.build("mlp")
    loop = Loop(sc.model, sc.optimizer, sc.data, max_epochs=max_epochs, history=history, gc_collect=gc_collect)
    if halt:
        loop.on(Events.EPOCH_STARTED, lambda s: s.halt(), when=lambda s: s.epoch >= halt)
    times = loop.run().times
    del loop, sc
    gc.collect()
    return np.array(times)


def run(long_epochs=10_000, halt=100, big=100_000, rounds=7):
    long = _times(long_epochs)
    rows = []
    for name, measure, span in (("median", np.median, 100), ("10th percentile", _fast, long_epochs // 10)):
        first, last = measure(long[10:10 + span]), measure(long[-span:])
        case = f"append, {long_epochs:,} epochs: last {span:,} / first {span:,} (after 10 warm-up), {name}"
        rows.append({"case": case, "a_ms": first * 1e3, "b_ms": last * 1e3, "ratio": last / first})
    for history, gc_collect in (("append", "never"), ("append", "epoch"), ("preallocated", "epoch")):
        small, large = [], []
        for _ in range(rounds):   # alternate, so drift of the machine hits both alike
            small.append(_fast(_times(halt, halt, history, gc_collect)[10:]))
            large.append(_fast(_times(big, halt, history, gc_collect)[10:]))
        rows.append({"case": f"{history}, gc_collect={gc_collect}: halt after {halt}, max_epochs {halt} vs {big:,} "
                             f"(10th percentile, median of {rounds} alternating rounds)",
                     "a_ms": np.median(small) * 1e3, "b_ms": np.median(large) * 1e3,
                     "ratio": float(np.median(np.array(large) / np.array(small)))})
    return rows


def markdown(rows):
    out = ["| case | A ms/epoch | B ms/epoch | B/A |", "|---|---:|---:|---:|"]
    out += [f"| {r['case']} | {r['a_ms']:.2f} | {r['b_ms']:.2f} | {r['ratio']:.3f} |" for r in rows]
    return "\n".join(out)
