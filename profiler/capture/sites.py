"""Which line of the program a stack of frames stands for: the line the user wrote.

Allocations (heap.py) and the program's own collections (gc_timer.py) are both named by
"file.py:LINE": the innermost frame outside the standard library, installed packages and the
profiler's wrappers of them, so np.ones's caller rather than numpy, the loop's line that called
accelerate's release_memory() rather than its gc.collect(). A collection also keeps the line of
the installed package it came through, if any (user_site_via): the gc.collect() in that package.
"""

import fnmatch
import functools
import itertools
import os
import sysconfig

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the profiler's own code: everything in the package but profiler/workloads, the code being profiled
# (one pattern: fnmatch's * crosses directories)
_OWN = os.path.join(_PACKAGE, "[!w]*")
# stacks whose most recent frame is in one of these are not the program's
# (tracemalloc's file by its path: light capture, which names forced collections' lines, does not import it)
_EXCLUDE = (_OWN, os.path.join(sysconfig.get_paths()["stdlib"], "tracemalloc.py"), "<frozen importlib._bootstrap*>",
            "<unknown>")
_WRAPPERS = os.path.join(_PACKAGE, "integrations", "*")
_PACKAGES = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep   # in a plain install, the packages lie under it


@functools.lru_cache(maxsize=4096)
def _excluded(filename):
    return any(fnmatch.fnmatch(filename, pattern) for pattern in _EXCLUDE)


@functools.lru_cache(maxsize=4096)
def _stdlib(filename):
    """A frame of the standard library: its files, or a module frozen into the interpreter
    ("<frozen posixpath>")."""
    return filename.startswith("<frozen ") or (os.path.realpath(filename).startswith(_STDLIB)
                                               and not _package(filename))


@functools.lru_cache(maxsize=4096)
def _passed_over(filename):
    """A frame of a library or of the profiler's wrappers: the user's line lies further out."""
    return _stdlib(filename) or _package(filename) or fnmatch.fnmatch(filename, _WRAPPERS)


@functools.lru_cache(maxsize=4096)
def _package(filename):
    """A frame of an installed package (not the standard library)."""
    return os.path.realpath(filename).startswith(_PACKAGES)


@functools.lru_cache(maxsize=4096)
def own(filename):
    """Whether `filename` is the profiler's own code (not profiler/workloads)."""
    return fnmatch.fnmatch(filename, _OWN)


def own_or_stdlib(filename):
    """Whether `filename` is the profiler's own code or the standard library's."""
    return own(filename) or _stdlib(filename)


def user_site(frames):
    """"file.py:LINE" of the line the user wrote among (filename, lineno) frames, most recent first
    (any iterable: it reads only as far as that line): the innermost outside the standard library,
    installed packages and the profiler's wrappers of them (integrations/: a patched
    DataLoader.__next__ allocates for the user's loop), np.ones's own line in numpy saying nothing;
    the innermost frame if all are such. None when there are none, the most recent is excluded
    (tracemalloc's, ...) or the line is the profiler's own (its records, encoded by the standard
    library: writer.py, objects.py; its snapshots)."""
    return user_site_via(frames)[0]


def user_site_via(frames):
    """(user_site(frames), the line of the innermost installed package passed over on the way to
    it, or None)."""
    frames = iter(frames)
    first = next(frames, None)
    if first is None or _excluded(first[0]):
        return None, None
    via = None
    for filename, lineno in itertools.chain((first,), frames):
        if not _passed_over(filename):
            return (None if own(filename) else f"{filename}:{lineno}"), via
        if via is None and _package(filename):
            via = f"{filename}:{lineno}"
    return (None if own(first[0]) else f"{first[0]}:{first[1]}"), None   # all passed over: the innermost
