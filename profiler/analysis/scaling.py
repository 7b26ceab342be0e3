"""scaling(runs) -> Scaling: does epoch time depend on max_epochs? (The first seed's benchmark.)

Each run is the same scenario halted after the same number of epochs, with a different
max_epochs. Epoch time should not depend on a number the loop has not reached yet; if it does,
and the GC share grows with it, something sized by max_epochs is being walked by the collector.
A difference that GC pauses do not explain is not claimed as a dependence: between processes on a
shared machine, epoch times of identical work differ by up to 1.5x.
"""

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import rundir
from . import stats

DEPENDS = 0.10       # epoch-time ratio that counts...
GC_EXPLAINS = 0.5    # ...when GC pauses explain at least this share of the difference


@dataclass
class Scaling:
    rows: list = field(default_factory=list)  # max_epochs, epochs, median_epoch_s, gc_share, first_s, last_s
    ratio: float = 1.0
    depends: bool = False
    gc_explained: float = 0.0
    label: str = ""
    verdict: str = ""

    def to_dict(self):
        return asdict(self)


def scaling(runs):
    """`runs`: {max_epochs: run_dir}."""
    rows, label = [], ""
    for max_epochs, run_dir in sorted(runs.items()):
        run = rundir.read_run(run_dir)
        meta = run.meta.get("meta", {})
        label = label or " ".join(f"{k}={meta[k]}" for k in ("scenario", "history", "gc_collect") if k in meta)
        if not run.epochs:
            raise rundir.RunDirError(f"{run.path} has no finished epochs")
        records = run.epochs[stats.warmup(len(run.epochs)):]
        wall = np.array([r["wall_s"] for r in records])
        pause = np.array([sum(r["gc"]["pause_s"]) for r in records])
        first, last = stats.early_late(wall)
        rows.append({"max_epochs": int(max_epochs), "epochs": len(run.epochs), "run_dir": str(run.path),
                     "median_epoch_s": float(np.median(wall)), "gc_share": float(np.median(pause / wall)),
                     "gc_pause_s": float(np.median(pause)), "first_s": first, "last_s": last})
    base, top = rows[0], rows[-1]
    ratio = top["median_epoch_s"] / base["median_epoch_s"]
    delta = top["median_epoch_s"] - base["median_epoch_s"]
    explained = float(np.clip((top["gc_pause_s"] - base["gc_pause_s"]) / delta, 0, 1)) if delta > 0 else 0.0
    depends = ratio >= 1 + DEPENDS and explained >= GC_EXPLAINS
    if ratio >= 1 + DEPENDS and not depends:
        verdict = (f"Epoch time differs between max_epochs={base['max_epochs']:,} ({base['median_epoch_s'] * 1e3:.2f} ms) "
                   f"and {top['max_epochs']:,} ({top['median_epoch_s'] * 1e3:.2f} ms, {ratio:.2f}x), but GC pauses "
                   f"explain only {100 * explained:.0f}% of it (GC share {100 * base['gc_share']:.1f}% vs "
                   f"{100 * top['gc_share']:.1f}%): not a max_epochs effect through GC. Noise between processes "
                   f"on a shared machine reaches this size; repeat the measurement, or compare the runs' ops.")
    elif depends:
        verdict = (f"Epoch time depends on max_epochs: {base['median_epoch_s'] * 1e3:.2f} ms at max_epochs="
                   f"{base['max_epochs']:,} vs {top['median_epoch_s'] * 1e3:.2f} ms at {top['max_epochs']:,} "
                   f"({ratio:.2f}x), though every run stopped after the same epochs. GC takes "
                   f"{100 * base['gc_share']:.1f}% of epoch time at {base['max_epochs']:,} and "
                   f"{100 * top['gc_share']:.1f}% at {top['max_epochs']:,}, and GC explains {100 * explained:.0f}% of "
                   f"the difference: something sized by max_epochs (e.g. a preallocated history) is kept alive and "
                   f"walked by every full collection.")
    else:
        verdict = (f"Epoch time does not depend on max_epochs: {base['median_epoch_s'] * 1e3:.2f} ms at "
                   f"{base['max_epochs']:,} vs {top['median_epoch_s'] * 1e3:.2f} ms at {top['max_epochs']:,} "
                   f"({ratio:.2f}x); GC share {100 * base['gc_share']:.1f}% vs {100 * top['gc_share']:.1f}%.")
    return Scaling(rows=rows, ratio=ratio, depends=depends, gc_explained=explained, verdict=verdict, label=label)
