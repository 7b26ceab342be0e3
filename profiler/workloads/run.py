"""Run a built-in scenario on the engine under a profiling Session (what `profiler run` does)."""

import sys

import psutil
from tqdm import tqdm

from ..capture import Session
from ..errors import UsageError
from . import scenarios
from .engine import Events, Loop


SLOT_BYTES = 450   # one preallocated history entry (engine/loop.py's _Slot), measured


def _check_history_fits(history, epochs):
    """A preallocated history holds one tracked record per planned epoch: refuse one that cannot fit
    in memory before building anything, rather than fail with a bare MemoryError."""
    if history != "preallocated":
        return
    need, available = epochs * SLOT_BYTES, psutil.virtual_memory().available
    if need > 0.8 * available:
        raise UsageError(f"--history preallocated with --epochs {epochs:,} needs ~{need / 1e9:.1f} GB for the history, "
                         f"more than this machine has free ({available / 1e9:.1f} GB): use fewer --epochs")


def run_scenario(name, out, *, layout="NHWC", epochs=10, halt_after=None, history="append",
                 gc_collect="never", tracemalloc=False, samples=None, seed=0, progress=True, labels=None):
    """Train scenario `name` for `epochs` (max_epochs), halting after `halt_after` epochs if given.
    Writes the run directory `out` and returns the loop's final State."""
    _check_history_fits(history, epochs)
    options = {"layout": layout, "seed": seed}
    if samples is not None:
        options["samples"] = samples
    if labels is not None:
        options["labels"] = labels
    scenario = scenarios.build(name, **options)
    meta = {"scenario": name, "layout": layout, "max_epochs": epochs, "halt_after": halt_after,
            "history": history, "gc_collect": gc_collect, "samples": len(scenario.x),
            "batch_size": scenario.data.batch_size, "label": f"{name} {layout}"}
    with Session(out, tracemalloc=tracemalloc, meta=meta) as session:
        loop = Loop(scenario.model, scenario.optimizer, scenario.data, max_epochs=epochs, history=history,
                    gc_collect=gc_collect, session=session)
        if halt_after is not None:
            loop.on(Events.EPOCH_STARTED, lambda state: state.halt(), when=lambda s: s.epoch >= halt_after)
        total = min(epochs, halt_after) if halt_after is not None else epochs
        show = progress and sys.stderr.isatty()   # a bar in a log file is noise
        with tqdm(total=total, desc=f"{name} {layout}", unit="epoch", disable=not show, leave=False) as bar:
            loop.on(Events.EPOCH_COMPLETED, lambda state: bar.update(1))
            return loop.run()
