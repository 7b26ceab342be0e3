"""PyTorch: a step per optimizer step, an epoch per DataLoader pass in which an optimizer stepped.

    with Session("runs/mine") as session, profiler.integrations.torch.track(session):
        train()        # unmodified: DataLoader passes and optimizer.step() calls are seen

Steps come from torch's global optimizer-step hook: a step runs from the end of one
optimizer.step() (or the start of the pass) to the end of the next one, so data loading, forward,
backward and the update are in it. A pass begins when a DataLoader's iteration starts (before
its iterator starts or wakes the workers, which can take seconds: a spawned worker is sent the
dataset) and ends when it is exhausted or, in the main thread, just after its iterator is freed
(a loop that broke out); a pass with no optimizer step (validation) is dropped. A
pass over another DataLoader started while one is still being iterated (a validation pass in the
middle of a training pass) belongs to the outer one; a new pass over the same DataLoader ends the
one in progress (`it = iter(loader)` and next(it) each epoch). Two optimizers stepping on each
batch make two steps per batch. Each batch a DataLoader gives the training thread is timed as the op
format.DATALOADER_OP, its GC pauses left out (the GC findings count them): the time the step waits
for its data (a rank slow to load holds every rank of a data-parallel job back without a stall of
its own); during a pass, another loader's batches count when drawn with autograd on and an
optimizer steps before that loader is exhausted (zipped training loaders), not otherwise (a
validation pass inside it, under torch.no_grad() or run to its end, waits for no step's data).
The call that ends a pass (StopIteration: workers shut down) is no batch's. Each
`Tensor.backward()` (or `torch.autograd.backward()`) in the training thread is timed as the op
format.BACKWARD_OP, its GC pauses left out: under DistributedDataParallel the gradients'
all-reduce ends inside it, so a rank that waits there for another rank's gradients shows it in
this op, and a rank slower at its own work before it (its forward, a larger shard) shows the rest
of its step longer (analysis/ranks.py).
"""

import contextlib
import functools
import sys
import time
import weakref

from ..rundir.format import BACKWARD_OP, DATALOADER_OP
from . import pending
from .marks import Marks, succeeded

_now = time.perf_counter_ns


