"""Lightning: a callback that marks train epochs and train batches as steps.

    with Session("runs/mine") as session:
        trainer = Trainer(max_epochs=5, callbacks=[ProfilerCallback(session)])
        trainer.fit(model, train_loader, val_loader)

An epoch runs from on_train_epoch_start to on_train_epoch_end (the validation that Lightning runs
at the end of a train epoch is inside it; the sanity check before training is not); a step runs
from the end of one train batch (or the epoch's start) to the end of the next, so it holds the
batch's fetch from the DataLoader as well as its training and optimizer step, as a PyTorch step
does (profiler.integrations.torch); the time from the last batch to the epoch's end (validation)
is in no step, and neither is a validation inside the epoch (val_check_interval): the step open
when it starts is dropped, and the next begins when it ends. Works with `pytorch_lightning` and
`lightning.pytorch`; `profiler run` injects the callback into every Trainer without an edit
(inject()).

A strategy that spawns its processes (ddp_spawn) pickles the Trainer and its callbacks to train in
them: the callback goes as a Callback that does nothing, since the session it marks is this
process's, and `profiler run` notes that the training ran where it was not followed. Under
strategy="ddp" this process is rank 0 and the others run the script anew, unprofiled: `profiler
run` notes that only rank 0 was recorded.
"""

import functools
import importlib
import signal
import sys

PACKAGES = ("pytorch_lightning", "lightning.pytorch")
_classes = {}


def callback_class(package):
    """The ProfilerCallback class for one Lightning package (its Trainer accepts only its own
    Callback subclasses)."""
    if package.__name__ not in _classes:
        class ProfilerCallback(package.Callback):
            def __init__(self, session):
                self.session = session
                self.in_epoch = False   # between on_train_epoch_start and on_train_epoch_end

            def on_sanity_check_start(self, trainer, pl_module):
                _sigterm_to_the_trainer()

            def on_train_start(self, trainer, pl_module):
                _sigterm_to_the_trainer()
                # strategy="ddp" started the other ranks itself: its launcher holds their processes, none where
                # torchrun or SLURM started every rank (a spawning launcher trains in its children, unprofiled)
                if trainer.world_size > 1 and getattr(getattr(trainer.strategy, "launcher", None), "procs", None):
                    getattr(self.session, "ranks_elsewhere", lambda n: None)(trainer.world_size)

            def on_train_epoch_start(self, trainer, pl_module):
                self.in_epoch = True
                self.session.begin_epoch()
                self.session.begin_step()

            def on_train_epoch_end(self, trainer, pl_module):
                self.in_epoch = False
                self.session.end_epoch()   # drops the step open since the last batch

            def on_validation_start(self, trainer, pl_module):
                if self.in_epoch:   # inside a train epoch: the step open since the last batch holds none
                    self.session.abandon_step()

            def on_validation_end(self, trainer, pl_module):
                if self.in_epoch:   # back to the epoch's batches
                    self.session.begin_step()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                self.session.end_step()
                self.session.begin_step()

            def on_exception(self, trainer, pl_module, exception):
                self.session.abandon_epoch()

            def __reduce__(self):   # sent to a spawned process, which the session does not follow
                getattr(self.session, "trains_elsewhere", lambda: None)()
                return _unprofiled, (package.__name__,)

        _classes[package.__name__] = ProfilerCallback
    return _classes[package.__name__]


def _sigterm_to_the_trainer():
    """Lightning's Trainer, as it starts a fit, installs a SIGTERM handler that notes the signal
    (the Trainer stops after the batch in progress, raising SIGTERMException, a SystemExit) and then
    calls each handler it replaced: the profiler Session's, which ended the process at once. Under
    python that was SIG_DFL, which it does not call: the Session's is taken out of the Trainer's
    list as its sanity check and its training start, so the Trainer decides alone, as there (its
    teardown puts the Session's back)."""
    from ..capture.session import Session
    handler = signal.getsignal(signal.SIGTERM)
    handlers = getattr(handler, "signal_handlers", None)
    if isinstance(handlers, list):
        handler.signal_handlers = [h for h in handlers if not isinstance(getattr(h, "__self__", None), Session)]


def _unprofiled(package):
    """What a ProfilerCallback becomes in a process Lightning spawned: a Callback that does nothing."""
    return importlib.import_module(package).Callback()


def inject(package, session):
    """Add a ProfilerCallback(session) to every Trainer of `package` (a Lightning module).
    Returns the function that undoes it."""
    trainer = package.Trainer
    own = trainer.__dict__["__init__"]
    callback = callback_class(package)

    @functools.wraps(own)
    def __init__(self, *args, callbacks=None, **kwargs):
        if callbacks is None:
            callbacks = []
        elif not isinstance(callbacks, (list, tuple)):
            callbacks = [callbacks]
        own(self, *args, callbacks=[*callbacks, callback(session)], **kwargs)

    trainer.__init__ = __init__

    def undo():
        trainer.__init__ = own

    return undo


def __getattr__(name):
    """ProfilerCallback: the class for whichever Lightning package is installed (pytorch_lightning
    first)."""
    if name != "ProfilerCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for package in PACKAGES:
        if package in sys.modules:
            return callback_class(sys.modules[package])
    for package in PACKAGES:
        try:
            return callback_class(importlib.import_module(package))
        except ImportError:
            continue
    raise ImportError("ProfilerCallback needs Lightning: pip install pytorch-lightning (or profiler[lightning])")
