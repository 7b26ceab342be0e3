"""Per-op wall-time accumulators with a structured identity: a name plus a dict of tags.

`op("conv2d_backward", layout="NCHW")` and `op("conv[fast]")` are different ops whatever their
labels look like: identity is (name, sorted tags), and each epoch record's value carries both
({"name", "tags", "calls", "total_s", "timed"}). The record's key is a readable label,
`name[v1,...]`, made unique within the session (a second op with the same label gets `#2`, ...).

`op()` is on the hot path (tens of calls per training step), so each identity gets one reusable
timer object, found by one dict lookup; memory is bounded by the number of distinct ops. An op
without tags allocates nothing per call; one with tags builds its kwargs and a key tuple, so hot
loops keep the timer `op()` returns and enter it again (the engine's layers do). A timed call
costs two clock reads.
Short ops are sampled so that this stays under ~1% of their time: an op whose timed calls averaged
under SHORT_NS in one epoch is timed, in the next, on a random 1 in SAMPLE_EVERY of its calls (gaps
drawn from a fixed geometric table, so the choice never follows a pattern in the calls), and its
`total_s` is the mean timed call times `calls`. `calls` is always exact; `timed` says how many
calls were timed. The estimate is unbiased (which calls are timed does not depend on their
duration); its relative standard error is about CV * sqrt((1 - timed/calls) / timed), where CV is
the spread of the op's call durations (e.g. 36 calls, 5 timed, CV 0.2: ~8% for that epoch, and
shrinking as 1/sqrt(epochs) over a run). An epoch in which none of an op's calls was timed uses
the op's last mean. Longer ops are timed on every call.
"""

import math
import random
import time

from ..errors import UsageError

_now = time.perf_counter_ns
SHORT_NS = 50_000
SAMPLE_EVERY = 8
_GAPS = tuple(int(math.log(1 - random.Random(n).random()) / math.log(1 - 1 / SAMPLE_EVERY)) for n in range(257))


class _Timer:
    __slots__ = ("calls", "timed", "total_ns", "_t0", "_depth", "_skip", "_gap", "sampled", "identity",
                 "mean_ns")

    def __init__(self, identity, offset):
        self.identity = identity   # {"name": str, "tags": {...}}
        self.calls = self.timed = self.total_ns = self._t0 = self._depth = self._skip = 0
        self._gap = offset % len(_GAPS)   # where this op starts in the gap table
        self.sampled = False       # this epoch: time a random 1 in SAMPLE_EVERY calls (else every call)
        self.mean_ns = 0.0         # mean timed call, from the last epoch that timed one

    def __enter__(self):
        self.calls += 1
        if self._t0:       # the op inside itself (recursion): the outermost call holds the time
            self._depth += 1
        elif self._skip:   # sampling: this call is not timed
            self._skip -= 1
        else:
            self._t0 = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._depth:
            self._depth -= 1
        elif self._t0:
            self.total_ns += _now() - self._t0
            self._t0 = 0
            self.timed += 1
            if self.sampled:
                self._gap = (self._gap + 1) % len(_GAPS)
                self._skip = _GAPS[self._gap]
        return False

    def take(self):
        """(calls, estimated total seconds, calls timed) since the last take, and reset; decides
        whether the next epoch samples this op."""
        calls, timed, total_ns = self.calls, self.timed, self.total_ns
        if timed:
            self.mean_ns = total_ns / timed
        self.calls = self.timed = self.total_ns = 0
        self.sampled = self.mean_ns < SHORT_NS
        if not self.sampled:
            self._skip = 0
        return calls, calls * self.mean_ns / 1e9, timed


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

    def op(self, name, **tags):
        """The timer of op `name` with `tags`; use it as a context manager."""
        key = (name, *tags.items()) if tags else name
        try:
            timer = self._timers.get(key)
        except TypeError:   # an unhashable tag value
            timer = None
        if timer is None:
            timer = self._new(key, name, tags)
        return timer

    def _new(self, key, name, tags):
        _check_identity(name, tags)
        identity = (name, tuple(sorted(tags.items())))
        timer = self._by_identity.get(identity)
        if timer is None:
            timer = self._by_identity[identity] = _Timer({"name": name, "tags": dict(sorted(tags.items()))},
                                                              len(self._labels))
            base = f"{name}[{','.join(map(str, timer.identity['tags'].values()))}]" if tags else name
            label, n = base, 1
            while label in self._labels:
                n += 1
                label = f"{base}#{n}"
            self._labels[label] = timer
        self._timers[key] = timer
        return timer

    def take(self):
        """{label: {"name", "tags", "calls", "total_s", "timed"}} for ops that ran since the last take,
        and reset."""
        out = {}
        for label, timer in self._labels.items():
            if timer.calls:
                calls, total_s, timed = timer.take()
                out[label] = {**timer.identity, "calls": calls, "total_s": total_s, "timed": timed}
        return out
