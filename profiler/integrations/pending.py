"""Calls run in the main thread between two bytecodes, through CPython's pending-call queue.

Py_AddPendingCall is the queue signal handlers use, here without any signal, so the script's
SIGALRM, alarm() and itimers stay its own. CPython never runs a pending call inside another. A
call lands where the main thread next checks for them (a call of a Python function, a loop's next
turn; not inside C code such as time.sleep), the profiler's own code included (a GC callback, a
hook): `in_profiler_code(frame)` tells the function it landed there (a time window's boundary then
waits for the next call its clock thread adds; a freed pass's end is left to the next pass).
Whatever a call raises stays out of ctypes, which would print it as "Exception ignored" and drop
it: an error is one line on stderr, and a Ctrl-C inside the call (or held through it and raised
at its end), or what the program's own signal handler raised there (its sys.exit(130)), is raised
again in the script's code once the call is left (_raise_once_left). Like any Ctrl-C, it is
dropped if it lands in a finalizer or a GC callback.
"""

import collections
import ctypes
import functools
import signal
import sys
import threading
import time
import weakref

# frames of these modules run the script: a call may act under them
_RUNNERS = ("profiler.cli", "profiler.__main__", "profiler.commands.", "profiler.integrations.script",
            "profiler.integrations.pytest_plugin")

_queue = collections.deque()   # soon()'s functions, in order
_armed = {}                    # id(weakref) -> (the weakref, its function): when_freed()'s, until run or cancelled


def _call(ref_id):
    try:
        try:
            frame = sys._getframe(1)
        except ValueError:   # no Python frame: the interpreter is exiting
            frame = None
        if ref_id is None:
            fn = _queue.popleft() if _queue else None
        else:
            fn = _armed.pop(ref_id, (None, None))[1]
        if fn is not None:
            try:
                fn(frame)
            except Exception as e:   # never into the script, nor as ctypes' "Exception ignored"
                if not _from_a_handler(e):   # the profiler's own: the run goes on
                    print(f"profiler: {type(e).__name__}: {e} (in a pending call; the run goes on)", file=sys.stderr)
                    return 0
                raise
    except BaseException as e:   # KeyboardInterrupt, or what a signal handler of the program raised in the call
        _raise_once_left(e)
    return 0


def _from_a_handler(error):
    """Whether `error` came out of a signal handler the program installed (a frame of one is in its
    traceback: an alarm's TimeoutError that landed in the call), which is the program's to get."""
    handlers = {getattr(getattr(h, "__func__", h), "__code__", None) for h in map(signal.getsignal, _SIGNALS)}
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in handlers:
            return True
        tb = tb.tb_next
    return False


_SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


_run = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(_call)


def _raise_once_left(error):
    """`error` raised again in the main thread once it has left this pending call. Raised inside the
    call, ctypes would print it and drop it; signalled again, the program's handler would run twice.
    A thread waits for the main thread's stack to hold no frame of _call, then makes the error the
    main thread's asynchronous exception (PyThreadState_SetAsyncExc, which takes a class: a Ctrl-C's
    own KeyboardInterrupt, else one whose instance is `error` itself), raised at its next bytecode,
    once a blocking call it is in returns; one that lands in a finalizer, or at the interpreter's
    exit, is lost there, as a Ctrl-C would be."""
    main = threading.main_thread().ident
    cls = type(error)
    if cls is KeyboardInterrupt and not error.args:   # a Ctrl-C as such: uncaught, Python exits by SIGINT (130)
        again = cls
    else:
        try:
            again = type(cls.__name__, (cls,), {"__new__": lambda cls_, *args, **kwargs: error,
                                                "__module__": cls.__module__, "__qualname__": cls.__qualname__})
        except TypeError:   # a class that takes no subclass: raised anew, without its arguments
            again = cls
    set_async = ctypes.pythonapi["PyThreadState_SetAsyncExc"]   # a function object of its own, as _adder's
    set_async.argtypes, set_async.restype = (ctypes.c_ulong, ctypes.py_object), ctypes.c_int

    def raise_in_main():
        while _inside(sys._current_frames().get(main)):
            time.sleep(0.001)
        set_async(main, again)

    try:
        threading.Thread(target=raise_in_main, name="profiler-raise", daemon=True).start()
    except RuntimeError:   # no new thread at the interpreter's exit, which the error was asking for
        pass


def _inside(frame):
    while frame is not None:
        if frame.f_code is _call.__code__:
            return True
        frame = frame.f_back
    return False


def _adder(arg):
    add = ctypes.pythonapi["Py_AddPendingCall"]   # a function object of its own for each argument type
    add.argtypes, add.restype = (type(_run), arg), ctypes.c_int
    return add


_add_pending_call = _adder(ctypes.c_void_p)
_add_for_ref = _adder(ctypes.py_object)   # the weakref itself: _run gets its id


def soon(fn):
    """Call fn(frame) in the main thread between two bytecodes, `frame` the one about to run (None
    at the interpreter's exit). False when CPython's queue is full (the main thread has not run
    Python for a while): try again later, from another thread. Never from inside a pending call:
    CPython runs a call added there in the same run of its queue, at the same frame."""
    _queue.append(fn)
    if _add_pending_call(_run, None) != 0:
        _queue.remove(fn)
        return False
    return True


def when_freed(obj, fn):
    """A weakref to `obj`; once obj is freed, fn(frame) runs as for soon(), at the first check after
    the code that freed it, `frame` that code's (or one it called). The weakref's callback adds the
    call with no Python in between (a C function: Py_AddPendingCall through ctypes), so the call
    does not land in the profiler's own callback. cancel(ref) when it is no longer wanted."""
    ref = weakref.ref(obj, functools.partial(_add_for_ref, _run))
    _armed[id(ref)] = (ref, fn)
    return ref


def cancel(ref):
    """Drop when_freed()'s call for `ref` (None: nothing)."""
    if ref is not None:
        _armed.pop(id(ref), None)


def in_profiler_code(frame):
    """Whether the profiler's own code (other than the runner) is on the stack from `frame` out."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if name.startswith("profiler.") and not name.startswith(_RUNNERS):
            return True
        frame = frame.f_back
    return False
