"""Whether a preallocated history fits in memory: checked before anything is built, by `profiler
run` and, for every --max-epochs at once, by `profiler scaling` (a light module: no engine)."""

import psutil

from ..errors import UsageError

SLOT_BYTES = 450   # one preallocated history entry (engine/loop.py's HistorySlot: the slot, its dict and two one-item lists)


def check_history_fits(history, epochs):
    """A preallocated history holds one tracked record per planned epoch: refuse one that cannot fit
    in memory before building anything, rather than fail with a bare MemoryError."""
    if history != "preallocated":
        return
    need, available = epochs * SLOT_BYTES, psutil.virtual_memory().available
    if need > 0.8 * available:
        raise UsageError(f"--history preallocated with --epochs {epochs:,} needs ~{need / 1e9:.1f} GB for the history, "
                         f"more than this machine has free ({available / 1e9:.1f} GB): use fewer --epochs")
