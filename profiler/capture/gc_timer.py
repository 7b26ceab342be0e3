"""Time every garbage collection through gc.callbacks: per-generation totals for the epoch record,
the pause inside the open step, and one GC event per generation-2 or long collection.

A collection is "forced" when the program asked for it (gc.collect(), or PyGC_Collect from an
extension) rather than allocation triggering it. CPython starts one of its own only when generation
0's count passes its threshold with collection enabled, and of generation g only when g's count
passes g's threshold too, so a collection that starts with the collector off, its first threshold
0, or either count at or under its threshold was asked for (generation 0's alone read another
thread's gc.collect(2) as CPython's own when this thread allocated meanwhile). Three kinds read as
CPython's own: a gc.collect() just after gc.enable() or a lowering gc.set_threshold() left the
count above the threshold; a gc.collect(2) while generation 0's count is over its threshold
(another thread allocating) in a heap whose long-lived objects hold generation 2's over its own
(CPython then skips its full collections, and Python cannot see why); and, from 3.12 (which starts
its own at the eval loop's next check), rarely one asked for while one of its own was due. Forced
collections are counted apart, with the line of the program that made each and the installed
package's line it came through, if any (sites.user_site_via, at the collection's start and outside
its timed pause): a gc.collect() every step is a remedy of its own (remove it), not the
thresholds' or gc.freeze()'s. The profiler's own (--gc-policy manual:N) are not the program's:
they count as CPython's. A free-threaded build starts its own on other counts, so there no
collection is told apart and the records have no "forced".

The callback goes first in the collector's list, so the count it reads at a start is the
collector's own, before another callback frees objects (one that empties a cache made every
automatic collection read as asked for). A program can remove it (gc.callbacks.clear()) and so hide
collections from it. Each epoch's record says how many the callback missed ("missed", from
gc.get_stats()), and `rehook()`, at each epoch's start and end, puts it back first, and once (a
program that restores a saved copy of the list adds it a second time; until then the second
copy's calls are told by their info dict, which the collector builds once a phase, and skipped).

The callback runs inside the collector, so it only adds to counters and packs an event into a
preallocated buffer (GC_EVENT, 17 bytes; 4096 of them between writes). The Session writes the
events at each epoch end (`take_events()`); a buffer that fills inside an epoch is handed to
`on_full` from the callback itself, so no event is dropped however long an epoch runs.

A signal handler runs wherever the main thread checks for signals, our callback included, and
CPython reports an exception raised in a gc callback as "Exception ignored" and goes on: a Ctrl-C,
or a SIGTERM or SIGALRM handler's SystemExit or TimeoutError, would be lost. While the callback
is installed, an unraisable hook has a short-lived thread raise such an exception (one that did
not come from our own code) again in the thread it left, as an asynchronous exception, once that
thread runs on. Raised from the hook itself it would land inside the hook, ignored again; if it
lands in the callback again, it is passed on again.
"""

import _thread
import ctypes
import gc
import sys
import sysconfig
import time

from ..rundir.format import FORCED_SITES, GC_EVENT
from .sites import own, own_or_stdlib, user_site_via

_now = time.perf_counter_ns
EVENT_CAPACITY = 4096
TELLS_FORCED = not sysconfig.get_config_var("Py_GIL_DISABLED")   # see the module docstring
SITE_FRAMES = 16        # frames above a forced collection searched for the program's line


def _with_forced(record, forced, forced_pause_ns, forced_sites):
    """A GC record with the program's own collections added (where they can be told apart)."""
    if TELLS_FORCED:
        record.update(forced=forced, forced_pause_s=[ns / 1e9 for ns in forced_pause_ns])
    if forced_sites:
        record["forced_sites"] = _site_list({key: (n, ns / 1e9) for key, (n, ns) in forced_sites.items()})
    return record


def _site_list(totals):
    """forced_sites from {(site, via): (collections, pause_s)}: the FORCED_SITES longest paused."""
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:FORCED_SITES]
    return [{"site": site, **({"via": via} if via else {}), "collections": n, "pause_s": pause}
            for (site, via), (n, pause) in ranked]


