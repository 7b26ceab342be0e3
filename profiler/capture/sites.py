"""Which line of the program a stack of frames stands for: the line the user wrote.

Allocations (heap.py) and the program's own collections (gc_timer.py) are both named by
"file.py:LINE": the innermost frame outside the standard library, installed packages and the
profiler's wrappers of them, so np.ones's caller rather than numpy, the loop's line that called
accelerate's release_memory() rather than its gc.collect().
"""

import fnmatch
import functools
import itertools
import os
import sysconfig
import tracemalloc

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the profiler's own code: everything in the package but profiler/workloads, the code being profiled
# (one pattern, so each snapshot pays for one filter; fnmatch's * crosses directories)
OWN = os.path.join(_PACKAGE, "[!w]*")
# stacks whose most recent frame is in one of these are not the program's
_EXCLUDE = (OWN, tracemalloc.__file__, "<frozen importlib._bootstrap*>", "<unknown>")
_WRAPPERS = os.path.join(_PACKAGE, "integrations", "*")
_LIBRARIES = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "purelib", "platlib")})


@functools.lru_cache(maxsize=4096)
def _excluded(filename):
    return any(fnmatch.fnmatch(filename, pattern) for pattern in _EXCLUDE)


@functools.lru_cache(maxsize=4096)
def _passed_over(filename):
    """A frame of a library or of the profiler's wrappers: the user's line lies further out."""
    return os.path.realpath(filename).startswith(_LIBRARIES) or fnmatch.fnmatch(filename, _WRAPPERS)


@functools.lru_cache(maxsize=4096)
def _own(filename):
    return fnmatch.fnmatch(filename, OWN)


def user_site(frames):
    """"file.py:LINE" of the line the user wrote among (filename, lineno) frames, most recent first
    (any iterable: it reads only as far as that line): the innermost outside the standard library,
    installed packages and the profiler's wrappers of them (integrations/: a patched
    DataLoader.__next__ allocates for the user's loop), np.ones's own line in numpy saying nothing;
    the innermost frame if all are such. None when there are none, the most recent is excluded
    (tracemalloc's, ...) or the line is the profiler's own (its records, encoded by the standard
    library: writer.py, objects.py; its snapshots; --gc-policy's collections)."""
    frames = iter(frames)
    first = next(frames, None)
    if first is None or _excluded(first[0]):
        return None
    filename, lineno = next((f for f in itertools.chain((first,), frames) if not _passed_over(f[0])), first)
    return None if _own(filename) else f"{filename}:{lineno}"
