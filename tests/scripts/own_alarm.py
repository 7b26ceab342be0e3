"""A script with its own SIGALRM timeout, as people guard a slow call: a handler installed up
front, armed with signal.alarm() only around the guarded call, and a heap of small objects.
Prints what its handler saw and how long the work took."""

import signal
import sys
import time


class Timeout(Exception):
    pass


calls = []


def on_alarm(signum, frame):
    calls.append(signum)
    raise Timeout("alarm fired")


signal.signal(signal.SIGALRM, on_alarm)   # installed, not armed
data = [str(i) for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)]
start = time.time()
while time.time() - start < 1.0:
    sum(range(1000))
signal.alarm(30)                            # armed around a call that finishes in time
try:
    while time.time() - start < 1.6:
        sum(range(1000))
finally:
    signal.alarm(0)
print(f"handler calls {len(calls)}, worked {time.time() - start:.1f} s")
