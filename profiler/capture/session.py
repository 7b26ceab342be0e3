"""Session: profile the epochs and steps of any training loop into a run directory.

    with Session("runs/my-run", tracemalloc=False, meta={"model": "mine"}) as session:
        for epoch in range(epochs):
            with session.epoch(epoch):
                for batch in batches:
                    with session.step():
                        with session.op("forward"):
                            ...

Frameworks that call back at boundaries use begin_epoch()/end_epoch()/abandon_epoch() and
begin_step()/end_step()/abandon_step() instead of the context managers.

Each finished epoch is one line in epochs.jsonl, flushed as the epoch ends, with its steps
(steps.bin) and GC events (gc_events.bin) written before it; nothing accumulates in memory. The
process's RSS is read as steps are written, at most once a second (rss.bin): a long epoch's
memory on the way, not only at its end. An epoch with steps that the run stops in (an exception,
Ctrl-C, SIGTERM) is written too, flagged "unfinished": a run of one long epoch that crashes keeps
its steps.
Options are checked when the Session is built, before anything is written. The hooks
(gc.callbacks, tracemalloc, a SIGTERM handler) are removed on every exit path, and the final
status (completed, halted, failed, interrupted, terminated) is written to meta.json.
"""

import contextlib
import datetime
import gc
import os
import platform
import signal
import socket
import sys
import threading
import time

from ..errors import SessionActiveError, UsageError
from ..interrupts import interrupts_held
from ..rundir import format as fmt
from ..rundir.writer import RunWriter, RunWriteError
from . import options, torchrun
from .gc_timer import GcTimer, merged
from .memory import MemoryProbe
from .objects import TrackedCounter
from .ops import OpTimers
from .steps import StepRecorder

_now = time.perf_counter_ns
# steps written at least this long after the last RSS reading take one (~2 us): the steps' own once-a-second
# write (steps.FLUSH_NS) comes due a few microseconds under a second after the reading before, so takes one
RSS_SAMPLE_NS = 990_000_000
_active = None
_lock = threading.Lock()


def _version(package):
    """A package's installed version from its dist-info directory name ({name}-{version}.dist-info,
    as pip installs it), without importing the package (numba adds ~10^5 GC-tracked objects) or
    importlib.metadata (~2,000); None when not found."""
    module = sys.modules.get(package)
    if isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    prefix = package.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.lower().startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix):-len(".dist-info")]
    return None


def _now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _discard(data):
    pass


def _forget_in_child():
    """A process forked while a Session is open (DataLoader workers, multiprocessing) is not the
    profiled loop: it drops the Session's hooks and never writes to the parent's run directory."""
    global _active
    session, _active = _active, None
    if session is not None:
        session._unhook()
        session._steps.sink = session._steps.drop = _discard


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class _Epoch:
    """The context manager returned by Session.epoch()."""

    def __init__(self, session, index):
        self.session, self.index = session, index

    def __enter__(self):
        self.index = self.session.begin_epoch(self.index)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self.session.end_epoch()
            except BaseException:   # a record that cannot be written: the block's epoch ends unwritten
                self.session.abandon_epoch()
                raise
        else:
            self.session.abandon_epoch()
        return False


def _error_text(name, value):
    """'Name: message', as Python prints it, however str(value) fails, and at most format.MAX_ERROR_CHARS long."""
    try:
        message = str(value)
    except Exception:   # the program's own __str__: its exception must not stop the final status or the unhooking
        message = "<exception str() failed>"
    return fmt.capped_error(f"{name}: {message}")


