"""Fixed time windows as epochs, for a script in which nothing marks epochs.

Design: a daemon thread only measures time. When a window is due it asks the main thread to
run `_tick` between two bytecodes (pending.py: CPython's pending calls, with no signal). CPython
never runs a pending call inside another, so a boundary cannot re-enter itself while the Session
closes an epoch (heap snapshots, GC callbacks). A boundary is taken only at a
safe point: no step open (it waits for the step's end) and none of the profiler's own code on
the stack (a GC callback, a hook); otherwise the thread asks again 10 ms later. A window is at
least MIN_SECONDS long.

The last, shorter window is written only if it is the only one and the script finished; a window
cut by a crash is abandoned (written flagged unfinished when it holds steps: the Session's
abandon_epoch). Windows pause when the script starts importing torch, or at once when
torch is imported already (a torch script marks its own epochs, and its set-up is no epoch;
detect.py). They resume at an optimizer step that no DataLoader pass holds, or, when torch has
marked no epoch and no step GRACE_WINDOWS windows after its import (inference, a loop with no
optimizer), at the first moment no DataLoader pass is open. A stronger source's first epoch drops
the window in progress and ends the windows; once the windows hold steps, a DataLoader
pass with autograd off (an evaluation under torch.no_grad()) is no epoch of torch's but part of
the window it runs in (integrations/torch.py), and a window dropped by a pass with no step is
followed by the next at the next optimizer step.
"""

import threading
import time

from ..errors import UsageError
from . import pending

MIN_SECONDS = 0.1
MAX_SECONDS = 10 ** 7   # 116 days: the windows thread's wait overflowed (time_t) at 1e10 s
RETRY_SECONDS = 0.01
GRACE_WINDOWS = 3
_current = None   # the running Windows; the pending call below finds it here


def _tick_current(frame):
    windows = _current
    if windows is not None and frame is not None:
        try:
            windows._tick(frame)
        except Exception as e:   # never raised into the script: the windows end, the run says why
            windows.error = f"{type(e).__name__}: {e}"
            windows.pause()


def check_seconds(seconds):
    if not (isinstance(seconds, (int, float)) and MIN_SECONDS <= seconds <= MAX_SECONDS):
        raise UsageError(f"--window {seconds}: give a window of {MIN_SECONDS} s to {MAX_SECONDS:,} s "
                         f"(a boundary closes an epoch and samples memory)")
    return float(seconds)


class Windows:
    def __init__(self, marks, seconds):
        self.marks, self.seconds = marks, check_seconds(seconds)
        self.running = False
        self.error = None          # why the windows ended early, if they did
        self._due = False          # a boundary is owed and not yet taken
        self._waiting = False      # the clock runs, no window is open yet (resume_later)
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread = None
        self._window_start = 0.0
        marks.on_step_end.append(self._after_step)

    def start(self):
        """Start the windows now; False where they cannot run (the Session is not in the main
        thread, or another Windows is running)."""
        if self.running:   # waiting out the grace period, or a pass with no step ended the last window
            if (self._waiting or self.marks.open is None) and self.marks.allows("windows"):
                self._waiting = False
                self.marks.begin_epoch("windows")
                self._restart_clock()
            return True
        if not self._launch(0.0, waiting=False):
            return False
        self.marks.begin_epoch("windows")
        return True

    def resume_later(self):
        """Start the windows GRACE_WINDOWS windows from now unless torch marks an epoch or a step
        by then."""
        if not self.running:
            self._launch((GRACE_WINDOWS - 1) * self.seconds, waiting=True)

    def _launch(self, delay, *, waiting):
        """Start the clock; its first boundary is due `delay` + one window from now."""
        global _current
        if not self.marks.allows("windows"):
            return False
        if threading.current_thread() is not threading.main_thread() or _current not in (None, self):
            return False
        _current = self
        self._due, self._waiting, self._window_start = False, waiting, time.monotonic() + delay
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._clock, args=(self._stop, self._wake), name="profiler-windows",
                                        daemon=True)
        self.running = True
        self._thread.start()
        return True

    def pause(self, hold=True):
        """Stop the clock and drop the window in progress (held as Marks.drop_epoch holds it, unless
        `hold` is False)."""
        global _current
        if not self.running:
            return
        self.running, self._due, self._waiting = False, False, False
        self._stop.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        if _current is self:
            _current = None
        self.marks.drop_epoch("windows", hold)

    def stop(self):
        """At the end of a run that finished (sys.exit(0) included): the last, partial window is
        written only if no other was, else dropped with its steps: no epoch the run stopped in."""
        if not self.running:
            return
        if self.marks.open == "windows" and self.marks.epochs == 0:
            self.marks.end_epoch("windows")
        self.pause(hold=False)

    def _clock(self, stop, wake):
        """The daemon thread: wait out the window, then ask the main thread for a boundary until
        it is taken. A window restarted while it waits (the windows began at the first optimizer
        step, during the grace period's wait) wakes it to wait again from the new start, so the
        first window is as long as the others."""
        while not stop.is_set():
            remaining = self._window_start + self.seconds - time.monotonic()
            if remaining > 0:
                wake.wait(remaining)
                wake.clear()
                continue
            self._due = True
            while self._due:
                if not self.marks.step_open:   # an open step ends with _after_step
                    pending.soon(_tick_current)
                if stop.wait(RETRY_SECONDS):
                    return

    def _tick(self, frame):
        """In the main thread, at the bytecode `frame` was about to run."""
        if not self.running or not self._due or pending.in_profiler_code(frame):
            return
        if self._waiting:
            if self.marks.epochs or self.marks.steps:   # torch marks this run
                self.pause()
            elif self.marks.open is None:
                self.start()
            return
        if self.marks.open != "windows":
            if not self.marks.allows("windows"):   # a framework took over
                self.pause()
            elif self.marks.open is None:           # a dropped torch pass left no epoch open
                self.marks.begin_epoch("windows")
                self._restart_clock()
            return
        if self.marks.step_open or self.marks.busy:
            return
        self._roll()

    def _after_step(self, steps):
        if self._due and self.running and self.marks.open == "windows":
            self._roll()

    def _roll(self):
        self.marks.end_epoch("windows")
        self.marks.begin_epoch("windows")
        self._restart_clock()

    def _restart_clock(self):
        self._window_start = time.monotonic()
        self._due = False
        self._wake.set()
