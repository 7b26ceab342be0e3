"""Per-op wall-time accumulators, keyed 'name[tag,...]' (e.g. 'conv2d_backward[NCHW]').

`OpTimers.op()` is on the hot path (tens of calls per training step), so each distinct key gets one
reusable timer object: entering and leaving it is two perf_counter calls and two additions.
Memory is bounded by the number of distinct keys, not by the number of calls.
"""

import time

_now = time.perf_counter


class _Timer:
    __slots__ = ("calls", "total", "_starts")

    def __init__(self):
        self.calls, self.total, self._starts = 0, 0.0, []

    def __enter__(self):
        self._starts.append(_now())
        return self

    def __exit__(self, *exc):
        self.total += _now() - self._starts.pop()
        self.calls += 1
        return False


class OpTimers:
    def __init__(self):
        self._timers = {}

    def op(self, name, **tags):
        key = (name, *tags.values())
        timer = self._timers.get(key)
        if timer is None:
            timer = self._timers[key] = _Timer()
        return timer

    def take(self):
        """{key: {"calls", "total_s"}} for ops that ran since the last take, and reset."""
        out = {}
        for key, timer in self._timers.items():
            if timer.calls:
                name, *tags = key
                label = f"{name}[{','.join(map(str, tags))}]" if tags else name
                out[label] = {"calls": timer.calls, "total_s": timer.total}
                timer.calls, timer.total = 0, 0.0
        return out
