"""Detection: everything that finds epochs and steps in code we do not edit, for one with-block.

    with Session(out) as session, Detection(session, window_s=1.0) as marks:
        run_the_code()

Sources (marks.py ranks them): torch, Keras and Lightning hooks installed when the code imports
them (imports.py), --epoch-fn/--step-fn functions (functions.py), and time windows (windows.py)
when nothing else marks epochs. Also: the worker-process probe (the epoch record's "workers"),
a GC policy, and the first-epoch signal. Every hook, patch, timer and GC setting is undone when the
block ends, however it ends; the Session's meta gets "epochs_from".
"""

import contextlib
import os
import sys

from ..errors import ProfilerError, UsageError
from ..rundir.format import EPOCHS_FROM
from . import functions
from .gc_policy import GcPolicy
from .imports import ImportWatcher
from .marks import Marks, Source, succeeded
from .windows import Windows

EPOCH_SIGNAL_FD = "PROFILER_EPOCH_FD"   # a pipe's write end: one byte when training starts

NO_EPOCHS = ("no epoch was found: mark them with --epoch-fn NAME (each call of the script's "
             "function NAME is an epoch) or --step-fn NAME, or use the Session API (docs/guide.md)")
FRAMEWORKS = {"keras": "Keras", "lightning": "Lightning"}


def how_it_stopped(error):
    """'ended', 'exited with code 3', "exited with 'a message'", 'was interrupted' or 'failed (ValueError)'."""
    if succeeded(error):
        return "ended"
    if isinstance(error, SystemExit):
        return f"exited with code {error.code}" if isinstance(error.code, int) else f"exited with {error.code!r}"
    if isinstance(error, KeyboardInterrupt):
        return "was interrupted"
    return f"failed ({type(error).__name__})"