class Session:
    def __init__(self, run_dir, *, tracemalloc=False, meta=None, frames=8, every=1, window=4, cooldown=50,
                 budget=0.10, gc_event_threshold_s=0.001):
        """tracemalloc: False (light capture), True (deep: snapshot diff every `every` epochs with
        `frames` frames) or "auto" (deep for `window` epochs once light signals show growth, then
        resting at least `cooldown` epochs and until the run's time covers the windows' cost within
        `budget`).
        gc_event_threshold_s: a collection at least this long is a GC event (generation 2 always is).
        Every option is checked here: a bad one is a UsageError and nothing is written."""
        self.run_dir = options.run_dir(run_dir)
        self.options = options.check(tracemalloc=tracemalloc, frames=frames, every=every, window=window,
                                     cooldown=cooldown, budget=budget, gc_event_threshold_s=gc_event_threshold_s)
        self.user_meta = options.meta(meta)
        self.ranks = torchrun.rank_env() or dict.fromkeys(torchrun.FIELDS)   # a malformed torchrun env fails here
        self.ops = OpTimers()
        self.op = self.ops.op
        self._steps = StepRecorder(self._write_steps, self._drop_steps)
        self._state = "new"          # new -> open -> closed
        self._thread = None
        self._writer = self.memory = self.heap = self.gc_timer = None
        self._halted = False
        self._epoch = None           # index of the open epoch
        self._last = None            # index of the last epoch begun and finished
        self._unlined = None         # (steps on disk, epochs file size) of the closing epoch before its line
        self._held = None            # (line, index, steps on disk) of an epoch abandoned with steps (_hold)
        self._start_ns = 0
        self._rss_due_ns = 0         # steps written after this read the RSS (rss.bin)
        self._ended_ns = 0           # when the last epoch written ended, the profiler's work for it done
        self._gap_s = None           # the open epoch's gap_s: the program's time since then
        self._gc_before = None       # the open epoch's gc_before: the collections in that time
        self._gc_dropped = None      # the collections of epochs since dropped or failed, and before them
        self._gc_ending = None       # the ending epoch's own, until its line lands
        self._fields = {}
        self._field_begins = []
        self._tracked = TrackedCounter()
        self._previous_sigterm = None
        self._term = None            # "waits" while steps are written, "came" when a SIGTERM came meanwhile
        self.epochs_written = 0
        self.unfinished = None       # (index, steps) of the epoch written flagged unfinished as the run ended

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self):
        global _active
        if self._state != "new":
            raise UsageError("a Session is entered once: open a new Session for another run")
        with _lock:
            if _active is not None:
                raise SessionActiveError(f"another profiler Session is active (writing {_active.run_dir}); "
                                         f"finish it before starting one for {self.run_dir}")
            self._writer = RunWriter(self.run_dir)
            _active = self
        self._state, self._thread = "open", threading.get_ident()
        self._thread_name = threading.current_thread().name
        try:
            origin_ns, origin_unix = _now(), time.time()
            self._origin_ns = origin_ns
            self._meta = {
                "format": fmt.FORMAT, "status": "running", "error": None, "meta": self.user_meta,
                "python": sys.version.split()[0], "python_implementation": platform.python_implementation(),
                "numpy": _version("numpy"), "numba": _version("numba"), "host": socket.gethostname(),
                "pid": os.getpid(), "cpu_count": os.cpu_count(), "gc_threshold": list(gc.get_threshold()),
                **self.ranks, "clock_origin_unix": origin_unix, "clock_origin_ns": origin_ns,
                "started": _now_iso(), "finished": None, "finished_unix": None, "options": self.options,
            }
            self._writer.write_meta(self._meta)
        except BaseException:
            self._teardown()
            self._writer.discard()
            raise
        try:
            self.memory = MemoryProbe()
            self.gc_timer = GcTimer(origin_ns, self.options["gc_event_threshold_s"], self._steps,
                                    on_full=self._write_gc_events)
            if self.options["tracemalloc"] is not False:
                from .heap import HeapTracker   # tracemalloc and its filters only when asked for
                o = self.options
                self.heap = HeapTracker(o["tracemalloc"], frames=o["frames"], every=o["every"], window=o["window"],
                                        cooldown=o["cooldown"], budget=o["budget"])
            self.gc_timer.install()
            if self.heap is not None:
                self.heap.start()
            self._install_sigterm()
        except BaseException as e:
            self._finish("failed", f"the Session could not start: {type(e).__name__}: {e}")
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._state != "open":   # ended already: a SIGTERM, or a forked child's copy
            return False
        unended = None
        if exc_type is None or (issubclass(exc_type, SystemExit) and exc.code in (0, None)):
            status, error = ("halted" if self._halted else "completed"), None
            unended = None if exc_type else self._epoch   # sys.exit(0) inside an epoch: it stopped there
        elif issubclass(exc_type, KeyboardInterrupt):
            status, error = "interrupted", "KeyboardInterrupt"
        elif issubclass(exc_type, SystemExit):
            status, error = "failed", _error_text("SystemExit", exc.code)
        else:
            status, error = "failed", _error_text(exc_type.__name__, exc)
        try:
            self._finish(status, error, stopped=exc_type is not None)
        except RunWriteError as e:
            print(f"profiler: {e}; the final status ({status}) could not be recorded", file=sys.stderr)
            if exc_type is None:
                raise
        if unended is not None:   # said once every hook is gone: a stderr that fails cannot leave them
            with contextlib.suppress(OSError, ValueError):
                print(f"profiler: epoch {unended} began but did not end (begin_epoch() without end_epoch()): "
                      f"it is not written", file=sys.stderr)
        return False

    def _finish(self, status, error, stopped=True):
        """Write what is buffered and the final status, then remove every hook; a Ctrl-C meanwhile
        (a second one, or a parent's SIGINT after the terminal's: profiler scaling's children) is
        raised after, so the status is written whole. `stopped`: the run ended on an exception
        (sys.exit(0) included) or a signal, so the epoch it stopped in is written flagged unfinished."""
        with interrupts_held():
            self._write_final(status, error, stopped)

    def _write_final(self, status, error, stopped):
        try:
            if stopped:   # an epoch the run stopped in (SIGTERM, no end_epoch() before the exception): held
                self.abandon_epoch()
            self._cut_unwritten()
            self._write_held(stopped)
            self._write_pending_gc_events()
            self._meta.update(status=status, error=error, finished=_now_iso(), finished_unix=time.time(),
                              epochs=self.epochs_written)
            if self.gc_timer is not None and self.gc_timer.events_dropped:
                self._meta["gc_events_dropped"] = self.gc_timer.events_dropped
            self._writer.check_alive()   # a run whose epochs.jsonl is gone records no final status
            self._writer.write_meta(self._meta)
        finally:
            self._teardown()

    def _unhook(self):
        """Remove the hooks; all a forked child does (the files are its parent's), and the first part of _teardown."""
        self._state = "closed"
        self._restore_sigterm()
        if self.gc_timer is not None:
            self.gc_timer.uninstall()
        if self.heap is not None:
            self.heap.stop()

    def _teardown(self):
        global _active
        self._unhook()
        if self.memory is not None:
            self.memory.close()
        if self._writer is not None:
            self._writer.close()
        with _lock:
            if _active is self:
                _active = None

    # -- SIGTERM -------------------------------------------------------------------------------
    def _install_sigterm(self):
        """While the Session is open, SIGTERM records status 'terminated' and then ends the process
        as the default action would. Only from the main thread, and only over the default
        handler: a handler of the program's own decides what SIGTERM means (an exception it raises
        is recorded like any other)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        self._previous_sigterm = signal.SIG_DFL
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _restore_sigterm(self):
        if self._previous_sigterm is None:
            return
        if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._previous_sigterm = None

    def _on_sigterm(self, signum, frame):
        if self._term is not None:   # inside a steps write: handled as it ends
            self._term = "came"
            return
        if self._state == "open":
            try:
                self._finish("terminated", "SIGTERM")
            except Exception:   # the process ends either way; what was flushed before stays
                pass
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def mark_halted(self):
        """Record that the loop stopped early on purpose (a handler halted it)."""
        self._check_open("mark_halted()")
        self._halted = True

    def add_epoch_field(self, name, read, *, begin=None):
        """Record read() (a JSON value) under `name` in every epoch record (e.g. "workers"); begin(),
        if given, is called as each epoch begins (a reader that samples all along drops what it saw
        between two epochs)."""
        if not isinstance(name, str) or not name:
            raise UsageError(f"add_epoch_field({name!r}, ...): the name must be a non-empty string")
        if not callable(read):
            raise UsageError(f"add_epoch_field({name!r}, {read!r}): read must be a function called at each "
                             f"epoch's end, e.g. lambda: loss")
        if name in fmt.SESSION_FIELDS:
            raise UsageError(f"add_epoch_field({name!r}): {name!r} is a field the Session writes itself")
        self._check_open("add_epoch_field()")
        if name in self._fields:
            raise UsageError(f"add_epoch_field({name!r}): a field {name!r} was added already; give each its own name")
        if begin is not None and not callable(begin):
            raise UsageError(f"add_epoch_field({name!r}, begin={begin!r}): begin must be a function called at each "
                             f"epoch's start")
        self._fields[name] = read
        if begin is not None:
            self._field_begins.append(begin)

    # -- epochs --------------------------------------------------------------------------------
    def _check_open(self, what):
        """Refuse a call after the with-block ended (before it, and from any thread, is fine)."""
        if self._state == "closed":
            raise UsageError(f"session.{what} used after its with-block ended: call it inside `with Session(...)`")

    def _check_usable(self, what):
        if self._state != "open":
            when = "before `with Session(...)` began" if self._state == "new" else "after its with-block ended"
            raise UsageError(f"session.{what} used {when}: record epochs inside `with Session(...) as session:`")
        if threading.get_ident() != self._thread:
            raise UsageError(f"session.{what} called from thread {threading.current_thread().name!r}, but the "
                             f"Session was opened in thread {self._thread_name!r}: one Session records one "
                             f"thread's loop (open a Session per process, in the thread that trains)")

    @property
    def collecting(self):
        """Whether the calling thread is inside a garbage collection: an epoch ended there (a
        pending call that lands in a finalizer the collector runs) would split a pause between two
        records."""
        return self.gc_timer is not None and self.gc_timer.collecting

    def epoch(self, index=None):
        """Context manager for one epoch; index None means the next one (0 first)."""
        self._check_usable("epoch()")
        options.epoch_index(index, self._last)   # a bad index fails here, before the body runs
        return _Epoch(self, index)

    def begin_epoch(self, index=None):
        """Begin an epoch (index None: the next one); returns its index."""
        self._check_usable("begin_epoch()")
        if self._epoch is not None:
            raise UsageError(f"epoch began inside epoch {self._epoch}: end it first (epochs do not nest)")
        asked, index = index, options.epoch_index(index, self._last)   # a bad index fails before the held epoch goes
        if self._held is not None:
            self._write_held(stopped=False)   # the loop went on past the epoch it held
            index = options.epoch_index(asked, self._last)   # its steps not cut: this index or a later one
        self._start_ns = 0   # none to hold before the epoch's clock starts (a SIGTERM meanwhile: abandon_epoch)
        self._epoch = index
        self._steps.start_epoch(index)
        self.gc_timer.rehook()   # removed between epochs: what it missed counts with this epoch (gc.missed)
        self.ops.take()   # discard what ran between epochs, before the epoch's clock starts
        entered = _now()
        # the program's time since the last epoch ended (the profiler's own work for it left out), and its
        # collections, with those before an epoch dropped meanwhile (a validation pass: the gap spans it)
        self._gap_s = (entered - self._ended_ns) / 1e9 if self._ended_ns else None
        before = self.gc_timer.reset(entered)
        self._gc_before = before if self._gc_dropped is None else merged(self._gc_dropped, before)
        self._gc_dropped = None
        self._start_ns = entered
        if self._field_begins:
            try:
                for begin in self._field_begins:
                    begin()
            except BaseException:   # the epoch never began: not left open for the next one to trip on
                self.abandon_epoch()
                raise
            self.ops.take()   # nor are the ops they ran
            self._start_ns = _now()
            self.gc_timer.reset(self._start_ns)   # the field begins' own collections are nobody's
        return index

    def end_epoch(self):
        """End the open epoch: its steps, GC events and record are written before this returns."""
        end = _now()
        self._check_usable("end_epoch()")
        index = self._epoch
        if index is None:
            raise UsageError("end_epoch() without begin_epoch()")
        if self._steps.open_ns:
            self._steps.abandon()
        line = self._writer.encode_epoch(self._record(index, end))   # unencodable: fails with the epoch still open
        steps = self._steps.recorded
        self._steps.flush()
        # on disk with no line yet, and where the line ends: set before the epoch closes (see _cut_unwritten)
        self._unlined = (steps, self._writer.size(fmt.EPOCHS) + len(line))
        self._epoch = None
        self._steps.close_epoch()
        self._last = index
        try:
            self._write_gc_events(self.gc_timer.take_events())
            self._writer.write_epoch_line(line, index)
        except BaseException:
            self._cut_unwritten()   # _ended() if the line landed after all
            if self._gc_ending is not None:
                self._dropped()
            raise
        self._unlined = None
        self.epochs_written += 1
        self._ended()

    def _record(self, index, end, unfinished=False):
        """The open epoch's record, ending at `end`. An unfinished one (_hold) has no heap snapshot
        and no add_epoch_field fields: taken as the run fails, they could fail too."""
        wall = (end - self._start_ns) / 1e9
        gc_record = self._gc_ending = self.gc_timer.take()   # the gap's, should its line not land (_dropped)
        self.gc_timer.rehook()
        gc_record["tracked"] = self._tracked.sample()
        ops = self.ops.take()
        rss, malloc_bytes = self.memory.read()
        heap = None
        if self.heap is not None and not unfinished:
            heap = self.heap.epoch_end(index, wall, sum(gc_record["pause_s"]), rss, malloc_bytes)
        record = {"epoch": index, "start_s": (self._start_ns - self._origin_ns) / 1e9, "wall_s": wall,
                  "steps": self._steps.recorded, "gc": gc_record, "rss_bytes": rss, "malloc_bytes": malloc_bytes,
                  "heap": heap, "ops": ops}
        if self._gap_s is not None:
            record["gap_s"] = self._gap_s
        if self._gc_before is not None:
            record["gc_before"] = self._gc_before
        if unfinished:
            record["unfinished"] = True
        else:
            for name, read in self._fields.items():
                record[name] = read()
        return record

    def _ended(self):
        """An epoch's line landed: the next gap starts now, and the collections of the profiler's own
        work for the epoch are nobody's."""
        self._gc_dropped = self._gc_ending = None
        self._ended_ns = _now()
        self.gc_timer.reset(self._ended_ns)

    def _dropped(self):
        """An epoch that has no line is part of the gap its time is in: so are its collections (those
        its end took, if it got that far) and those before it."""
        self._gc_dropped = merged(self._gc_before, self._gc_ending)
        self._gc_ending = None

    def abandon_epoch(self, hold=True):
        """Drop the open epoch unwritten (it raised, or a framework discarded it); its index is free
        for the next epoch. One with steps is held (_hold) until the run ends, in case the run ends
        on it; with `hold` False (a time window cut by the run's end: no epoch of the program's)
        its steps are cut now. GC events are kept. Called while the loop's own exception
        propagates, so a failure to write or cut the steps is one line on stderr, not an exception
        in its place (see _cut_unwritten for the steps left on disk). A second Ctrl-C meanwhile (the first's
        epoch being held) is raised once it is done: cut short, the hold lost the epoch."""
        if self._state != "open" or self._epoch is None:
            return
        with interrupts_held():
            if self._steps.open_ns:
                self._steps.abandon()
            # not one whose clock has not started, nor one whose end took its record (one JSON cannot hold)
            if hold and self._steps.recorded and self._start_ns and self._gc_ending is None:
                try:
                    self._hold()
                except RunWriteError as e:   # its steps are cut below, as those of an epoch not held
                    print(f"profiler: {e}", file=sys.stderr)
            self._dropped()
            self._cut_unwritten()
            self._write_pending_gc_events()

    @property
    def holding(self):
        """Whether an epoch abandoned with steps is held, to be written flagged unfinished if the run
        stops on an exception (sys.exit(0) included), Ctrl-C or SIGTERM."""
        return self._held is not None

    def _hold(self):
        """Take the open epoch's record as it stands, flagged unfinished, and write its steps. The
        record is written if the run ends on it (an exception, sys.exit(0) included, Ctrl-C, SIGTERM:
        a run of one long epoch that crashes keeps its steps); it is dropped, and its steps cut,
        when another epoch begins (a loop that goes on past the error) or the Session's block
        returns (a pass a framework discarded)."""
        index = self._epoch
        line = self._writer.encode_epoch(self._record(index, _now(), unfinished=True))
        steps = self._steps.recorded
        self._steps.flush()
        self._held = (line, index, steps)
        self._epoch = None
        self._steps.close_epoch()

    def _write_held(self, stopped):
        """Write the held epoch's line if the run `stopped` in it, else cut its steps."""
        if self._held is None:
            return
        (line, index, steps), self._held = self._held, None
        end = self._writer.size(fmt.EPOCHS) + len(line)
        try:
            if stopped:
                try:
                    self._writer.write_epoch_line(line, index)
                except RunWriteError as e:
                    print(f"profiler: {e}", file=sys.stderr)
                if self._writer.holds(fmt.EPOCHS, end):
                    self.unfinished = (index, steps)
                    return
            self._drop_steps(steps)
        except RunWriteError as e:
            print(f"profiler: {e}", file=sys.stderr)
            self._uncut(index)

    def _uncut(self, index):
        """Steps of epoch `index` that could not be cut stay in steps.bin under it: the next epoch
        takes that index or a later one, so steps.bin stays in epoch order."""
        if index:
            self._last = max(index - 1, self._last or 0)

    def _cut_unwritten(self):
        """Cut the steps on disk of an epoch that has no line: the open one's (written as they came),
        or those of an epoch whose line failed or was interrupted (self._unlined). Exactly one
        applies at any point of end_epoch: _unlined is set before the epoch closes. A line that
        landed whole before the interrupt keeps its steps and counts as written: the Session's
        SIGTERM handler runs wherever the main thread checks for signals, also after the line's
        write and before the writer or end_epoch could note it. Steps that cannot be cut stay
        under their epoch's index, and the next epoch takes that index or a later one, so
        steps.bin stays in epoch order (the reader refuses one that goes back)."""
        open_epoch = self._epoch
        try:
            if open_epoch is not None:
                self._steps.abandon()
                self._steps.discard()
            elif self._unlined is not None:
                (n, line_end), self._unlined = self._unlined, None
                if self._writer.holds(fmt.EPOCHS, line_end):
                    self.epochs_written += 1
                    self._ended()
                else:
                    self._drop_steps(n)
        except RunWriteError as e:
            print(f"profiler: {e}", file=sys.stderr)
            if open_epoch is not None:
                self._uncut(open_epoch)
        finally:   # both markers cleared, so nothing is cut twice
            self._epoch = None
            self._steps.close_epoch()
            self._unlined = None

    # -- steps ---------------------------------------------------------------------------------
    def step(self):
        """Context manager for one training step (inside an epoch): wall time and GC pauses."""
        return self._steps

    def begin_step(self):
        self._steps.begin()

    def begin_first_step(self):
        """Begin the open epoch's first step at the epoch's start, with the GC pauses since: a step
        whose start is known only as it ends (an epoch that opened no step, ended by its first
        optimizer step: integrations/marks.py)."""
        if self._steps.recorded:
            raise UsageError("begin_first_step() after a step of this epoch: only the epoch's first step can "
                             "begin at its start")
        self._steps.begin_at(self._start_ns)
        for generation, pause_ns in enumerate(self.gc_timer.pause_ns):   # reset when the epoch began
            if pause_ns:
                self._steps.add_gc(generation, pause_ns)

    def end_step(self):
        self._steps.end()

    def abandon_step(self):
        """Drop the open step unrecorded (a framework's step that did not finish)."""
        self._steps.abandon()

    # -- writing -------------------------------------------------------------------------------
    def _write_steps(self, data):
        """Append steps, the Session's SIGTERM handler waiting for the write: it writes the open epoch,
        which would count these steps before they are written, or write them twice. The RSS is read
        first (_read_rss): whatever stops it leaves the steps unwritten, as the recorder counts them."""
        self._term = "waits"
        try:
            now = _now()
            if now >= self._rss_due_ns:
                self._rss_due_ns = now + RSS_SAMPLE_NS
                self._read_rss(now)
            self._writer.append_binary(fmt.STEPS, data)
        finally:
            waited, self._term = self._term, None
            if waited == "came":
                self._on_sigterm(signal.SIGTERM, None)

    def _read_rss(self, now):
        """Append the RSS to rss.bin. One that cannot be written (a full disk) stops the readings, said
        once on stderr, and not the training: its epochs' lines still hold their RSS."""
        try:
            self._writer.append_binary(fmt.RSS, fmt.RSS_SAMPLE.pack(now, self._steps.epoch, *self.memory.resident()))
        except (RunWriteError, OSError) as e:
            self._rss_due_ns = 1 << 63
            with contextlib.suppress(OSError, ValueError):
                print(f"profiler: {e}; RSS is read at each epoch's end only from now on", file=sys.stderr)

    def _drop_steps(self, n):
        self._writer.drop_binary(fmt.STEPS, n * fmt.STEP_RECORD.itemsize)

    def _write_gc_events(self, data):
        if data:
            self._writer.append_binary(fmt.GC_EVENTS, data)

    def _write_pending_gc_events(self):
        """The events since the last epoch, outside end_epoch (an abandoned epoch, the run's end):
        ones that cannot be written are counted as dropped (meta.json's gc_events_dropped) and
        said on stderr, so the loop's own exception and the final status go on."""
        if self.gc_timer is None:
            return
        data = self.gc_timer.take_events()
        try:
            self._write_gc_events(data)
        except RunWriteError as e:
            self.gc_timer.events_dropped += len(data) // fmt.GC_EVENT.size
            print(f"profiler: {e}", file=sys.stderr)
