"""Per-op wall-time accumulators with a structured identity: a name plus a dict of tags.

`op("conv2d_backward", layout="NCHW")` and `op("conv[fast]")` are different ops whatever their
labels look like: identity is (name, sorted tags), and each epoch record's value carries both
({"name", "tags", "calls", "total_s", "timed"}). The record's key is a readable label,
`name[v1,...]`, made unique within the session (a second op with the same label gets `#2`, ...).

`op()` is on the hot path (tens of calls per training step), so each identity gets one reusable
timer object, found by one dict lookup; memory is bounded by the number of distinct ops. An op
without tags allocates nothing per call; one with tags builds its kwargs and a key tuple, so hot
loops keep the timer `op()` returns and enter it again (the engine's layers do). A timed call
costs two clock reads; a call that is not timed, one counter decrement.
Short ops are sampled to keep their cost near that of the `with` statement itself: an op whose
timed calls averaged under SHORT_NS in one epoch is timed, in the next, on a random 1 in
SAMPLE_EVERY of its calls (gaps drawn from a fixed geometric table, so the choice never follows a
pattern in the calls). Its `total_s` is the timed calls' time plus the mean timed call for each
call skipped; `calls` counts every call that ended in the epoch, and `timed` says how many were
timed. The estimate is unbiased (which calls are timed does not depend on their duration); its
relative standard error is about CV * sqrt((1 - timed/calls) / timed), where CV is the spread of
the op's call durations (e.g. 36 calls, 5 timed, CV 0.2: ~8% for that epoch, shrinking as
1/sqrt(epochs) over a run). An epoch in which none of an op's calls was timed uses the op's last
mean. Longer ops are timed on every call, and so is an op once a timed call of it is seen inside
itself (recursion: its inner calls count as calls, their time is the outer call's, and sampling
could not tell them from outer calls).

A take costs as much as the ops that ran since the last, not as all the ops the session has seen
(tags with a value per call, `seqlen=...`, make thousands): a timer that was taken is switched to
the class _Idle, whose first `__enter__` puts it on its OpTimers' list of active timers and
switches it back, so the hot path of an active timer holds no extra test. Every timer of class
_Timer is on that list: the switches both ways happen under the OpTimers' lock (reentrant: a
finalizer that enters an op may run inside a take), so an op entered by another thread while a
take runs is never left off it.
"""

import math
import random
import threading
import time

from ..errors import UsageError

_now = time.perf_counter_ns
SHORT_NS = 50_000
SAMPLE_EVERY = 8
_GAPS = tuple(int(math.log(1 - random.Random(n).random()) / math.log(1 - 1 / SAMPLE_EVERY)) for n in range(257))


class _Timer:
    __slots__ = ("timed", "total_ns", "_t0", "_depth", "_inner", "_skip", "_untimed", "_gap", "sampled",
                 "recursive", "identity", "label", "mean_ns", "_owner")

    def __init__(self, identity, label, offset, owner):
        self.identity = identity   # {"name": str, "tags": {...}}
        self.label = label         # the epoch record's key
        self._owner = owner        # its OpTimers (the list of active timers, and its lock)
        self.timed = self.total_ns = self._t0 = self._depth = self._inner = self._skip = self._untimed = 0
        self._gap = offset % len(_GAPS)   # where this op starts in the gap table
        self.sampled = False       # this epoch: time a random 1 in SAMPLE_EVERY calls (else every call)
        self.recursive = False     # seen inside itself: never sampled (a skipped call's inner calls
                                   # would count as calls of their own, each given a whole call's mean)
        self.mean_ns = 0.0         # mean timed call, from the last epoch that timed one

    def __enter__(self):
        skip = self._skip
        if skip:             # sampling: this call is not timed (and costs no more than this)
            self._skip = skip - 1
        elif self._t0:       # the op inside itself (recursion): the outermost call holds the time
            self._depth += 1
            self._inner += 1
            self.recursive = True
        else:
            self._t0 = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._t0:
            return False
        if self._depth:
            self._depth -= 1
            return False
        self.total_ns += _now() - self._t0
        self._t0 = 0
        self.timed += 1
        if self.sampled:
            self._gap = gap = (self._gap + 1) % len(_GAPS)
            self._skip = _GAPS[gap]
            self._untimed += _GAPS[gap]
        return False

    def add(self, ns, calls=1):
        """`calls` calls of `ns` nanoseconds in all, timed by their caller (a call that counts only when
        it returns: a DataLoader's next batch, not the StopIteration that ends the pass)."""
        self.total_ns += ns
        self.timed += calls

    @property
    def calls(self):
        """Calls since the last take: the timed ones, those sampling skipped (the gaps drawn so
        far, less what is left of the current one) and those inside a timed call of the same op.
        Counted this way, a call that sampling skips increments nothing."""
        return self.timed + self._untimed - self._skip + self._inner

    def take(self):
        """(calls, total seconds, calls timed) since the last take, and reset; decides whether the
        next epoch samples this op. The total is the timed calls' time plus, for each call that
        sampling skipped, the mean timed call (this epoch's, else the last epoch's that had one)."""
        calls, timed, total_ns, skipped = self.calls, self.timed, self.total_ns, self._untimed - self._skip
        if timed:
            self.mean_ns = total_ns / timed
        self.timed = self.total_ns = self._inner = 0
        self.sampled = self.mean_ns < SHORT_NS and not self.recursive
        if not self.sampled:
            self._skip = 0
        self._untimed = self._skip   # the rest of the current gap is skipped in the next epoch
        return calls, (total_ns + skipped * self.mean_ns) / 1e9, timed


