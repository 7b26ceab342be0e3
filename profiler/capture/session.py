"""Session: profile the epochs of any training loop into a run directory.

    with Session("runs/my-run", tracemalloc=False, meta={"model": "mine"}) as session:
        for epoch in range(epochs):
            with session.epoch(epoch):
                for batch in batches:
                    with session.op("forward"):
                        ...

Each finished epoch is one line in epochs.jsonl, flushed as the epoch ends; nothing accumulates
in memory. The hooks (gc.callbacks, tracemalloc) are removed on every exit path, and the final
status (completed, halted, failed, interrupted) is written to meta.json.
"""

import datetime
import gc
import importlib.metadata
import os
import platform
import socket
import sys
import threading
import time

from .. import rundir
from .gc_timer import GcTimer
from .heap import HeapTracker
from .memory import MemoryProbe
from .ops import OpTimers

_active = None
_lock = threading.Lock()


def _version(package):
    """A package's installed version from its metadata (importing numba here would add ~10^5
    GC-tracked objects to the profiled process), or None."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class _Epoch:
    """The context manager returned by Session.epoch()."""

    def __init__(self, session, index):
        self.session, self.index = session, index

    def __enter__(self):
        self.session._begin_epoch(self.index)
        return self

    def __exit__(self, exc_type, exc, tb):
        end = time.perf_counter()
        if exc_type is None:
            self.session._end_epoch(self.index, end)
        else:
            self.session._abandon_epoch()
        return False


class Session:
    def __init__(self, run_dir, *, tracemalloc=False, meta=None, frames=8, every=1, window=4, cooldown=50,
                 budget=0.10):
        """tracemalloc: False (light capture), True (deep: snapshot diff every `every` epochs with
        `frames` frames) or "auto" (deep for `window` epochs once light signals show growth, then
        resting at least `cooldown` epochs and long enough to keep its cost within `budget`)."""
        self.heap = HeapTracker(tracemalloc, frames=frames, every=every, window=window, cooldown=cooldown,
                                budget=budget)
        self.run_dir = os.fspath(run_dir)
        self.user_meta = dict(meta or {})
        self.options = {"tracemalloc": tracemalloc, "frames": frames, "every": every,
                        "window": window, "cooldown": cooldown, "budget": budget}
        self.gc_timer, self.ops = GcTimer(), OpTimers()
        self.op = self.ops.op
        self.memory = MemoryProbe()
        self._writer = None
        self._halted = False
        self._in_epoch = None
        self._start = 0.0
        self.epochs_written = 0

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self):
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError(f"another profiler Session is active (writing {_active.run_dir}); "
                                   f"finish it before starting one for {self.run_dir}")
            self._writer = rundir.RunWriter(self.run_dir)
            _active = self
        try:
            self._meta = {
                "format": rundir.FORMAT, "status": "running", "error": None, "meta": self.user_meta,
                "python": sys.version.split()[0], "python_implementation": platform.python_implementation(),
                "numpy": _version("numpy"), "numba": _version("numba"), "host": socket.gethostname(),
                "pid": os.getpid(), "cpu_count": os.cpu_count(), "gc_threshold": list(gc.get_threshold()),
                "started": _now_iso(), "finished": None, "options": self.options,
            }
            self._writer.write_meta(self._meta)
            self.gc_timer.install()
            self.heap.start()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            status, error = ("halted" if self._halted else "completed"), None
        elif issubclass(exc_type, KeyboardInterrupt):
            status, error = "interrupted", "KeyboardInterrupt"
        else:
            status, error = "failed", f"{exc_type.__name__}: {exc}"
        self._meta.update(status=status, error=error, finished=_now_iso(), epochs=self.epochs_written)
        try:
            self._writer.write_meta(self._meta)
        except rundir.RunWriteError as e:
            print(f"profiler: {e}; the final status ({status}) could not be recorded", file=sys.stderr)
            if exc_type is None:
                raise
        finally:
            self._teardown()
        return False

    def _teardown(self):
        global _active
        self.gc_timer.uninstall()
        self.heap.stop()
        if self._writer is not None:
            self._writer.close()
        with _lock:
            if _active is self:
                _active = None

    def mark_halted(self):
        """Record that the loop stopped early on purpose (a handler halted it)."""
        self._halted = True

    # -- epochs --------------------------------------------------------------------------------
    def epoch(self, index):
        return _Epoch(self, index)

    def _begin_epoch(self, index):
        if self._writer is None:
            raise RuntimeError("Session.epoch() used outside 'with Session(...)'")
        if self._in_epoch is not None:
            raise RuntimeError(f"epoch {index} started inside epoch {self._in_epoch}; epochs do not nest")
        self._in_epoch = index
        self.gc_timer.take()
        self.ops.take()
        self._start = time.perf_counter()

    def _abandon_epoch(self):
        """An epoch that raised: nothing finished, so nothing is written."""
        self._in_epoch = None

    def _end_epoch(self, index, end):
        wall = end - self._start
        gc_record = self.gc_timer.take()
        ops = self.ops.take()
        rss, malloc_bytes = self.memory.read()
        heap = self.heap.epoch_end(index, wall, sum(gc_record["pause_s"]),
                                   malloc_bytes if malloc_bytes is not None else rss)
        record = {"epoch": index, "wall_s": wall, "gc": gc_record, "rss_bytes": rss,
                  "malloc_bytes": malloc_bytes, "heap": heap, "ops": ops}
        self._in_epoch = None
        self._writer.append_epoch(record)
        self.epochs_written += 1
