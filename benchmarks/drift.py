"""Seed 1 on our engine: does epoch time drift with the epoch index, or depend on max_epochs?"""

import gc

import numpy as np

from profiler import scenarios
from profiler.engine import Events, Loop


def _times(max_epochs, halt=None, history="append", gc_collect="never"):
    sc = scenarios.build("mlp")
    loop = Loop(sc.model, sc.optimizer, sc.data, max_epochs=max_epochs, history=history, gc_collect=gc_collect)
    if halt:
        loop.on(Events.EPOCH_STARTED, lambda s: s.halt(), when=lambda s: s.epoch >= halt)
    times = loop.run().times
    del loop, sc
    gc.collect()
    return np.array(times)


def run(long_epochs=10_000, halt=100, big=100_000, rounds=3):
    long = _times(long_epochs)
    first, last = np.median(long[10:110]), np.median(long[-100:])
    rows = [{"case": f"append, {long_epochs:,} epochs: last 100 / first 100 (after 10 warm-up)",
             "a_ms": first * 1e3, "b_ms": last * 1e3, "ratio": last / first}]
    for history, gc_collect in (("append", "never"), ("append", "epoch"), ("preallocated", "epoch")):
        small, large = [], []
        for _ in range(rounds):   # alternate, so drift of the machine hits both alike
            small.append(np.median(_times(halt, halt, history, gc_collect)[10:]))
            large.append(np.median(_times(big, halt, history, gc_collect)[10:]))
        rows.append({"case": f"{history}, gc_collect={gc_collect}: halt after {halt}, max_epochs {halt} vs {big:,} "
                             f"(median of {rounds} alternating rounds)",
                     "a_ms": np.median(small) * 1e3, "b_ms": np.median(large) * 1e3,
                     "ratio": float(np.median(np.array(large) / np.array(small)))})
    return rows


def markdown(rows):
    out = ["| case | A ms/epoch | B ms/epoch | B/A |", "|---|---:|---:|---:|"]
    out += [f"| {r['case']} | {r['a_ms']:.2f} | {r['b_ms']:.2f} | {r['ratio']:.3f} |" for r in rows]
    return "\n".join(out)