class Detection:
    def __init__(self, session, *, epoch_fn=None, step_fn=None, gc_policy="default", window_s=1.0):
        """UsageError for a bad function name or policy, before anything is installed; a ProfilerError
        when this interpreter lacks a package the capture needs (psutil), before the script runs."""
        try:
            from ..capture.workers import WorkerProbe
        except ImportError as e:   # a python other than the profiler's own (flamegraph's `-- python`, PYTHONPATH)
            package = (e.name or "psutil").partition(".")[0]   # psutil._psutil_linux: psutil's own
            raise ProfilerError(f"the profiler's capture needs the package {package!r}, which {sys.executable} cannot "
                                f"import: run the profiler with the python it is installed in, or install it there "
                                f"(pip install {package})") from None
        self._probe_type = WorkerProbe
        self.session = session
        self.policy = GcPolicy.parse(gc_policy)
        self.marks = marks = Marks(session)
        self.targets = []
        epoch_fn, step_fn = functions.in_script(epoch_fn), functions.in_script(step_fn)
        if epoch_fn and epoch_fn == step_fn:   # "" is no name: Target says so
            raise UsageError(f"--epoch-fn and --step-fn both name {epoch_fn}: a call is an epoch or a step, not "
                             f"both; give --step-fn the function that runs one step")
        if epoch_fn is not None:   # "" too: Target says it names nothing
            epochs = Source(marks, "epoch-fn")
            self.targets.append(functions.Target(epoch_fn, "--epoch-fn", lambda fn: functions.wrap_calls(
                fn, epochs.begin_epoch, epochs.end_epoch, epochs.abandon_epoch)))
        if step_fn is not None:
            steps = Source(marks, "step-fn")
            self.targets.append(functions.Target(step_fn, "--step-fn", lambda fn: functions.wrap_calls(
                fn, steps.begin_step, steps.end_step, lambda: marks.drop_step("step-fn")), taken=epoch_fn))
        self._watcher, self._windows = ImportWatcher(), Windows(marks, window_s)
        self._probe = self._signal = self._main = None
        self._undo = []
        self._error = None   # what the code raised

    @property
    def watches_main(self):
        """Whether a target is a name in the script itself (the script is compiled with a watch)."""
        return any(t.module is None for t in self.targets)

    def bind_main(self, namespace):
        """Give the compiled script (see functions.compile_with_watch) its watcher, when it has one;
        its names tell what a misnamed function meant."""
        self._main = namespace
        if self.watches_main:
            namespace[functions.WATCH_NAME] = functions.watcher(self.targets, namespace)

    def __enter__(self):
        self._probe = self._probe_type()
        self.session.add_epoch_field("workers", self._probe.take, begin=self._probe.discard)
        self._signal = EpochSignal.from_environment()
        self.marks.on_training_start.append(self._signal.send)
        if self.session.heap is not None:   # --tracemalloc on: the script's imports are no training's memory
            self.marks.on_training_start.append(self.session.heap.restart)
        # kept current, so a final status written early (SIGTERM's, inside the Session) names the source too
        self.marks.on_epoch_written.append(self._record_epochs_from)
        self.policy.attach(self.marks)
        try:
            self._install()
            self._watcher.install()
            self._probe.start()
        except BaseException:
            self._restore(write=False)
            raise
        return self.marks

    def __exit__(self, exc_type, exc, tb):
        self._error = exc
        self._restore(write=succeeded(exc))
        return False

    def _restore(self, write):
        """Undo everything installed, each step whatever the others raise (a full disk can make the
        last window's write fail): no hook or patch outlives the script. Callbacks run last in, first out."""
        with contextlib.ExitStack() as stack:
            stack.callback(self._signal.close)
            stack.callback(self.policy.restore)
            stack.callback(self._record_epochs_from, stopped=self._error is not None)
            stack.callback(self.marks.close, write=write)
            for t in self.targets:
                stack.callback(t.undo)
            for undo in self._undo:
                stack.callback(undo)
            stack.callback(self._windows.stop if write else self._windows.pause)
            stack.callback(self._probe.stop)
            stack.callback(self._watcher.uninstall)

    def _record_epochs_from(self, stopped=False):
        """The source of the written epochs; of a run that stopped on an exception (sys.exit(0)
        included) whose epochs with steps are only the one it stopped in (held, written unfinished),
        the source that began that one."""
        marks = self.marks
        self.session.user_meta[EPOCHS_FROM] = (marks.begun if stopped and self.session.holding and not marks.steps
                                                 else marks.owner if marks.epochs else None)

    def misnamed(self):
        """Lines for the --epoch-fn and --step-fn names that marked nothing because they name no
        function the code defined (with a guess at the name meant where there is one): `profiler
        run` makes them its error when the code itself succeeded."""
        return [t.note(self._main) for t in self.targets if t.misnamed]

    def notes(self):
        """Lines for the user: what was not found, or not applied (but for misnamed functions)."""
        notes = [f"time windows stopped early: {self._windows.error}"] if self._windows.error else []
        marks = self.marks
        uncalled = [t for t in self.targets if not t.misnamed and t.option == "--epoch-fn"]
        if not marks.epochs and marks.stepless and not marks.steps:
            notes.append(f"no epoch was written: {marks.stepless:,} DataLoader pass"
                         f"{'es' if marks.stepless > 1 else ''} ran with no optimizer step (inference, or weights "
                         f"updated by hand), and only a pass with one is an epoch: mark epochs with --epoch-fn NAME "
                         f"(each call of the script's function NAME) or --step-fn NAME")
        elif not marks.epochs and marks.begun is not None:
            what = {"windows": "time window", "epoch-fn": "--epoch-fn epoch"}.get(marks.begun, f"{marks.begun} epoch")
            stopped = f"the code {how_it_stopped(self._error)} before its first {what} ended"
            mark = ("; a training loop that ran in less than a window (a Keras train_on_batch loop, a short "
                    "script) is no epoch: mark its epochs with --epoch-fn NAME (each call of the script's function "
                    "NAME is an epoch)" if marks.begun == "windows" and not marks.steps and succeeded(self._error)
                    else "")   # a script that failed before its first window ended: its failure is the news
            notes.append(f"no epoch finished: {stopped}; that epoch is written as it stood then, flagged unfinished"
                         if self.session.unfinished else
                         f"no epoch was written: {stopped} (one cut short before its first step is not written){mark}")
        elif not marks.epochs and not succeeded(self._error):   # before any epoch began: no marker to blame
            notes.append(f"no epoch was written: the code {how_it_stopped(self._error)} before any epoch began")
        elif not marks.epochs and uncalled and not marks.elsewhere:   # called in other threads: said below
            home = uncalled[0].home   # its module's own code calls it by that module's name, not the script's
            notes.append(f"--epoch-fn {uncalled[0].name}: the function was never called, so no epoch was marked"
                         + (f"; it is {home}, imported into the script, and calls of it that do not go through "
                            f"the script's name are not seen: name it --epoch-fn {home}" if home else ""))
        elif not marks.epochs and not marks.elsewhere and not any(t.misnamed for t in self.targets):
            notes.append(NO_EPOCHS)
        if marks.unmarked_steps:
            n = marks.unmarked_steps
            steps = f"{n:,} optimizer step{'s' if n > 1 else ''}"
            notes.append(f"{steps} ran outside any DataLoader pass once torch's passes marked the epochs, and "
                         f"{'are' if n > 1 else 'is'} in no epoch (batches that come from no new pass: "
                         f"itertools.cycle(loader), batches kept from an earlier pass): mark epochs with --epoch-fn "
                         f"NAME or the Session API (docs/guide.md) to count them" if marks.owner == "torch" else
                         f"{steps} ran outside {FRAMEWORKS[marks.owner]}'s epochs (a loop of the script's own, after "
                         f"or beside its training) and {'are' if n > 1 else 'is'} in no epoch: the run's epochs are "
                         f"{FRAMEWORKS[marks.owner]}'s; profile that loop in a run of its own to see them")
        if "lightning" in marks.spawned:
            notes.append("Lightning trained in processes it spawned (a strategy such as ddp_spawn), which the "
                         "profiler does not follow: use strategy=\"ddp\", whose rank 0 trains in this process, or "
                         "run every rank under torchrun with -m profiler run (docs/multi-rank.md)")
        if marks.world_size:
            notes.append(f"Lightning trained on {marks.world_size} ranks, starting the others itself: only this "
                         f"process, rank 0, was recorded, and the other ranks count as its child processes; to "
                         f"record every rank and find the one that holds the others back, run "
                         f"profiler run --nproc-per-node {marks.world_size} (docs/multi-rank.md)")
        if marks.elsewhere:
            what = "epoch or step" if marks.elsewhere == 1 else "epochs or steps"
            notes.append(f"{marks.elsewhere:,} {what} began in threads other than the one that runs the code, "
                         f"and were not recorded: the profiler marks that thread (train there, or open a Session in "
                         f"the training thread)")
        if self.policy.kind != "default":
            if not marks.training_started:
                found = "only time windows were" if marks.epochs else "no epoch or step was"
                notes.append(f"--gc-policy {self.policy}: {found} found, so it was never applied")
            elif self.policy.kind == "manual" and not marks.steps:
                notes.append(f"--gc-policy {self.policy}: no step was found, so gc.collect() ran after each "
                             f"epoch instead")
        return notes

    def _install(self):
        """Hooks for each source of epochs, installed as the code imports what they need."""
        from . import lightning
        marks, watcher, windows = self.marks, self._watcher, self._windows
        for t in self.targets:
            if t.module is not None:
                watcher.on_load(t.module, lambda module, t=t: t.bind(vars(module)))
        if self.targets:
            if not any(t.option == "--epoch-fn" for t in self.targets):
                windows.start()
            if not any(t.option == "--step-fn" for t in self.targets):
                watcher.on_load("torch", lambda module: self._torch(epochs=False, on_orphan_step=None))
            return
        windows.start()
        watcher.on_start("torch", windows.pause)   # at once if torch is imported already (a test session)
        watcher.on_load("torch", lambda module: (self._torch(epochs=True, on_orphan_step=windows.start),
                                                 windows.resume_later()))
        watcher.on_load("keras", lambda module: self._keras())
        for package in lightning.PACKAGES:
            watcher.on_load(package, lambda module: self._undo.append(
                lightning.inject(module, Source(marks, "lightning"))))

    def _keras(self):
        from . import keras
        self._undo.append(keras.inject(Source(self.marks, "keras")))

    def _torch(self, *, epochs, on_orphan_step):
        from .torch import TorchHooks
        hooks = TorchHooks(self.marks, epochs=epochs, on_orphan_step=on_orphan_step, workers=self._probe)
        self._undo.append(hooks.uninstall)
        hooks.install()


class EpochSignal:
    """The write end of a pipe named by $PROFILER_EPOCH_FD (`profiler flamegraph
    --from-first-epoch` starts py-spy when a byte arrives): one byte when training starts, and
    closed at the end either way. The variable is removed so the code's own children do not
    see it."""

    def __init__(self, fd):
        self.fd = fd

    @classmethod
    def from_environment(cls):
        value = os.environ.pop(EPOCH_SIGNAL_FD, None)
        return cls(int(value) if value is not None and value.isdigit() else None)

    def send(self):
        if self.fd is not None:
            try:
                os.write(self.fd, b"1")
            except OSError:
                pass
            self.close()

    def close(self):
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
