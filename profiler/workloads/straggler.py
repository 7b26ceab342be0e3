"""A GC straggler on demand: one rank of a data-parallel scenario whose collections stall the job.

The planted rank holds a preallocated history (the Axon report's shape: one tracked record
per planned entry, created when training starts, after the loop's own gc.freeze()) and its data
loader keeps a thousand small records per batch for the rest of the run (nanochat's loader
shape). The kept records trigger CPython's automatic full collections every so often, each walking
the history and the cache: tens of milliseconds on that rank alone, while the other ranks wait at
the next all-reduce. `--gc-policy freeze` takes the history out of those collections;
`--gc-policy manual:N` moves them to the same step on every rank, which helps only when every rank
pays them (docs/multi-rank.md).
"""

from .engine import Events
from .engine.loop import HistorySlot

HISTORY = 50_000        # preallocated records, 4 tracked objects each
KEPT_PER_STEP = 1000    # small records the loader keeps per batch


class GcStraggler:
    def __init__(self, history=HISTORY, kept_per_step=KEPT_PER_STEP):
        self.size, self.kept_per_step = history, kept_per_step
        self.history, self.cache = [], []

    def attach(self, loop):
        """Build the history when training starts and grow the cache before every step (in the
        loader's time, between steps, as a data loader would)."""
        loop.on(Events.STARTED, self._start)
        loop.on(Events.ITERATION_STARTED, self._load)

    def _start(self, state):
        self.history = [HistorySlot(i) for i in range(self.size)]

    def _load(self, state):
        self.cache.append([[state.iteration, i] for i in range(self.kept_per_step)])
