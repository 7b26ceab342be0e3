"""Marks: turns epoch and step events from several sources into one Session's epochs and steps.

Sources, strongest first: "epoch-fn" (the user named the function), "keras" and "lightning"
(a framework callback), "torch" (DataLoader passes with optimizer steps), "windows" (fixed time
windows when nothing else marks epochs). A stronger source that begins an epoch takes over for the
rest of the run: the open epoch of a weaker one is dropped, and the weaker one's events are
ignored from then on (Lightning drives torch DataLoaders and optimizers; those torch events are
Lightning's epochs already).

A torch pass is a candidate: it becomes an epoch only if an optimizer step happened in it, so a
validation pass is dropped at its end, unwritten.

Only the thread that created Marks (the Session's) marks anything: a DataLoader iterated or an
optimizer stepped in another thread (a prefetcher) is ignored, never an error in that thread.

A Session write that fails (a full disk, the run directory removed) stops the marking, said in a
line: the profiled code goes on, unrecorded from there, with what was written kept.

Listeners: `on_training_start` runs once, when the first non-window epoch or the first step
begins (after set-up: where a GC policy freezes, and where a flamegraph starts recording);
`on_step_end(total_steps)` runs between steps.
"""

import os
import sys
import threading

from ..errors import RunWriteError


def succeeded(error):
    """Whether a run that stopped with `error` (None if none) finished normally: its open torch pass
    is then an epoch (Marks.close's `write`)."""
    return error is None or (isinstance(error, SystemExit) and error.code in (0, None))


STRENGTH = {"windows": 0, "torch": 1, "keras": 2, "lightning": 2, "epoch-fn": 3}
STEP_SOURCES = {"windows": {"torch", "step-fn"}, "epoch-fn": {"torch", "step-fn"}, "torch": {"torch", "step-fn"},
                "keras": {"keras", "step-fn"}, "lightning": {"lightning", "step-fn"}}


