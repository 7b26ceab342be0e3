"""Run `profiler run` argument lists in fresh processes (GC state must not carry over between runs).

Ctrl-C stops the child as it stops `profiler run` itself: the child records its run as
`interrupted`, with every finished epoch, before this process says `profiler: interrupted`. A
Ctrl-C at a terminal reaches the child too (it is in our process group); one sent to this process
alone (`kill -INT`) does not, so the child gets its SIGINT from us when it is still running a
moment later (not at once: the terminal's Ctrl-C has most likely reached it, and one is enough).
SIGTERM to this process is passed on to the child at once, which records its run as `terminated`.
"""

import contextlib
import signal
import subprocess
import sys
import tempfile

from ..errors import WorkloadError
from ..interrupts import Terminated, terminated_raises
from .terminal import stderr_is_a_terminal

# after a Ctrl-C here: how long the child has to end of its own (a Ctrl-C at the terminal reached
# it too), then how long after our SIGINT, before it is killed (its run then stays `running`)
INTERRUPT_GRACE_S = 1.0
INTERRUPT_BOUND_S = 5.0


def run_many(jobs, desc):
    from tqdm import tqdm
    for argv in tqdm(jobs, desc=desc, unit="run", leave=False, disable=not stderr_is_a_terminal()):
        code, err = run_child([sys.executable, "-m", "profiler", *argv])
        if code != 0:
            lines = err.strip().splitlines()
            raise WorkloadError(f"`profiler {' '.join(argv)}` failed: {lines[-1] if lines else code}")


def run_child(cmd, capture=True):
    """Run `cmd` to its end: (exit code, its stderr, or "" when it writes to ours: capture=False).
    A captured stderr goes to a temporary file, not a pipe, so that nothing needs reading while we
    wait for it after a Ctrl-C."""
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(tempfile.TemporaryFile(mode="w+b")) if capture else None
        stack.enter_context(terminated_raises())
        proc = subprocess.Popen(cmd, stderr=err)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            stop_interrupted(proc)
            raise
        except Terminated:   # passed on: the child records its run as terminated
            stop_interrupted(proc, signal.SIGTERM, grace_s=0)
            raise
        except BaseException:
            _kill(proc)
            raise
        if err is None:
            return code, ""
        err.seek(0)
        return code, err.read().decode("utf-8", "replace")


def stop_interrupted(proc, signum=signal.SIGINT, grace_s=INTERRUPT_GRACE_S):
    """After a Ctrl-C (or, with SIGTERM and no grace, a SIGTERM) in this process: let `proc` end of
    its own for `grace_s` (a terminal's Ctrl-C reached it too), else send it `signum` and wait
    INTERRUPT_BOUND_S more; SIGKILL only after that. Another Ctrl-C or SIGTERM while waiting moves
    on to the next step at once."""
    for send, wait_s in ((None, grace_s), (signum, INTERRUPT_BOUND_S)):
        try:
            if send is not None:
                proc.send_signal(send)   # nothing to a child that has ended
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            pass
        except (KeyboardInterrupt, Terminated):   # pressed or sent again: on to the next step
            pass
    _kill(proc)


def _kill(proc):
    proc.kill()   # nothing to a child that has ended
    while True:
        try:
            proc.wait()
            return
        except (KeyboardInterrupt, Terminated):   # a SIGKILLed child ends at once: reap it all the same
            continue
