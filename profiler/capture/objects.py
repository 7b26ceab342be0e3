"""What the collector walks: GC-tracked objects per generation, and in deep mode the types that grow.

CPython (3.11) keeps no count of the objects in each generation, so `TrackedCounter` counts them
with len(gc.get_objects(generation)): 15-70 ns per object on the project's 2-core VM, and a
transient list of 8 bytes per object. It samples within a time budget (budget.py: 0.1% of the
time since the previous sample began), so a heap of 10^4 objects is counted about every 0.5 s and one of 10^6 about
every 70 s (a short run of a big heap gets one count); the engine's mlp, whose objects the loop
freezes, every few epochs.

`TypeGrowth` (deep mode only: it walks every tracked object) counts tracked objects by type, diffs
against the previous sample, and for the types that grew most asks tracemalloc where a sample of
their newest objects were allocated (generation 0 first, then 1, then the newest end of 2), so a
verdict can say "+40k lists per epoch, from loader.py:42".
"""

import collections
import gc

from .budget import Budget

TOP = 5
SITE_SAMPLE = 20
SITE_SCAN = 2000


class TrackedCounter:
    def __init__(self, budget=0.001):
        self._budget = Budget(budget)

    def sample(self):
        """[n0, n1, n2] when the budget allows a count now, else None."""
        return self._budget.call(_counts)


def _counts():
    return [len(gc.get_objects(generation)) for generation in range(3)]


def _type_name(cls):
    module = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _by_type():
    """{type: its tracked objects, oldest first (generation 2, then 1, then 0)}. One Python loop
    that allocates nothing per object: under tracemalloc every allocation is traced (~3 us), so a
    Counter, whose counts are new ints, costs ~15x more here."""
    old, middle = gc.get_objects(2), gc.get_objects(1)
    young = [obj for obj in gc.get_objects(0) if obj is not old and obj is not middle]   # not our own lists
    objects = collections.defaultdict(list)
    for generation in (old, middle, young):
        for obj in generation:
            objects[type(obj)].append(obj)
    return objects


def _site(objects, site_of):
    """The most common allocation site among the newest SITE_SAMPLE objects with a known site
    (looking at the newest SITE_SCAN at most), or None."""
    sites = collections.Counter()
    for obj in objects[:-SITE_SCAN - 1:-1]:
        site = site_of(obj)
        if site is not None:
            sites[site] += 1
            if sum(sites.values()) == SITE_SAMPLE:
                break
    return sites.most_common(1)[0][0] if sites else None


class TypeGrowth:
    def __init__(self, site_of):
        self.site_of = site_of     # site_of(obj) -> "file.py:LINE" or None (tracemalloc's traceback)
        self._previous = None

    def reset(self):
        self._previous = None

    def sample(self, n=TOP):
        """The n types whose tracked objects grew most since the previous sample:
        [{"type", "count", "count_diff", "site"}]; [] on the first sample."""
        objects = _by_type()
        try:
            counts = {t: len(objs) for t, objs in objects.items()}
            previous, self._previous = self._previous, counts
            if previous is None:
                return []
            grown = sorted(((counts[t] - previous.get(t, 0), t) for t in counts), key=lambda d: -d[0])
            return [{"type": _type_name(t), "count": counts[t], "count_diff": diff,
                     "site": _site(objects[t], self.site_of)} for diff, t in grown[:n] if diff > 0]
        finally:   # the lists hold every tracked object, this call's closure cell that holds them among
            for objs in objects.values():   # them: a cycle that kept all alive until a full collection
                objs.clear()
