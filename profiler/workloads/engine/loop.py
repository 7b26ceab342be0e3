"""The training loop: events, filtered handlers, one State object (the shape of Axon and Ignite).

Two switches reproduce the Axon report on demand:
  history="preallocated" creates one GC-tracked record per *planned* epoch up front (Axon's
  final_metrics_map), so every full collection walks max_epochs objects; history="append" (the
  default) stores each finished epoch as a dict of floats, which the GC does not track.
  gc_collect="iteration"/"epoch" forces a full collection that often (Axon collected per batch;
  many PyTorch loops call gc.collect() per epoch).
With a Session, each training step (forward, backward, optimizer update) is one session.step().
By default the loop warms the model on the first batch (no update), then calls gc.freeze() (and
gc.unfreeze() when it ends): every object that exists by then (imported modules, compiled kernels
loaded on first use, the model, the data) moves to the permanent generation, so collections during
training walk only what training creates. Without it a full collection here walks the ~10^5
objects numba, llvmlite and scipy create (20-100 ms each). The history is created after the
freeze, as in the seed, so "preallocated" still shows its cost.
"""

import contextlib
import enum
import gc
import math
import time

from . import optimizers as optimizers_mod
from .checks import positive_int


class Events(str, enum.Enum):
    STARTED = "started"
    EPOCH_STARTED = "epoch_started"
    ITERATION_STARTED = "iteration_started"
    ITERATION_COMPLETED = "iteration_completed"
    EPOCH_COMPLETED = "epoch_completed"
    HALTED = "halted"
    COMPLETED = "completed"


HISTORY_POLICIES = ("append", "preallocated")
GC_POLICIES = ("never", "iteration", "epoch")


class HistorySlot:
    """One preallocated history entry: a tracked object holding tracked containers."""

    __slots__ = ("epoch", "metrics")

    def __init__(self, epoch):
        self.epoch = epoch
        self.metrics = {"loss": [0.0], "accuracy": [0.0]}


class State:
    """What handlers see and may change: halt() ends the loop, halt_epoch() the current epoch."""

    def __init__(self, max_epochs, steps_per_epoch, history):
        self.max_epochs, self.steps_per_epoch = max_epochs, steps_per_epoch
        self.epoch = 0            # current epoch index, from 0
        self.iteration = 0        # global step count
        self.epoch_iteration = 0  # step within the epoch, from 1 once a step ran
        self.metrics = {}         # last finished epoch: loss, accuracy
        self.times = []           # wall seconds per finished epoch
        self.loss = math.nan      # last step's loss
        self.history = [HistorySlot(e) for e in range(max_epochs)] if history == "preallocated" else []
        self.halted = self._halt_epoch = False

    def halt(self):
        self.halted = True

    def halt_epoch(self):
        self._halt_epoch = True


class _Handler:
    def __init__(self, fn, every, once, when):
        self.fn, self.every, self.once, self.when = fn, every, once, when

    def wants(self, count, state):
        if self.once is not None and count != self.once:
            return False
        if self.every is not None and count % self.every:
            return False
        return self.when is None or self.when(state)


