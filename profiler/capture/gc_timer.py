"""Time every garbage collection through gc.callbacks: per-generation totals for the epoch record,
the pause inside the open step, and one GC event per generation-2 or long collection.

The callback runs inside the collector, so it only adds to counters and packs an event into a
preallocated buffer (GC_EVENT, 17 bytes; 4096 of them between writes). The Session writes the
events at each epoch end (`take_events()`); a buffer that fills inside an epoch is handed to
`on_full` from the callback itself, so no event is dropped however long an epoch runs.

CPython reports an exception raised in a gc callback as "Exception ignored" and goes on, so a
Ctrl-C that lands in the callback would be lost; while the callback is installed, an unraisable
hook has a short-lived thread interrupt the main thread again. (Interrupted from the hook itself,
the main thread would raise it inside the hook, where it is ignored too; the thread runs once the
main thread hands it the GIL, in the loop's own code.)
"""

import _thread
import gc
import sys
import time

from ..rundir.format import GC_EVENT

_now = time.perf_counter_ns
EVENT_CAPACITY = 4096


class GcTimer:
    def __init__(self, origin_ns, event_threshold_s, steps=None, on_full=None, capacity=EVENT_CAPACITY):
        self.origin_ns = origin_ns
        self.threshold_ns = int(event_threshold_s * 1e9)
        self.steps = steps           # a StepRecorder: collections inside an open step are added to it
        self.on_full = on_full       # on_full(bytes): the event buffer filled inside an epoch
        self.events_dropped = 0      # events on_full could not write (meta.json: gc_events_dropped)
        self._events = bytearray(GC_EVENT.size * capacity)
        self._n_events = 0
        self._start = 0
        self._next_hook = None   # the unraisable hook that was in place before install()
        self.reset()

    def reset(self):
        """Forget the collections counted so far (those between two epochs)."""
        self.pause_ns = [0, 0, 0]
        self.collections = [0, 0, 0]
        self.collected = [0, 0, 0]
        self.uncollectable = [0, 0, 0]
        self.max_pause_ns = 0

    def _callback(self, phase, info):
        if phase == "start":
            self._start = _now()
            return
        start = self._start
        pause = _now() - start
        gen = info["generation"]
        self.pause_ns[gen] += pause
        self.collections[gen] += 1
        self.collected[gen] += info["collected"]
        self.uncollectable[gen] += info["uncollectable"]
        if pause > self.max_pause_ns:
            self.max_pause_ns = pause
        if gen == 2 or pause >= self.threshold_ns:
            n = self._n_events
            if n * GC_EVENT.size == len(self._events):
                self._hand_over()
                n = 0
            GC_EVENT.pack_into(self._events, n * GC_EVENT.size, (start - self.origin_ns) / 1e9, pause / 1e9, gen,
                               min(info["collected"], 0xFFFFFFFF))
            self._n_events = n + 1
        steps = self.steps
        if steps is not None and steps.open_ns:
            steps.add_gc(gen, pause)

    def _hand_over(self):
        data = self.take_events()
        try:
            self.on_full(data)
        except Exception:   # an error inside a gc callback would only be printed: count it instead
            self.events_dropped += len(data) // GC_EVENT.size

    def _unraisable(self, unraisable):
        if unraisable.exc_type is KeyboardInterrupt and unraisable.object == self._callback:
            _thread.start_new_thread(_thread.interrupt_main, ())   # as if Ctrl-C came again
        else:
            self._next_hook(unraisable)

    def install(self):
        self._next_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        gc.callbacks.append(self._callback)

    def uninstall(self):
        while self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        if sys.unraisablehook == self._unraisable:   # else a later hook holds ours: it passes everything on
            sys.unraisablehook = self._next_hook

    def take(self):
        """The GC record since the last take (the epoch record's 'gc' field), and reset."""
        record = {
            "pause_s": [ns / 1e9 for ns in self.pause_ns],
            "collections": self.collections,
            "collected": self.collected,
            "uncollectable": self.uncollectable,
            "max_pause_s": self.max_pause_ns / 1e9,
        }
        self.reset()
        return record

    def take_events(self):
        """The packed GC events since the last take (GC_EVENT records), and reset."""
        if not self._n_events:   # most epochs
            return b""
        data = bytes(self._events[:self._n_events * GC_EVENT.size])
        self._n_events = 0
        return data
