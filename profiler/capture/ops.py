"""Per-op wall-time accumulators with a structured identity: a name plus a dict of tags.

`op("conv2d_backward", layout="NCHW")` and `op("conv[fast]")` are different ops whatever their
labels look like: identity is (name, sorted tags), and each epoch record's value carries both
({"name", "tags", "calls", "total_s"}). The record's key is a readable label, `name[v1,...]`, made
unique within the session (a second op with the same label gets `#2`, ...).

`op()` is on the hot path (tens of calls per training step), so each identity gets one reusable
timer object, found by one dict lookup: entering and leaving it is two clock reads and two
additions; nothing is allocated per call. Memory is bounded by the number of distinct ops.
"""

import math
import time

from ..errors import UsageError

_now = time.perf_counter_ns


class _Timer:
    __slots__ = ("calls", "total_ns", "_t0", "_depth", "identity")

    def __init__(self, identity):
        self.identity = identity   # {"name": str, "tags": {...}}
        self.calls, self.total_ns, self._t0, self._depth = 0, 0, 0, 0

    def __enter__(self):
        if self._t0:   # the op inside itself (recursion): the outermost call holds the time
            self._depth += 1
        else:
            self._t0 = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._depth:
            self._depth -= 1
        else:
            self.total_ns += _now() - self._t0
            self._t0 = 0
        self.calls += 1
        return False


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
            timer = self._by_identity[identity] = _Timer({"name": name, "tags": dict(sorted(tags.items()))})
            base = f"{name}[{','.join(map(str, timer.identity['tags'].values()))}]" if tags else name
            label, n = base, 1
            while label in self._labels:
                n += 1
                label = f"{base}#{n}"
            self._labels[label] = timer
        self._timers[key] = timer
        return timer

    def take(self):
        """{label: {"name", "tags", "calls", "total_s"}} for ops that ran since the last take, and reset."""
        out = {}
        for label, timer in self._labels.items():
            if timer.calls:
                out[label] = {**timer.identity, "calls": timer.calls, "total_s": timer.total_ns / 1e9}
                timer.calls, timer.total_ns = 0, 0
        return out
