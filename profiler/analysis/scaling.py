"""scaling(runs) -> Scaling: does epoch time depend on max_epochs? (The Axon report's benchmark.)

Each run is the same scenario halted after the same number of epochs, with a different
max_epochs. Epoch time should not depend on a number the loop has not reached yet; if it does,
and the GC share grows with it, something sized by max_epochs is being walked by the collector.
A difference that GC pauses do not explain is not claimed as a dependence: between processes on a
shared machine, epoch times of identical work differ by up to 1.5x.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from . import stats
from .load import load

DEPENDS = 0.10       # epoch-time ratio that counts...
GC_EXPLAINS = 0.5    # ...when GC pauses explain at least this share of the difference


@dataclass
class ScalingRow:
    max_epochs: int
    epochs: int
    run_dir: str
    median_epoch_s: float
    gc_share: float          # median GC share of epoch time
    gc_pause_s: float        # median GC pause per epoch
    first_s: float           # median of the early window
    last_s: float            # median of the late window


@dataclass
class Scaling:
    rows: list               # [ScalingRow] by max_epochs
    ratio: float             # largest max_epochs' median epoch time / smallest's
    depends: bool
    gc_explained: float      # share of the difference GC pauses explain
    label: str               # scenario, history and gc_collect from the runs' meta


def scaling(runs):
    """`runs`: {max_epochs: run_dir}, at least two."""
    if not isinstance(runs, dict) or not all(type(k) is int and k > 0 for k in runs):
        raise UsageError(f"scaling() takes {{max_epochs: run_dir}} with positive int keys, e.g. "
                         f"{{100: 'runs/a', 1000: 'runs/b'}}; got {runs!r}"[:300])
    if len(runs) < 2:
        raise UsageError(f"scaling compares runs with different max_epochs: give at least two, got {len(runs)}")
    rows, label = [], ""
    for max_epochs, run_dir in sorted(runs.items()):
        loaded = load(run_dir, "measure")
        meta = loaded.run.user_meta
        label = label or " ".join(f"{k}={meta[k]}" for k in ("scenario", "history", "gc_collect") if k in meta)
        wall = np.array([r["wall_s"] for r in loaded.records])
        pause = np.array([sum(r["gc"]["pause_s"]) for r in loaded.records])
        share = np.divide(pause, wall, out=np.zeros_like(wall), where=wall > 0)
        first, last = stats.early_late(wall)
        rows.append(ScalingRow(int(max_epochs), len(loaded.run.epochs), str(loaded.run.path), float(np.median(wall)),
                               float(np.median(share)), float(np.median(pause)), first, last))
    base, top = rows[0], rows[-1]
    ratio = top.median_epoch_s / base.median_epoch_s if base.median_epoch_s > 0 else 1.0
    delta = top.median_epoch_s - base.median_epoch_s
    explained = float(np.clip((top.gc_pause_s - base.gc_pause_s) / delta, 0, 1)) if delta > 0 else 0.0
    return Scaling(rows, ratio, bool(ratio >= 1 + DEPENDS and explained >= GC_EXPLAINS), explained, label)
