"""Series of a run for plotting, reduced to at most `max_points` bins (long runs are reduced, never
truncated): epochs by bin means (means keep stacked quantities adding up), steps by each bin's
median and slowest step, read from steps.bin in chunks."""

from dataclasses import dataclass

import numpy as np

from .. import rundir
from . import spikes as spk
from .load import load


@dataclass
class EpochSeries:
    epoch: np.ndarray
    wall_s: np.ndarray
    gc_s: np.ndarray                # (bins, 3): pause by generation
    rss_bytes: np.ndarray
    malloc_epoch: np.ndarray        # epochs that read malloc's bytes in use (binned), and the bytes
    malloc_bytes: np.ndarray
    traced_epoch: np.ndarray        # epochs with a traced-heap sample, and the samples
    traced_bytes: np.ndarray
    epochs: int
    downsampled: bool
    rss_t_s: np.ndarray = None      # the RSS read inside epochs (rundir.Run.rss_samples), binned: when...
    rss_read_bytes: np.ndarray = None   # ...how much...
    rss_shared_bytes: np.ndarray = None   # ...and of it, shared pages (mapped files, shared memory)


@dataclass
class StepSeries:
    step: np.ndarray                # index of each bin's first step
    median_s: np.ndarray            # median step time in the bin
    max_s: np.ndarray               # slowest step in the bin
    max_gc_s: np.ndarray            # GC pause inside that slowest step
    steps: int
    downsampled: bool


def _edges(n, max_points):
    return np.linspace(0, n, min(n, max_points) + 1).astype(int)


def _bin_means(values, edges):
    values = np.asarray(values, float)
    return np.array([values[a:b].mean(axis=0) for a, b in zip(edges[:-1], edges[1:])])


def series(run_dir, max_points=1000):
    """EpochSeries of every finished epoch (the warm-up included: the plot shows it)."""
    run = load(run_dir, "plot").run
    recs, samples = run.epochs, run.rss_samples()
    n = len(recs)
    edges = _edges(n, max_points)
    wall, gens = spk.epoch_arrays(recs)
    malloc = [(r["epoch"], r["malloc_bytes"]) for r in recs if r.get("malloc_bytes") is not None]
    malloc_edges = _edges(len(malloc), max_points)   # off glibc none; a costly heap's reads are sparse
    traced = [(r["epoch"], r["heap"]["traced_bytes"]) for r in recs if r.get("heap")]
    return EpochSeries(
        epoch=_bin_means([r["epoch"] for r in recs], edges), wall_s=_bin_means(wall, edges),
        gc_s=_bin_means(gens, edges), rss_bytes=_bin_means([r["rss_bytes"] for r in recs], edges),
        malloc_epoch=_bin_means([e for e, _ in malloc], malloc_edges),
        malloc_bytes=_bin_means([b for _, b in malloc], malloc_edges),
        traced_epoch=np.array([e for e, _ in traced], float), traced_bytes=np.array([b for _, b in traced], float),
        epochs=n, downsampled=n > max_points,
        **{f"rss_{name}": _bin_means(samples[field], _edges(len(samples), max_points))
           for name, field in (("t_s", "t_s"), ("read_bytes", "rss_bytes"), ("shared_bytes", "shared_bytes"))})


def step_series(run_dir, max_points=2000):
    """StepSeries of a run's steps (a run directory, or a Run read already), or None when it recorded none."""
    steps = (run_dir if isinstance(run_dir, rundir.Run) else rundir.read_run(run_dir)).steps()
    n = len(steps)
    if n == 0:
        return None
    size = max(1, -(-n // max_points))
    starts = np.arange(0, n, size)
    median, top, top_gc = (np.zeros(len(starts)) for _ in range(3))
    per_chunk = max(1, spk.CHUNK // size)   # bins per chunk read
    for first in range(0, len(starts), per_chunk):
        block = steps[starts[first]:starts[min(first + per_chunk, len(starts)) - 1] + size]
        wall = np.asarray(block["wall_s"], float)
        gc = np.asarray(block["gc0_s"], float) + np.asarray(block["gc1_s"], float) + np.asarray(block["gc2_s"], float)
        for i in range(first, min(first + per_chunk, len(starts))):
            a = (i - first) * size
            w = wall[a:a + size]
            j = int(np.argmax(w))
            median[i], top[i], top_gc[i] = np.median(w), w[j], gc[a + j]
    return StepSeries(starts, median, top, top_gc, n, size > 1)