def batch_bytes(batch, depth=0):
    """Bytes of the tensors (or arrays) in a batch: nested tuples, lists and dicts, up to 4 levels
    and 64 items a level (a bound on the cost; a batch is a few tensors)."""
    if depth > 3:
        return 0
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (tuple, list)):
        return sum(batch_bytes(item, depth + 1) for item in batch[:64])
    if callable(getattr(batch, "nelement", None)) and callable(getattr(batch, "element_size", None)):
        return int(batch.nelement() * batch.element_size())
    nbytes = getattr(batch, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else 0


class TorchHooks:
    def __init__(self, marks, *, epochs=True, on_orphan_step=None, workers=None):
        """epochs: DataLoader passes are epochs (False: only steps, for epochs marked otherwise).
        on_orphan_step: called when an optimizer steps outside any epoch (a loop that batches
        without a DataLoader), before the step is marked. workers: a WorkerProbe, told when a
        DataLoader has just started its worker processes (sample_soon: their memory is smallest
        then; its thread reads it, not the pass), when it is about to shut them down
        (sample_now: largest), and the bytes and prefetch factor of the first batch of a pass
        with worker processes (note_batch: the batches a worker holds in flight are its own
        memory, not pages it copied from the parent)."""
        self.marks, self.epochs, self.on_orphan_step, self.workers = marks, epochs, on_orphan_step, workers
        self._pass = None                   # weakref to the iterator of the pass in progress
        self._loader = None                 # weakref to its DataLoader
        self._weigh = None                  # (weakref to an iterator whose first batch is to be weighed, prefetch)
        self._handle = None
        self._patched = []                  # (owner, name, original attribute or None)
        self._waits = None                  # the Session's op timer of the waits for batches
        self._nested = {}                   # id(iterator) -> [weakref to it, ns, batches] since the last optimizer
                                            # step, of loaders iterated inside the pass: a step's data if it steps
        self._grad_enabled = None           # torch.is_grad_enabled

    def install(self):
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader
        hooks = self
        self._grad_enabled = torch.is_grad_enabled
        loader_iter, iter_next = dataloader.DataLoader.__iter__, dataloader._BaseDataLoaderIter.__next__
        session = self.marks.session if self.marks is not None else None   # None: a WorkerProbe's hooks alone
        waits = self._waits = session.op(DATALOADER_OP) if session is not None else None
        backwards = session.op(BACKWARD_OP) if session is not None else None
        gc_timer = session.gc_timer if session is not None else None
        inside = []   # a backward being timed: Tensor.backward calls torch.autograd.backward, and a tensor
                      # subclass's __torch_function__ calls Tensor.backward again, within it

        def timed(backward):
            @functools.wraps(backward)
            def call(*args, **kwargs):
                if inside or not hooks.marks.in_thread():
                    return backward(*args, **kwargs)
                paused, start = sum(gc_timer.pause_ns), _now()
                inside.append(True)
                try:
                    return backward(*args, **kwargs)
                finally:
                    inside.pop()
                    backwards.add(max(_now() - start - (sum(gc_timer.pause_ns) - paused), 0))
            return call

        def __iter__(loader):
            began = hooks._pass_starting(loader)   # before the iterator starts the pass's workers
            try:
                iterator = loader_iter(loader)
            except BaseException:
                if began:
                    hooks.marks.drop_epoch("torch")
                raise
            if getattr(loader, "num_workers", 0) and hooks.workers is not None:
                hooks.workers.sample_soon()
                hooks._weigh = weakref.ref(iterator), getattr(loader, "prefetch_factor", None)
            if began:
                hooks._pass = pending.when_freed(iterator, hooks._pass_abandoned)
                hooks._loader = weakref.ref(loader)
            return iterator

        def __next__(iterator):
            timed = waits is not None and hooks.marks.in_thread()
            if timed:   # the wait for a batch, its GC pauses left to the GC findings
                paused, start = sum(gc_timer.pause_ns), _now()
            try:
                batch = iter_next(iterator)
            except StopIteration:   # the pass's end (its workers shut down, the profiler samples them): no batch
                hooks._exhausted(iterator)
                hooks._pass_ended(iterator)
                raise
            if timed:
                hooks._waited(iterator, max(_now() - start - (sum(gc_timer.pause_ns) - paused), 0))
            if hooks._weigh is not None and hooks._weigh[0]() is iterator:
                prefetch, hooks._weigh = hooks._weigh[1], None
                hooks.workers.note_batch(batch_bytes(batch), prefetch)
            return batch

        self._handle = register_optimizer_step_post_hook(self._optimizer_stepped)
        workers = dataloader._MultiProcessingDataLoaderIter
        if self.workers is not None and "_shutdown_workers" in workers.__dict__:
            shutdown = workers._shutdown_workers

            def _shutdown_workers(iterator):
                if not getattr(iterator, "_shutdown", True):
                    hooks.workers.sample_now()
                return shutdown(iterator)

            self._patch(workers, "_shutdown_workers", _shutdown_workers)
        if self.epochs or self.workers is not None:
            self._patch(dataloader.DataLoader, "__iter__", __iter__)
            self._patch(dataloader._BaseDataLoaderIter, "__next__", __next__)
        if backwards is not None:
            self._patch(torch.Tensor, "backward", timed(torch.Tensor.backward))
            self._patch(torch.autograd, "backward", timed(torch.autograd.backward))

    def _patch(self, owner, name, value):
        self._patched.append((owner, name, owner.__dict__.get(name)))
        setattr(owner, name, value)

    def uninstall(self):
        pending.cancel(self._pass)   # a pass still open keeps no call waiting for its iterator
        self._pass = None
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        for owner, name, original in reversed(self._patched):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._patched.clear()

    # -- events --------------------------------------------------------------------------------
    def _current(self):
        return self._pass() if self._pass is not None else None

    def _waited(self, iterator, ns):
        """The training thread waited `ns` for a batch of `iterator`: the pass's own is a step's wait,
        and when no pass marks epochs (Lightning's, Keras', --epoch-fn, time windows), any drawn with
        autograd on (not a validation loop's, under torch.no_grad() or inference_mode: Lightning's,
        in the middle of an epoch too); another loader's, iterated inside the pass, is one only if it
        was drawn with autograd on and an optimizer steps before that loader is exhausted (zipped
        training loaders, not a validation pass: under torch.no_grad(), or run to its end)."""
        current = self._current()
        if current is not iterator and not self._grad_enabled():   # a validation loop's: no step's wait
            return
        if current is None or current is iterator:
            self._waits.add(ns)
            return
        entry = self._nested.get(id(iterator))
        if entry is None or entry[0]() is not iterator:
            if entry is not None:   # a freed iterator's id taken again: its waits stay for the next step
                self._nested[object()] = entry
            entry = self._nested[id(iterator)] = [weakref.ref(iterator), 0, 0]
        entry[1] += ns
        entry[2] += 1

    def _fed_a_step(self):
        """An optimizer stepped: the other loaders' batches drawn since the last one fed it."""
        for _, ns, batches in self._nested.values():
            self._waits.add(ns, batches)
        self._nested.clear()

    def _exhausted(self, iterator):
        """A loader iterated inside the pass ran out with no optimizer step since: no step's data."""
        entry = self._nested.get(id(iterator))
        if entry is not None and entry[0]() is iterator:
            del self._nested[id(iterator)]

    def _pass_starting(self, loader):
        """A pass over `loader` is about to start (its iterator made, its workers started or woken,
        which the epoch and its first step include): whether it began an epoch."""
        if not self.epochs or not self.marks.in_thread():
            return False
        if self._current() is not None and (self._loader is None or self._loader() is not loader):
            return False                                    # nested in the pass in progress
        if self.marks.open == "torch":                      # the last pass was left, not exhausted
            self.marks.end_epoch("torch")
        elif self.marks.open == "windows" and self.marks.steps and not self._grad_enabled():
            return False   # an evaluation amid training with no DataLoader (steps counted): in the window
        self._nested.clear()                                # waits since the last step fed none
        pending.cancel(self._pass)
        self._pass = self._loader = None
        if not self.marks.begin_epoch("torch"):
            return False
        self.marks.begin_step("torch")
        return True

    def _pass_ended(self, iterator):
        if self.epochs and self.marks.in_thread() and self._current() is iterator:
            pending.cancel(self._pass)
            self._pass = None
            self._nested.clear()   # waits since the last step fed none
            self.marks.end_epoch("torch")

    def _pass_abandoned(self, frame):
        """The pass's iterator was freed before it was exhausted (`next(iter(loader))`, or a loop
        that broke out); called at the code's next call of a Python function or turn of a loop
        (pending.when_freed), in the main thread. With no step the pass is dropped; with steps it
        ends, as an exhausted pass ends at its StopIteration, so what follows a break (an
        evaluation, the final test) is in no epoch, unless an exception is being handled (one
        that freed the iterator on its way out): a pass cut short is abandoned, written flagged
        unfinished if the run ends on the exception, dropped if the loop goes on. Where the call
        lands in the profiler's own code (the next pass's hook) or in a collection (a finalizer),
        the pass is left to end at the next pass or the run's end, as in another thread."""
        self._pass = None
        if (self.marks.open != "torch" or not self.marks.in_thread() or frame is None
                or pending.in_profiler_code(frame) or self.marks.session.collecting):
            return
        if self.marks.steps_in_epoch == 0:
            self.marks.drop_epoch("torch")
            self.marks.stepless += 1
        elif sys.exc_info()[0] is None:
            self.marks.end_epoch("torch")
        else:
            self.marks.drop_epoch("torch")

    def _optimizer_stepped(self, optimizer, args, kwargs):
        if not self.marks.in_thread():
            self.marks.seen_elsewhere()
            return
        self._fed_a_step()
        if self.marks.open is None and self.on_orphan_step is not None:
            self.on_orphan_step()          # windows begin now: this step's start is unknown, the next begins here
            self.marks.begin_step("torch")
        elif self.marks.open is not None:
            self.marks.step_boundary("torch")
        if self.marks.open is None and self.marks.owner in ("torch", "keras", "lightning"):   # after their epochs
            self.marks.unmarked_steps += 1


@contextlib.contextmanager
def track(session):
    """Mark the epochs and steps of the PyTorch training inside the block in `session` (an open
    profiler Session). Yields the Marks (its .epochs and .steps count what was written)."""
    marks = Marks(session)
    hooks = TorchHooks(marks)
    hooks.install()
    error = None
    try:
        yield marks
    except BaseException as e:
        error = e
        raise
    finally:   # a pass cut short by an exception is not a finished epoch: only a block that finished writes it
        hooks.uninstall()
        marks.close(write=succeeded(error))