class Marks:
    def __init__(self, session):
        self.session = session
        self._thread, self._pid = threading.get_ident(), os.getpid()
        self.elsewhere = 0         # epochs and steps begun in another thread of this process, unrecorded
        self.spawned = set()       # sources whose training went to processes they spawned, not followed
        self.world_size = None     # ranks a framework trained on beside this process, which it started itself
        self.stepless = 0          # DataLoader passes with no optimizer step, dropped (no epoch)
        self.unmarked_steps = 0    # optimizer steps outside the epochs once a source marked them
        self.owner = None          # the source whose epochs are being written
        self.open = None           # the source of the epoch in progress
        self.step_open = False
        self.steps_in_epoch = 0
        self.epochs = 0            # written
        self.windows = 0           # of them, time windows (before a framework's first epoch: set-up)
        self.steps = 0             # written, or in the open epoch
        self.training_started = False
        self.begun = None          # the source of the last epoch begun (finished or not)
        self.busy = False          # inside begin_step/end_step (a window's timer waits for the end)
        self.on_training_start = []
        self.on_step_end = []
        self.on_epoch_written = []
        self.failed = None         # the write error that stopped the marking

    def in_thread(self):
        """Whether the caller runs in the thread that marks (the Session's, not the same thread of a
        forked child, which the Session's hooks have left), while it marks."""
        return threading.get_ident() == self._thread and os.getpid() == self._pid and self.failed is None

    def seen_elsewhere(self):
        """Count an epoch or step that another thread of this process began (not a forked child's):
        it is not recorded, and the run's notes say so."""
        if threading.get_ident() != self._thread and os.getpid() == self._pid:
            self.elsewhere += 1

    def allows(self, source):
        """Whether `source` may mark epochs now (this thread, and no stronger source has taken over)."""
        return self.in_thread() and (self.owner is None or STRENGTH[source] >= STRENGTH[self.owner])

    def _wrote(self, write):
        """Call a Session method that writes; False, the marking stopped, when it fails to."""
        try:
            write()
            return True
        except RunWriteError as e:
            self.failed = str(e)
            self.open, self.step_open = None, False
            self.session.abandon_epoch()   # the one a failed step left open (an epoch's own failure closed it)
            print(f"profiler: {e}; recording stops here and the code goes on (what was written is kept)",
                  file=sys.stderr)
            return False

    # -- epochs --------------------------------------------------------------------------------
    def begin_epoch(self, source):
        """Begin an epoch of `source`; False if a stronger source owns the run or one of the same
        source is open."""
        if not self.allows(source) or self.open == source:
            self.seen_elsewhere()
            return False
        if self.open is not None:
            if STRENGTH[self.open] >= STRENGTH[source]:
                return False
            self._drop()
        if source not in ("windows", "torch"):   # a torch pass owns the run once it is written
            self.owner = source
        if source != "windows":
            self._start_training()
        self.session.begin_epoch()
        self.open, self.steps_in_epoch, self.begun = source, 0, source
        return True

    def end_epoch(self, source):
        """End the open epoch of `source`. A torch pass with no optimizer step is dropped."""
        if self.open != source or not self.in_thread():
            return False
        if self.step_open:
            self.session.abandon_step()
            self.step_open = False
        if source == "torch" and self.steps_in_epoch == 0:
            self._drop()
            self.stepless += 1
            return False
        if not self._wrote(self.session.end_epoch):
            return False
        self.open = None
        self.epochs += 1
        self.windows += source == "windows"
        if self.owner is None or STRENGTH[source] > STRENGTH[self.owner]:
            self.owner = source
        for listener in self.on_epoch_written:
            listener()
        return True

    def drop_epoch(self, source, hold=True):
        if self.open == source and self.in_thread():
            self._drop(hold)

    def _drop(self, hold=True):
        """The open epoch is abandoned (Session.abandon_epoch): unwritten, its steps with it, unless the
        run then stops on an exception (sys.exit(0) included), which writes one with steps flagged
        unfinished; with `hold` False, unwritten whatever follows."""
        if self.step_open:
            self.session.abandon_step()
            self.step_open = False
        self.session.abandon_epoch(hold=hold)
        self.steps -= self.steps_in_epoch
        self.open, self.steps_in_epoch = None, 0

    # -- steps ---------------------------------------------------------------------------------
    def _steps_from(self, source):
        return self.open is not None and source in STEP_SOURCES[self.open] and self.in_thread()

    def begin_step(self, source, from_epoch_start=False):
        if self.step_open or not self._steps_from(source):
            self.seen_elsewhere()
            return False
        self.busy = True
        try:
            self._start_training()
            (self.session.begin_first_step if from_epoch_start else self.session.begin_step)()
            self.step_open = True
        finally:
            self.busy = False
        return True

    def end_step(self, source):
        if not self.step_open or not self._steps_from(source):
            return False
        self.busy = True
        try:
            if not self._wrote(self.session.end_step):   # a full buffer of steps is written here
                return False
            self.step_open = False
            self.steps_in_epoch += 1
            self.steps += 1
        finally:
            self.busy = False
        for listener in self.on_step_end:
            listener(self.steps)
        return True

    def drop_step(self, source):
        """Drop the open step unrecorded (it raised; Lightning's validation inside a train epoch is no step's)."""
        if self.step_open and self._steps_from(source):
            self.session.abandon_step()
            self.step_open = False

    def step_boundary(self, source):
        """End the open step (if any) and begin the next: steps that follow each other without a
        gap, as between two optimizer steps. The first boundary of an epoch that opened no step
        (a function's epoch, a window) ends the step that began with the epoch: its first
        optimizer step is its first step's end."""
        if not self.step_open and self.steps_in_epoch == 0:
            self.begin_step(source, from_epoch_start=True)
        self.end_step(source)
        return self.begin_step(source)

    def _start_training(self):
        if not self.training_started:
            self.training_started = True
            for listener in self.on_training_start:
                listener()

    def close(self, write=True):
        """At the end of the run: a framework's or function's epoch still open did not finish and
        is abandoned (_drop); a torch pass with steps (a loop that broke out of its DataLoader) is written
        if `write` (the run finished normally)."""
        if write and self.open == "torch" and self.steps_in_epoch:
            self.end_epoch("torch")
        elif self.open is not None:
            self._drop()


class Source:
    """One source's view of Marks, with the Session's begin/end method names, so the callbacks
    written for a Session (keras.ProfilerCallback, lightning.ProfilerCallback) drive Marks too."""

    def __init__(self, marks, name):
        self.marks, self.name = marks, name

    def begin_epoch(self):
        return self.marks.begin_epoch(self.name)

    def end_epoch(self):
        return self.marks.end_epoch(self.name)

    def abandon_epoch(self):
        return self.marks.drop_epoch(self.name)

    def begin_step(self):
        return self.marks.begin_step(self.name)

    def end_step(self):
        return self.marks.end_step(self.name)

    def abandon_step(self):
        self.marks.drop_step(self.name)

    def trains_elsewhere(self):
        """The source's framework sent its training to processes it spawned (the run's notes say so)."""
        self.marks.spawned.add(self.name)

    def ranks_elsewhere(self, world_size):
        """The source's framework trains on `world_size` ranks, this process one of them, and started
        the others itself (Lightning's strategy="ddp"), which the profiler does not follow."""
        self.marks.world_size = world_size