class _Idle(_Timer):
    """A timer not entered since the last take: its first entry makes it active again."""
    __slots__ = ()

    def __enter__(self):
        self._activate()
        return _Timer.__enter__(self)

    def _activate(self):
        owner = self._owner
        with owner.lock:
            if self.__class__ is _Idle:   # another thread may have made it active meanwhile
                self.__class__ = _Timer
                owner.active.append(self)

    def add(self, ns, calls=1):
        self._activate()
        _Timer.add(self, ns, calls)


def _check_identity(name, tags):
    if not isinstance(name, str) or not name:
        raise UsageError(f"session.op() needs a non-empty string name, got {name!r}")
    for key, value in tags.items():
        ok = value is None or isinstance(value, (str, int, bool)) or (isinstance(value, float) and math.isfinite(value))
        if not ok:
            raise UsageError(f"session.op({name!r}) tag {key}={value!r}: tag values must be strings, ints, "
                             f"finite floats, bools or None")


class OpTimers:
    def __init__(self):
        self._timers = {}     # lookup key (name, or (name, *tags.items()) in call order) -> timer
        self._labels = {}     # label -> timer, in creation order
        self._by_identity = {}
        self.active = []      # the timers entered since the last take (the others are _Idle)
        self.lock = threading.RLock()

    def op(self, name, **tags):
        """The timer of op `name` with `tags`; use it as a context manager."""
        key = (name, *tags.items()) if tags else name
        try:
            return self._timers[key]
        except (KeyError, TypeError):   # a new op, or an unhashable name or tag value (refused there)
            return self._new(key, name, tags)

    def _new(self, key, name, tags):
        _check_identity(name, tags)
        identity = (name, tuple(sorted(tags.items())))
        timer = self._by_identity.get(identity)
        if timer is None:
            tags = dict(sorted(tags.items()))
            base = f"{name}[{','.join(map(str, tags.values()))}]" if tags else name
            label, n = base, 1
            while label in self._labels:
                n += 1
                label = f"{base}#{n}"
            timer = self._by_identity[identity] = _Idle({"name": name, "tags": tags}, label, len(self._labels), self)
            self._labels[label] = timer
        self._timers[key] = timer
        return timer

    def take(self):
        """{label: {"name", "tags", "calls", "total_s", "timed"}} for ops that ran since the last take,
        and reset."""
        out = {}
        with self.lock:
            taken, kept = list(self.active), []
            for timer in taken:
                if timer.calls:
                    calls, total_s, timed = timer.take()
                    out[timer.label] = {**timer.identity, "calls": calls, "total_s": total_s, "timed": timed}
                if timer._t0:   # a call still open keeps its timer active: its end counts in the next take
                    kept.append(timer)
                else:
                    timer.__class__ = _Idle
            # timers a finalizer made active during the take, in this thread, follow the taken ones
            self.active[:] = kept + self.active[len(taken):]
        return out
