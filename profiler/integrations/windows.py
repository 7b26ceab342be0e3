"""Fixed time windows as epochs, for a script in which nothing marks epochs.

A real-time interval timer (SIGALRM) ends one window and begins the next in the main thread,
between two bytecodes; a window never cuts a step in two: while a step is open the change waits
for the step's end. The last window, shorter than the others, is dropped unless it is the only
one. Windows pause when the script starts importing torch, or at once when torch is imported
already (a torch script marks its own epochs, and its set-up is no epoch; detect.py), and resume
at an optimizer step that no DataLoader pass holds. A stronger source's first epoch drops the
window in progress and ends the windows.
"""

import signal
import threading


class Windows:
    def __init__(self, marks, seconds):
        self.marks, self.seconds = marks, seconds
        self.running = False
        self._pending = False
        self._previous = None
        marks.on_step_end.append(self._after_step)

    def start(self):
        """Start the windows; False where no timer is free (not the main thread, or the script's
        own SIGALRM handler)."""
        if self.running or not self.marks.allows("windows"):
            return self.running
        if threading.current_thread() is not threading.main_thread():
            return False
        previous = signal.getsignal(signal.SIGALRM)
        if previous not in (signal.SIG_DFL, None) and previous != self._tick:
            return False
        self._previous = previous
        signal.signal(signal.SIGALRM, self._tick)
        self.marks.begin_epoch("windows")
        signal.setitimer(signal.ITIMER_REAL, self.seconds, self.seconds)
        self.running = True
        return True

    def pause(self):
        """Stop the timer and drop the window in progress."""
        if not self.running:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous if self._previous is not None else signal.SIG_DFL)
        self.running, self._pending = False, False
        self.marks.drop_epoch("windows")

    def stop(self):
        """At the end of the run: the last, partial window is written only if no other was."""
        if not self.running:
            return
        if self.marks.open == "windows" and self.marks.epochs == 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.marks.end_epoch("windows")
        self.pause()

    def _tick(self, signum, frame):
        if self.marks.open != "windows":
            if not self.marks.allows("windows"):   # a framework took over
                self.pause()
            elif self.marks.open is None:           # a dropped torch pass left no epoch open
                self.marks.begin_epoch("windows")
            return
        if self.marks.step_open or self.marks.busy:
            self._pending = True
            return
        self._roll()

    def _after_step(self, steps):
        if self._pending and self.marks.open == "windows":
            self._roll()

    def _roll(self):
        self._pending = False
        self.marks.end_epoch("windows")
        self.marks.begin_epoch("windows")
