"""Spikes: steps (or epochs) far above the median, the run time in their excess, and how much of
that excess the GC pauses inside them explain.

A spike lasts over 1.5x the median and either passes the far-out fence (Q3 + 3 IQR) or holds a GC
pause of at least half the median: pauses frequent enough to widen the spread (a full collection
every third epoch) would hide behind the fence alone.

Steps are read from the memory-mapped steps.bin in chunks, twice (quantiles, then spikes), so any
number of steps is analysed in constant memory.
"""

from dataclasses import dataclass

import numpy as np

from . import stats

CHUNK = 1 << 18
SPIKE_OVER_MEDIAN = 1.5   # a spike lasts at least 1.5x the median, and either passes the far-out
FENCE_IQRS = 3.0          # fence (Q3 + 3 IQR: far above the run's own spread) or holds a GC pause
GC_OVER_MEDIAN = 0.5      # of at least half the median (frequent pauses widen the spread they hide in)


@dataclass
class Spikes:
    unit: str                       # "step" or "epoch"
    count: int                      # spikes
    count_by_generation: list       # spikes by the generation of their longest GC pause
    total: int                      # items looked at
    median_s: float
    p99_s: float
    threshold_s: float              # the far-out fence (items above it are spikes with or without GC)
    max_s: float
    wall_s: float                   # total time of all items
    gc_s: float                     # total GC pause of all items
    gc_by_generation_s: list        # [g0, g1, g2] of all items
    excess_s: float                 # time in spikes above the median
    time_fraction: float            # excess_s / wall_s
    spike_gc_s: float               # GC pause inside the spikes
    spike_gc_by_generation_s: list  # [g0, g1, g2] inside the spikes
    gc_explained_fraction: float    # share of the excess that GC pauses inside the spikes explain
    generation: int                 # the generation with the most pause inside the spikes


def find(chunks, unit, totals=None):
    """Spikes over `chunks()`, a function returning an iterator of (wall, gc0, gc1, gc2) arrays.
    `totals` (wall seconds, [g0, g1, g2] pause seconds) is the run's time when the items do not
    cover all of it (steps leave out the time between them); fractions are of that time."""
    quantiles = stats.Quantiles()
    wall_s, gc = 0.0, np.zeros(3)
    for chunk in chunks():   # the records' times are checked as the run is read (read_run)
        quantiles.add(chunk[0])
        wall_s += float(chunk[0].sum())
        gc += [float(g.sum()) for g in chunk[1:]]
    if totals is not None:
        wall_s, gc = totals[0], np.asarray(totals[1], float)
    median, p99 = quantiles.quantile(0.5), quantiles.quantile(0.99)
    q1, q3 = quantiles.quantile(0.25), quantiles.quantile(0.75)
    floor = SPIKE_OVER_MEDIAN * median
    threshold = max(floor, q3 + FENCE_IQRS * (q3 - q1))
    count, excess, max_s, spike_gc, by_generation = 0, 0.0, 0.0, np.zeros(3), np.zeros(3, np.int64)
    for wall, *gens in chunks():
        spike = (wall > threshold) | ((wall > floor) & (gens[0] + gens[1] + gens[2] >= GC_OVER_MEDIAN * median))
        if len(wall):
            max_s = max(max_s, float(wall.max()))
        if spike.any():
            count += int(spike.sum())
            excess += float((wall[spike] - median).sum())
            spike_gc += [float(g[spike].sum()) for g in gens]
            paused = np.stack([g[spike] for g in gens])
            by_generation += np.bincount(paused.argmax(axis=0)[paused.max(axis=0) > 0], minlength=3)
    explained = min(float(spike_gc.sum()), excess) / excess if excess > 0 else 0.0
    return Spikes(unit=unit, count=count, count_by_generation=by_generation.tolist(), total=quantiles.n, median_s=median, p99_s=p99, threshold_s=threshold,
                  max_s=max_s, wall_s=wall_s, gc_s=float(gc.sum()), gc_by_generation_s=gc.tolist(), excess_s=excess,
                  time_fraction=excess / wall_s if wall_s > 0 else 0.0, spike_gc_s=float(spike_gc.sum()),
                  spike_gc_by_generation_s=spike_gc.tolist(), gc_explained_fraction=explained,
                  generation=int(np.argmax(spike_gc)) if spike_gc.any() else 2)


def of_steps(steps, first_epoch, totals, left_out=()):
    """Spikes among the steps of a run (Run.steps(): sliced a chunk at a time) from
    `first_epoch` on (the warm-up left out), but those of the epochs in `left_out`."""
    def chunks():
        for a in range(0, len(steps), CHUNK):
            block = steps[a:a + CHUNK]
            kept = (block["epoch"] >= first_epoch) & ~np.isin(block["epoch"], left_out)
            block = block[kept]
            yield tuple(np.asarray(block[field], float) for field in ("wall_s", "gc0_s", "gc1_s", "gc2_s"))
    return find(chunks, "step", totals)


def of_epochs(records):
    """Spikes among epoch records."""
    wall, gens = epoch_arrays(records)
    return find(lambda: iter([(wall, gens[:, 0], gens[:, 1], gens[:, 2])]), "epoch")


def epoch_arrays(records):
    """Wall seconds and GC pause seconds by generation (n x 3) of epoch records."""
    return (np.array([r["wall_s"] for r in records], float),
            np.array([r["gc"]["pause_s"] for r in records], float).reshape(-1, 3))
