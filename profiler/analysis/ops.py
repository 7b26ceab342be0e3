"""Op identity (name plus tags) and per-op series over epoch records.

An op is recorded as {"name": str, "tags": {k: v}, "calls", "total_s"} under a display key. Runs
written before ops carried their identity have only the key "name[v1,v2]"; those tags are read as
positional ("0": "v1", "1": "v2"). The identity is never rebuilt from a display string when the
record holds it, so an op named "conv[fast]" and "conv" tagged layout=fast stay apart.
"""

from dataclasses import dataclass

import numpy as np

MAX_OPS = 200   # the ops an analysis follows, those with the most time (see followed)


@dataclass(frozen=True)
class OpId:
    name: str
    tags: tuple = ()      # ((key, value), ...) sorted by key; values as recorded (str, int, float, bool, None)

    def tag_dict(self):
        return dict(self.tags)

    def without(self, keys):
        return OpId(self.name, tuple((k, v) for k, v in self.tags if k not in keys))

    def __lt__(self, other):   # an order for tables: numbers by value (1 == True == 1.0, as ==), then text
        def key(op):
            return op.name, tuple((k, 0, v, "") if isinstance(v, (int, float)) else (k, 1, 0, str(v)) for k, v in op.tags)
        return key(self) < key(other)


def op_id(key, value):
    """The identity of one op entry of an epoch record."""
    if isinstance(value, dict) and "name" in value:
        return OpId(value["name"], tuple(sorted((str(k), v) for k, v in (value.get("tags") or {}).items())))
    name, bracket, rest = key.partition("[")
    if not bracket or not rest.endswith("]"):
        return OpId(key)
    return OpId(name, tuple((str(i), v) for i, v in enumerate(rest[:-1].split(","))))


def op_index(records):
    """{OpId: [(position in records, seconds, calls), ...]}: each op's entries, sparse."""
    index = {}
    for position, record in enumerate(records):
        for key, value in record.get("ops", {}).items():
            index.setdefault(op_id(key, value), []).append((position, value["total_s"], value["calls"]))
    return index


def op_time(index, epochs):
    """{OpId: mean seconds per epoch} of an op_index over `epochs` records."""
    return {op: sum(s for _, s, _ in entries) / epochs for op, entries in index.items()}


def followed(*times):
    """The MAX_OPS ops with the most time over the runs' op_time: a tag with a value per call makes an
    op per value, and a dense series of each of 10^5 such ops over 2,000 epochs took 3 GB. Chosen over
    both runs of a comparison before they are matched, so an op below one run's own cut does not read
    as the other run's alone."""
    total = {}
    for time in times:
        for op, seconds in time.items():
            total[op] = total.get(op, 0.0) + seconds
    return set(sorted(total, key=lambda op: -total[op])[:MAX_OPS])


def op_series(index, epochs, ops):
    """{OpId: (seconds per epoch, calls per epoch)} of the `ops` in an op_index, as arrays of `epochs`
    (0 where absent)."""
    out = {}
    for op, entries in index.items():
        if op not in ops:
            continue
        seconds, calls = np.zeros(epochs), np.zeros(epochs)
        for position, s, c in entries:
            seconds[position] += s
            calls[position] += c
        out[op] = (seconds, calls)
    return out
