"""Calls run in the main thread between two bytecodes, through CPython's pending-call queue.

Py_AddPendingCall is the queue signal handlers use, here without any signal, so the script's
SIGALRM, alarm() and itimers stay its own. CPython never runs a pending call inside another. A
call lands where the main thread next checks for them (a call of a Python function, a loop's next
turn; not inside C code such as time.sleep), the profiler's own code included (a GC callback, a
hook): `in_profiler_code(frame)` tells the function to wait for a later one.
"""

import collections
import ctypes
import sys

# frames of these modules run the script: a call may act under them
_RUNNERS = ("profiler.cli", "profiler.__main__", "profiler.commands.", "profiler.integrations.script",
            "profiler.integrations.pytest_plugin")

_queue = collections.deque()   # the functions of the calls added, in order


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
def _run(_):
    if _queue:
        _queue.popleft()(sys._getframe(1))
    return 0


_add_pending_call = ctypes.pythonapi.Py_AddPendingCall
_add_pending_call.argtypes = (type(_run), ctypes.c_void_p)
_add_pending_call.restype = ctypes.c_int


def soon(fn):
    """Call fn(frame) in the main thread between two bytecodes, `frame` the one about to run; fn
    must not raise. False when CPython's queue is full (the main thread has not run Python for a
    while): try again later."""
    _queue.append(fn)
    if _add_pending_call(_run, None) != 0:
        _queue.remove(fn)
        return False
    return True


def in_profiler_code(frame):
    """Whether the profiler's own code (other than the runner) is on the stack from `frame` out."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if name.startswith("profiler.") and not name.startswith(_RUNNERS):
            return True
        frame = frame.f_back
    return False