class Loop:
    def __init__(self, model, optimizer, data, *, max_epochs, history="append", gc_collect="never",
                 gc_freeze=True, session=None):
        if history not in HISTORY_POLICIES:
            raise ValueError(f"history must be one of {HISTORY_POLICIES}, got {history!r}")
        if gc_collect not in GC_POLICIES:
            raise ValueError(f"gc_collect must be one of {GC_POLICIES}, got {gc_collect!r}")
        max_epochs = positive_int("max_epochs", max_epochs)
        optimizer = optimizers_mod.get(optimizer) if isinstance(optimizer, str) else optimizer
        if isinstance(optimizer, type) or not callable(getattr(optimizer, "step", None)):   # an optimizer, or a wrapper
            made = f" (create one: {optimizer.__name__}())" if isinstance(optimizer, type) else ""
            raise TypeError(f"optimizer must be an optimizer, e.g. Adam(), or its name, e.g. 'adam'; got "
                            f"{optimizer!r}{made}")
        if not (callable(getattr(data, "epoch", None)) and hasattr(data, "__len__")):
            raise TypeError(f"data must be Batches(x, y, batch_size), or anything with epoch(index) and len(); got "
                            f"{type(data).__name__}")
        self.model, self.data, self.session, self.optimizer = model, data, session, optimizer
        self.max_epochs, self.history, self.gc_collect, self.gc_freeze = max_epochs, history, gc_collect, gc_freeze
        self.handlers = {e: [] for e in Events}
        self.state = None

    def on(self, event, fn=None, *, every=None, once=None, when=None):
        """Call fn(state) on `event`; filters: every N-th count, once at count N, or a predicate.
        Counts are epochs for epoch events and global iterations for iteration events."""
        event = Events(event)
        every = None if every is None else positive_int("every", every)
        once = None if once is None else positive_int("once", once)
        if when is not None and not callable(when):
            raise TypeError(f"loop.on({event}, when=...): when must be callable as when(state), got {when!r}")

        def register(f):
            if not callable(f):
                raise TypeError(f"loop.on({event}, fn): fn must be callable as fn(state), got {f!r}")
            self.handlers[event].append(_Handler(f, every, once, when))
            return f
        return register(fn) if fn is not None else register

    def _fire(self, event):
        state = self.state
        count = state.iteration if event in (Events.ITERATION_STARTED, Events.ITERATION_COMPLETED) else state.epoch + 1
        for h in self.handlers[event]:
            if h.wants(count, state):
                h.fn(state)

    def run(self):
        """Train until max_epochs or a handler halts; returns the State."""
        if self.gc_freeze:
            self.model.warm_up(*next(iter(self.data.epoch(0))))
            gc.freeze()
        try:
            state = self.state = State(self.max_epochs, len(self.data), self.history)
            if self.session is not None:
                self.model.instrument(self.session.op)
            self._fire(Events.STARTED)
            for epoch in range(self.max_epochs):
                state.epoch = epoch
                self._fire(Events.EPOCH_STARTED)
                if state.halted:
                    break
                epoch_scope = self.session.epoch(epoch) if self.session is not None else contextlib.nullcontext()
                with epoch_scope:
                    self._run_epoch(state)
                self._fire(Events.EPOCH_COMPLETED)
                if state.halted:
                    break
        finally:
            if self.session is not None:
                self.model.instrument()
            if self.gc_freeze:
                gc.unfreeze()
        if state.halted and self.session is not None:
            self.session.mark_halted()
        self._fire(Events.HALTED if state.halted else Events.COMPLETED)
        return state

    def _run_epoch(self, state):
        start = time.perf_counter()
        state._halt_epoch = False
        state.epoch_iteration = 0
        loss_sum, correct, seen = 0.0, 0, 0
        step = self.session.step() if self.session is not None else contextlib.nullcontext()   # reusable
        for x, y in self.data.epoch(state.epoch):
            state.iteration += 1
            state.epoch_iteration += 1
            self._fire(Events.ITERATION_STARTED)
            with step:
                loss, right = self.model.train_step(x, y)
                if not math.isfinite(loss):
                    raise FloatingPointError(f"loss became {loss} at epoch {state.epoch}, iteration "
                                             f"{state.epoch_iteration} (global step {state.iteration}); "
                                             f"lower the learning rate or check the inputs")
                self.optimizer.step([self.model.flat_params], [self.model.flat_grads])
            state.loss = loss
            loss_sum, correct, seen = loss_sum + loss * len(x), correct + right, seen + len(x)
            self._fire(Events.ITERATION_COMPLETED)
            if self.gc_collect == "iteration":
                gc.collect()
            if state.halted or state._halt_epoch:
                break
        if self.gc_collect == "epoch":
            gc.collect()
        metrics = {"loss": loss_sum / max(seen, 1), "accuracy": correct / max(seen, 1)}
        state.metrics = metrics
        state.times.append(time.perf_counter() - start)
        if self.history == "append":
            state.history.append(dict(metrics, epoch=state.epoch))
        else:
            slot = state.history[state.epoch].metrics
            slot["loss"][0], slot["accuracy"][0] = metrics["loss"], metrics["accuracy"]