def merged(a, b):
    """Two records of collections (reset()'s or take()'s, None for none) as one of reset()'s: counts
    and pauses added, the program's lines joined (the longest paused first); None for none."""
    records = [r for r in (a, b) if r is not None]
    if not records:
        return None
    keys = [k for k in ("pause_s", "collections", "forced", "forced_pause_s") if all(k in r for r in records)]
    record = {k: [sum(values) for values in zip(*(r[k] for r in records))] for k in keys}
    sites = {}
    for s in (site for r in records for site in r.get("forced_sites", ())):
        total = sites.setdefault((s["site"], s.get("via")), [0, 0.0])
        total[0] += s["collections"]
        total[1] += s["pause_s"]
    if sites:
        record["forced_sites"] = _site_list(sites)
    return record


class GcTimer:
    def __init__(self, origin_ns, event_threshold_s, steps=None, on_full=None, capacity=EVENT_CAPACITY):
        self.origin_ns = origin_ns
        self.threshold_ns = int(event_threshold_s * 1e9)
        self.steps = steps           # a StepRecorder: collections inside an open step are added to it
        self.on_full = on_full       # on_full(bytes): the event buffer filled inside an epoch
        self.events_dropped = 0      # events on_full could not write (meta.json: gc_events_dropped)
        self._events = bytearray(GC_EVENT.size * capacity)
        self._n_events = 0
        self._start = 0              # the open collection's start; 0 when its start was not seen
        self._asked = None           # the open collection's (site, via) when the program asked for it, else None
        self._open = None            # the open collection's generation, from its start until it is counted
        self._open_thread = None     # the thread it runs in: take() allows for one open in another thread
        self._info = None            # the info of the phase last seen: a second copy of ours gets the same dict
        self._since = 0              # the epoch's start: a collection begun before adds its pause from there
        self._installed = None       # the bound method in gc.callbacks
        self._callbacks = None       # the collector's list installed into (CALLBACKS)
        self._next_hook = None       # the unraisable hook that was in place before install()
        self._stats = _collections()   # the collector's own count where ours starts (take() compares them)
        self._zero()

    def reset(self, since_ns):
        """The collections counted since the last take() or reset (between two epochs, or before the
        first: the epoch record's 'gc_before'; None when there were none), forgotten as what follows
        begins at `since_ns`: the collector's count they are compared with moves on by them. The
        counts are swapped for new ones first, so a collection meanwhile lands in the old ones (added
        here) or the new ones (counted on); with nothing counted (most calls, three an epoch) there
        is nothing to swap, and one ending meanwhile counts in what follows. One open in another
        thread, begun before, adds to what follows only its pause from `since_ns` on (its GC event
        keeps the whole)."""
        if not any(self.collections):
            self._since = since_ns
            return None
        pause_ns, counted, _, _, _, forced, forced_pause_ns, forced_sites = self._swap()
        self._stats = [s + c for s, c in zip(self._stats, counted)]
        self._since = since_ns
        return _with_forced({"pause_s": [ns / 1e9 for ns in pause_ns], "collections": counted},
                            forced, forced_pause_ns, forced_sites)

    def _swap(self):
        """The counts so far, with new ones in their place."""
        counts = (self.pause_ns, self.collections, self.collected, self.uncollectable, self.max_pause_ns,
                  self.forced, self.forced_pause_ns, self.forced_sites)
        self._zero()
        return counts

    def _zero(self):
        self.pause_ns = [0, 0, 0]
        self.collections = [0, 0, 0]
        self.collected = [0, 0, 0]
        self.uncollectable = [0, 0, 0]
        self.max_pause_ns = 0
        self.forced = [0, 0, 0]
        self.forced_pause_ns = [0, 0, 0]
        self.forced_sites = {}       # (site, via) -> [collections, pause_ns]

    def _callback(self, phase, info):
        if info is self._info:   # a second copy of ours in the list: the collector builds one info a phase
            return
        self._info = info
        if phase == "start":
            gen = self._open = info["generation"]
            self._open_thread = _get_ident()
            self._start = 0   # until this start is read whole
            # asked for, rather than started by allocation (the module docstring); inline: it runs on every collection
            asked = None
            try:   # within a few frames of the recursion limit: not claimed unless told, its line then out of reach
                thresholds, counts = _get_threshold(), _get_count()
                if TELLS_FORCED and (counts[0] <= thresholds[0] or counts[gen] <= thresholds[gen] or not thresholds[0]
                                     or not _isenabled()):
                    asked = (None, None)
                    asked = _asked()
            except RecursionError:
                pass
            self._asked = asked
            self._start = _now()
            return
        start = self._start
        gen = info["generation"]
        if not start:   # an exception raised in its "start" call (see the module docstring): counted, not timed
            self.collections[gen] += 1
            self._open = None
            return
        self._start = 0
        end = _now()
        whole = end - start
        pause = whole if start >= self._since else end - self._since   # within the epoch (reset)
        if pause < 0:   # the epoch began in another thread after `end` was read, before this line: none of it
            pause = 0
        collected = info["collected"]
        self.pause_ns[gen] += pause
        self.collections[gen] += 1
        self.collected[gen] += collected
        self.uncollectable[gen] += info["uncollectable"]
        if pause > self.max_pause_ns:
            self.max_pause_ns = pause
        asked = self._asked
        if asked is not None:
            self.forced[gen] += 1
            self.forced_pause_ns[gen] += pause
            if asked[0]:
                total = self.forced_sites.setdefault(asked, [0, 0])
                total[0] += 1
                total[1] += pause
        if gen == 2 or whole >= self.threshold_ns:
            n = self._n_events
            if n * _EVENT_SIZE == len(self._events):
                self._hand_over()
                n = 0
            _pack_event(self._events, n * _EVENT_SIZE, (start - self.origin_ns) / 1e9, whole / 1e9, gen,
                        collected if collected < 0xFFFFFFFF else 0xFFFFFFFF)
            self._n_events = n + 1
        steps = self.steps
        if steps is not None and steps.open_ns:   # one begun before the step (another thread's): from its start
            opened = steps.open_ns
            steps.add_gc(gen, whole if start >= opened else max(end - opened, 0))
        self._open = None

    @property
    def collecting(self):
        """Whether the calling thread is inside a collection (a finalizer or weakref callback the
        collector runs)."""
        return self._open is not None and self._open_thread == _get_ident()

    def _hand_over(self):
        data = self.take_events()
        try:
            self.on_full(data)
        except Exception:   # an error inside a gc callback would only be printed: count it instead
            self.events_dropped += len(data) // GC_EVENT.size

    def _unraisable(self, unraisable):
        ours = unraisable.object is self._installed
        if ours and isinstance(unraisable.exc_value, RecursionError):   # called at the program's recursion limit:
            return   # that collection is counted untimed (or, if its stop was lost, as missed), and nothing is printed
        try:
            signal = ours and _from_a_signal(unraisable.exc_value, unraisable.exc_traceback)
        except RecursionError:   # at the recursion limit: a signal's exception there is lost, as without us
            signal = False
        if signal:
            self._start = 0   # the collection it interrupted is not timed
            _thread.start_new_thread(_raise_again, (_thread.get_ident(), unraisable.exc_value))
        else:
            self._next_hook(unraisable)

    def install(self):
        self._next_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self._installed, self._callbacks = self._callback, CALLBACKS
        self._zero()
        self._callbacks.insert(0, self._installed)
        # where ours starts: the collector's count less ours, read first (one in between counts in both,
        # one after the snapshot in ours only: the baseline may be one high, never low)
        counted = self.collections[:]
        self._stats = [s - c for s, c in zip(_collections(), counted)]

    def rehook(self):
        """Put the callback back first, and once, if the program removed it, put another before it, or
        added it again (the module docstring)."""
        callbacks, installed = self._callbacks, self._installed
        if not (callbacks and callbacks[0] is installed) or (len(callbacks) > 1 and callbacks.count(installed) > 1):
            while installed in callbacks:
                callbacks.remove(installed)
            callbacks.insert(0, installed)

    def uninstall(self):
        callbacks = self._callbacks if self._callbacks is not None else CALLBACKS
        while self._callback in callbacks:
            callbacks.remove(self._callback)
        if sys.unraisablehook == self._unraisable:   # else a later hook holds ours: it passes everything on
            sys.unraisablehook = self._next_hook

    def take(self):
        """The GC record since the last take or reset (the epoch record's 'gc' field), and reset.
        Our counts are swapped for new ones first, so the record holds still. The collector's count
        is then read with automatic collection held off (reading it allocates) until it agrees with
        what the new counts hold, which another thread's gc.collect() in between may add to; a
        collection still open in another thread is not a missed one."""
        (pause_ns, collections, collected, uncollectable, max_pause_ns,
         forced, forced_pause_ns, forced_sites) = self._swap()
        enabled = _isenabled()
        gc.disable()
        try:
            while True:   # the open collection read with the counts: it may end the moment after
                since, open_, thread = self.collections[:], self._open, self._open_thread
                now = _collections()
                if self.collections == since:
                    break
        finally:
            if enabled:
                gc.enable()
        record = _with_forced({"pause_s": [ns / 1e9 for ns in pause_ns], "collections": collections,
                               "collected": collected, "uncollectable": uncollectable,
                               "max_pause_s": max_pause_ns / 1e9}, forced, forced_pause_ns, forced_sites)
        if sum(now) > sum(self._stats) + sum(collections) + sum(since):   # the callback was out for a while, or...
            # ...one open in another thread is in the collector's count and not yet in ours
            elsewhere = open_ if thread != _get_ident() else None   # else one whose stop never came
            missed = [max(n - then - old - new - (g == elsewhere), 0)
                      for g, (n, then, old, new) in enumerate(zip(now, self._stats, collections, since))]
            if any(missed):
                record["missed"] = missed
        self._stats = [n - new for n, new in zip(now, since)]
        return record

    def take_events(self):
        """The packed GC events since the last take (GC_EVENT records), and reset."""
        if not self._n_events:   # most epochs
            return b""
        data = bytes(self._events[:self._n_events * GC_EVENT.size])
        self._n_events = 0
        return data


