"""Ctrl-C held through work it must not cut short, then raised where Python can take it: numba's
import and compiles, and a Session's final status. And SIGTERM raised as Terminated while a
command waits on processes of its own (terminated_raises), so that they stop with it.

numba's C extensions turn a KeyboardInterrupt that lands inside their import into an ImportError
("numba._devicearray failed to import") after printing its traceback. llvmlite prints and drops
one that lands in its callbacks from C while a kernel compiles ("Exception ignored on calling
ctypes callback function"), and the run went on or failed with "no compiled object yet". Both
holds act only in the main thread, over Python's own SIGINT handler; elsewhere, and over a handler
the program installed, they do nothing.
"""

import contextlib
import signal
import threading


class _Hold:
    """Ctrl-C held from the outermost enter to its leave, then raised (unless `raise_held` is
    False: the block is already ending by an exception). Held only over Python's own handler,
    found at that enter: a handler the program installed stays as it is."""

    def __init__(self):
        self.depth = 0
        self.holding = self.interrupted = False

    def enter(self):
        if self.depth == 0:
            self.holding = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            if self.holding:
                signal.signal(signal.SIGINT, self._note)
        self.depth += 1

    def leave(self, raise_held=True):
        self.depth -= 1
        if self.depth == 0 and self.holding:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            interrupted, self.holding, self.interrupted = self.interrupted, False, False
            if interrupted and raise_held:
                raise KeyboardInterrupt

    def _note(self, signum, frame):
        self.interrupted = True


def _main_thread():
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupts_held():
    """Ctrl-C held through the block (an import of numba, a run's final records), then raised."""
    if not _main_thread():   # signal.signal works in the main thread only
        yield
        return
    hold = _Hold()
    hold.enter()
    try:
        yield
    except BaseException:
        hold.leave(raise_held=False)
        raise
    hold.leave()


@contextlib.contextmanager
def interrupts_held_in_compiles():
    """Ctrl-C that lands while numba compiles or loads a kernel in the block, held until that
    compile ends (numba's compiler lock is released) and raised there. numba must be imported."""
    if not _main_thread():
        yield
        return
    from numba.core import event
    hold = _Hold()

    class Compiles(event.Listener):
        def on_start(self, ev):
            if _main_thread():
                hold.enter()

        def on_end(self, ev):
            if _main_thread():
                hold.leave()

    try:
        with event.install_listener("numba:compiler_lock", Compiles()):
            yield
    finally:
        if hold.depth:   # a start with no end (a listener after ours raised): Python's handler back
            hold.depth = 1
            hold.leave(raise_held=False)


class Terminated(BaseException):
    """SIGTERM while a command waited on processes of its own: they are stopped on the way out, and
    the command ends with 128 + SIGTERM (cli.py)."""


@contextlib.contextmanager
def terminated_raises():
    """In the block, SIGTERM raises Terminated in the main thread rather than ending the process
    at once, which would leave the processes it started running (orphaned, with their temporary
    files). Only over SIGTERM's default action: a handler the program installed stays."""
    if not _main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is raise_terminated:   # a handler set meanwhile stays
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
