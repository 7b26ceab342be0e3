"""--gc-policy: try a garbage-collection fix on a script without editing it.

    default    CPython's automatic collection, untouched
    freeze     gc.freeze() when training starts: what set-up created (modules, the model, the
               data set) moves to a permanent generation that no collection walks again
    manual:N   automatic collection off when training starts, gc.collect() every N steps at the
               boundary between two steps (every rank at the same step: no straggler); in a run
               with no steps, gc.collect() after each epoch instead (never automatic GC off for good)
    off        automatic collection off when training starts (memory held by cycles grows)

"Training starts" is the first epoch (or step) found: after imports and set-up. The state of the
collector is restored when the script ends, on every exit path.
"""

import gc

from ..errors import UsageError

KINDS = ("default", "freeze", "manual:N", "off")


class GcPolicy:
    def __init__(self, kind, every=None):
        self.kind, self.every = kind, every
        self._was_enabled = None
        self._frozen = False

    @classmethod
    def parse(cls, text):
        kind, _, every = text.partition(":")
        if kind == "manual":
            if not every.isdigit() or int(every) < 1:
                raise UsageError(f"--gc-policy {text!r}: manual needs a positive step count, e.g. manual:50")
            return cls("manual", int(every))
        if kind in ("default", "freeze", "off") and not every:
            return cls(kind)
        raise UsageError(f"--gc-policy {text!r}: expected one of {', '.join(KINDS)}")

    def __str__(self):
        return f"manual:{self.every}" if self.kind == "manual" else self.kind

    def attach(self, marks):
        """Apply the policy when `marks` sees training start; collect at its step boundaries."""
        if self.kind == "default":
            return
        marks.on_training_start.append(self.start)
        if self.kind == "manual":
            marks.on_step_end.append(self._after_step)
            marks.on_epoch_written.append(lambda: self._after_epoch(marks.steps))

    def start(self):
        self._was_enabled = gc.isenabled()
        if self.kind == "freeze":
            gc.freeze()
            self._frozen = True
        elif self.kind in ("manual", "off"):
            gc.disable()

    def _after_step(self, steps):
        if steps % self.every == 0:
            gc.collect()

    def _after_epoch(self, steps):
        if steps == 0 and self._was_enabled is not None:
            gc.collect()

    def restore(self):
        """Undo what the policy did: unfreeze what it froze, and enable the collector it disabled
        (freeze leaves it alone, so a script's own gc.disable() stays)."""
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        if self._was_enabled and self.kind in ("manual", "off"):
            gc.enable()
        self._was_enabled = None