_get_count, _get_threshold, _isenabled, _get_ident = gc.get_count, gc.get_threshold, gc.isenabled, _thread.get_ident
_pack_event, _EVENT_SIZE = GC_EVENT.pack_into, GC_EVENT.size
CALLBACKS = gc.callbacks   # the list the collector calls, kept should the program rebind gc.callbacks


def _asked():
    """(the program's line, the installed package's line it came through or None) for the
    collection starting now, which the program asked for: (None, None) when no line can be told;
    None when the profiler asked for it (--gc-policy manual:N), which makes it no collection of the
    program's. It walks out only to the first frame of the program's own (~1.5 us where gc.collect()
    is called from it)."""
    frame = sys._getframe(1).f_back   # above _callback: the caller of gc.collect()
    if frame is not None and own(frame.f_code.co_filename):
        return None
    return user_site_via(_frames(frame))


def _collections():
    """Collections so far by generation, as the collector counts them."""
    return [s["collections"] for s in gc.get_stats()]


def _frames(frame):
    """(filename, lineno) of `frame` and the frames it was called from, at most SITE_FRAMES."""
    for _ in range(SITE_FRAMES):
        if frame is None:
            return
        yield frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back


def _from_a_signal(exc, tb):
    """Whether a signal handler the callback ran raised `exc`: one that is no Exception (Python's
    own SIGINT handler, in C, raises KeyboardInterrupt from our frame), or one raised through code
    that is neither the profiler's nor the standard library's (a handler is the program's, or a
    package's: pytest-timeout). An Exception raised only through ours and the standard library's
    is a bug of ours (a site looked up at a recursion limit), printed as usual."""
    if not isinstance(exc, Exception) or type(exc).__dict__.get("_raised_again"):
        return True
    ours, filename = False, None
    while tb is not None:   # from the callback's frame (ours) in
        filename = tb.tb_frame.f_code.co_filename
        if own(filename):
            ours = True
        elif ours and not own_or_stdlib(filename):
            return True
        tb = tb.tb_next
    return not ours and filename is not None and not own_or_stdlib(filename)


def _raise_again(thread, exc):
    """Raise `exc` in `thread` as an asynchronous exception. CPython takes an exception class
    there, so a subclass of exc's class stands for it, made with exc's arguments (SystemExit's
    code, TimeoutError's message); one that lands in the callback again is raised again as it is."""
    again = cls = type(exc)
    if not cls.__dict__.get("_raised_again"):
        again = type(cls.__name__, (cls,), {"__init__": lambda self, *_: cls.__init__(self, *exc.args),
                                             "_raised_again": True, "__module__": cls.__module__,
                                             "__qualname__": cls.__qualname__})
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(again))
