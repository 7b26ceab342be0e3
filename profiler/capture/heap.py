"""Deep memory capture with tracemalloc: traced/peak bytes and the lines whose memory grows.

tracemalloc is expensive here (1 frame: ~3x a Python-heavy epoch; a snapshot and its per-line
totals: ~70x), so it is a policy, not always-on:
  mode True    trace from the start; diff snapshots every `every` epochs.
  mode "auto"  trace nothing until the light signals (memory in use, GC pauses) grow,
               then trace a window of `window` epochs, long enough to pin the growing lines, and
               stop again. The first window opens as soon as growth shows; each later one only
               once the run's time so far covers, within `budget` (10%), what the windows have
               cost plus what the next one will (estimated as the last one's extra time, tracing
               and snapshots, against the light epochs before it), and never before `cooldown`
               epochs of rest. So a leak that keeps growing is re-checked, and the whole run's
               overhead stays about within the budget (a window can cost more than the last), or
               within the first window's cost if that is more (the first window is the diagnosis).
Auto mode diffs snapshots at the first and the last epoch of a window (a snapshot costs a
quarter of a traced mlp epoch), so a run that ends inside one still names its lines. Each
snapshot in mode True, and the last of each auto window, also counts GC-tracked objects by type
(objects.TypeGrowth, a walk over every tracked object): the types that grew most since the
previous count (the window's start) and where their newest objects were allocated ("top_types").
Only per-line totals of the previous snapshot are kept (not the snapshot), so memory stays
constant and the profiler's own objects do not grow between counts. Snapshots exclude the
profiler's own frames and tracemalloc's; numpy's buffers (their own tracemalloc domain) are told apart from
Python objects. Each block is attributed to the innermost frame outside the standard library and
installed packages (8 frames by default), i.e. the user's line that called np.ones, not numpy's
(sites.user_site).
"""

import collections
import math
import time
import tracemalloc

import numpy as np

from .budget import Budget
from .objects import TypeGrowth
from .sites import user_site

NUMPY_DOMAIN = np.lib.tracemalloc_domain
TOP = 10


def site_totals():
    """{(site, kind): [bytes, blocks]} of every traced block, by the user line that allocated it.
    Only these totals are kept between snapshots, not the snapshot itself: a snapshot holds a few
    GC-tracked tuples per traced block (and ~185 MiB with torch imported). One pass over the raw
    traces, each distinct traceback placed once: tracemalloc's own filters and statistics, a
    pass per filter in Python, took 3.2 s a snapshot of a new user's loop whose traced heap grew."""
    by_traceback = {}
    for domain, size, frames, _ in tracemalloc.take_snapshot().traces._traces:
        total = by_traceback.setdefault((frames, domain == NUMPY_DOMAIN), [0, 0])
        total[0] += size
        total[1] += 1
    totals = {}
    for (frames, numpy_block), (size, count) in by_traceback.items():
        site = user_site(frames) if frames else None
        if site is not None:
            total = totals.setdefault((site, "numpy" if numpy_block else "python"), [0, 0])
            total[0] += size
            total[1] += count
    return totals


def allocation_site(obj):
    """"file.py:LINE" of the user's line that allocated obj, or None (not traced, or the profiler's)."""
    traceback = tracemalloc.get_object_traceback(obj)
    if traceback is None or not len(traceback):
        return None
    return user_site([(f.filename, f.lineno) for f in reversed(traceback)])   # Traceback: oldest first


def top_growth(now, before, n=TOP):
    """The n user lines whose traced bytes grew most between two site_totals(), numpy buffers marked."""
    grown = []
    for (site, kind), (size, count) in now.items():
        old_size, old_count = before.get((site, kind), (0, 0))
        if size > old_size:
            grown.append({"site": site, "size_diff": size - old_size, "count_diff": count - old_count, "kind": kind})
    return sorted(grown, key=lambda g: -g["size_diff"])[:n]


class GrowthDetector:
    """Light signals only: is memory or GC pause time growing over recent epochs?
    Memory is judged twice, and either growing is a trigger. RSS over the last `span` epochs sees
    Python objects (pymalloc's arenas are mapped apart from malloc). Malloc's bytes in use, from
    its last `span` reads once at least MIN_READS of them cover half the span or more, sees a leak
    that reuses memory the allocator holds (RSS flat): a costly read puts off the next
    (memory.py), so on a big fragmented heap the reads may lie hundreds of epochs apart. Epoch
    time alone is not a trigger: time growing without memory or GC growth is compute, which op
    timers explain and tracemalloc cannot (and on a shared machine, epoch time jumps by 1.5x with
    the neighbours)."""

    MIN_READS = 3

    def __init__(self, span=8, bytes_per_epoch=256 * 1024, ratio=1.5):
        self.recent = collections.deque(maxlen=span)   # (wall_s, gc_pause_s, (epoch, rss_bytes))
        self.reads = collections.deque(maxlen=span)    # (epoch, malloc_bytes) of malloc's last reads
        self.bytes_per_epoch, self.ratio = bytes_per_epoch, ratio
        self._epochs = 0

    def add(self, wall_s, gc_pause_s, rss_bytes, malloc_bytes):
        self.recent.append((wall_s, gc_pause_s, (self._epochs, rss_bytes)))
        if malloc_bytes is not None:
            self.reads.append((self._epochs, malloc_bytes))
        self._epochs += 1

    def clear(self):
        """Forget the signals (a window ended: tracing moved them)."""
        self.recent.clear()
        self.reads.clear()

    def _measures(self):
        """(name, [(epoch, bytes)]) of each memory measure there is enough of to judge."""
        reads = self.reads
        if len(reads) >= self.MIN_READS and reads[-1][0] - reads[0][0] >= self.recent.maxlen // 2:
            yield "memory in use", list(reads)
        yield "RSS", [r[2] for r in self.recent]

    def _grows(self, points):
        """Bytes per epoch from the first point to the last, when every late point is at or above
        its early twin and the rate passes bytes_per_epoch; else None."""
        half = len(points) // 2
        early, late = points[:half], points[half:]
        rate = (late[-1][1] - early[0][1]) / (late[-1][0] - early[0][0])
        if rate > self.bytes_per_epoch and all(b[1] >= a[1] for a, b in zip(early, late)):
            return rate
        return None

    def growing(self):
        if len(self.recent) < self.recent.maxlen:
            return None
        for name, points in self._measures():
            rate = self._grows(points)
            if rate is not None:
                return f"{name} grows {rate / 1024:.0f} KiB/epoch"
        half = len(self.recent) // 2
        early, late = list(self.recent)[:half], list(self.recent)[half:]
        e, l_ = sorted(r[1] for r in early)[half // 2], sorted(r[1] for r in late)[half // 2]
        if e > 0 and l_ / e > self.ratio and l_ > 0.05 * late[-1][0]:
            return f"GC pause grew {l_ / e:.2f}x"
        return None


SNAPSHOT_FREE_NS = 500_000_000


class HeapTracker:
    """The 'heap' field of each epoch record. Options are checked by the Session (options.py)."""

    def __init__(self, mode, *, frames=8, every=1, window=4, cooldown=50, budget=0.10):
        self.mode, self.frames, self.every = mode, frames, every
        self.window, self.cooldown, self.budget = window, cooldown, budget
        self._light_s = self._window_s = 0.0
        self._elapsed_s = self._spent_s = 0.0   # the whole run's time, and the windows' extra time
        self.detector = GrowthDetector() if mode == "auto" else None
        self._previous = None
        self._owned = False       # did we start tracemalloc (so we must stop it)?
        self._window_left = 0
        self._rest = 0
        self.trigger = None       # why auto capture last switched on
        self.types = TypeGrowth(allocation_site)
        self._types_epochs = 0    # epochs since the last count by type (what top_types' diffs cover)
        # deep capture's snapshots walk every traced block and its types count every tracked
        # object, so after one that took over SNAPSHOT_FREE_NS the next waits until the run's time
        # covers its cost within budget
        self._snapshots = self._budget()

    def _budget(self):
        """The snapshots' time budget, counted from now."""
        return Budget(self.budget, free_ns=SNAPSHOT_FREE_NS)

    @property
    def tracing(self):
        return self.mode is True or self._window_left > 0

    def start(self):
        if self.mode is True:
            self._start_tracing()

    def _start_tracing(self):
        if not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)
            self._owned = True
        self._previous = site_totals()
        self.types.sample()
        self._types_epochs = 0
        tracemalloc.reset_peak()

    def restart(self):
        """Under mode True, trace anew from here, where tracing is ours: what was traced before (a
        script's imports; torch's are millions of blocks, which every snapshot walks: 22 s each, so
        the time budget held the next ones past a script's end) is dropped, and snapshots walk only
        what comes after, their budget counted from here. `profiler run` calls it when a script's
        training starts."""
        if self.mode is True and self._owned:
            self._stop_tracing()
            self._start_tracing()
            self._snapshots = self._budget()

    def _stop_tracing(self):
        self._previous = None
        self.types.reset()
        if self._owned:
            tracemalloc.stop()
            self._owned = False

    def stop(self):
        """Remove every trace of ourselves; leave tracemalloc as we found it."""
        self._stop_tracing()

    def epoch_end(self, epoch, wall_s, gc_pause_s, rss_bytes, malloc_bytes):
        """The 'heap' field of this epoch's record (None when not tracing), then update the policy."""
        start = time.perf_counter()
        window = self.tracing and tracemalloc.is_tracing()   # the program may have stopped it: no heap field then
        record = self._sample(epoch) if window else None
        if self.detector is not None:
            spent = wall_s + time.perf_counter() - start
            self._elapsed_s += spent
            if window:   # a window's epoch: all of it counts towards the window's cost
                self._window_s += spent
            self._auto(wall_s, gc_pause_s, rss_bytes, malloc_bytes)
        return record

    def _sample(self, epoch):
        traced, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        # the frames tracemalloc keeps: fewer than asked for when the program (or -X tracemalloc) started it first
        record = {"traced_bytes": traced, "peak_bytes": peak, "top_growth": [], "top_types": [], "snapshot": False,
                  "frames": tracemalloc.get_traceback_limit()}
        self._types_epochs += 1
        if self.mode == "auto":   # a window's first and last epochs (its rest keeps the budget)
            if self._window_left in (self.window, 1):
                self._snapshot(record)
        elif (epoch + 1) % self.every == 0:
            self._snapshots.call(lambda: self._snapshot(record))
        if self.trigger:
            record["trigger"] = self.trigger
        return record

    def _snapshot(self, record):
        now = site_totals()
        record["top_growth"], record["snapshot"] = top_growth(now, self._previous), True
        self._previous = now
        if self.mode is True or self._window_left == 1:   # auto: the types once, at the window's end
            record["top_types"], record["types_epochs"] = self.types.sample(), self._types_epochs
            self._types_epochs = 0

    def _auto(self, wall_s, gc_pause_s, rss_bytes, malloc_bytes):
        if self._window_left > 0:
            self._window_left -= 1
            if self._window_left == 0:
                self._timed(self._stop_tracing)
                excess = max(self._window_s - self.window * self._light_s, 0.0)
                self._spent_s += excess
                self._rest, self.trigger = max(self.cooldown, self._budgeted_rest(excess)), None
                self.detector.clear()
            return
        if self._rest > 0:
            self._rest -= 1
            return
        self.detector.add(wall_s, gc_pause_s, rss_bytes, malloc_bytes)
        reason = self.detector.growing()
        if reason:
            self.trigger = reason
            self._window_left = self.window
            self._light_s = sorted(r[0] for r in self.detector.recent)[len(self.detector.recent) // 2]
            self._window_s = 0.0
            self._timed(self._start_tracing)

    def _timed(self, step):
        """Run a window's opening or closing step, counting its time as the window's and the run's."""
        start = time.perf_counter()
        step()
        spent = time.perf_counter() - start
        self._window_s += spent
        self._elapsed_s += spent

    def _budgeted_rest(self, next_s):
        """Light epochs to wait after a window so that, when the next one ends, the windows' extra
        time is at most `budget` of the run's: spent + next <= budget * (elapsed + rest + next's
        epochs + next), the next window's extra time `next_s` estimated as the last one's."""
        if self._light_s <= 0:
            return 0
        short_s = (self._spent_s + next_s) / self.budget - (self._elapsed_s + self.window * self._light_s + next_s)
        return max(0, math.ceil(short_s / self._light_s))
