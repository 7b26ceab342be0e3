"""Calls run through CPython's pending-call queue (profiler.integrations.pending): what they raise
never escapes as ctypes' "Exception ignored", and a Ctrl-C inside one reaches the script."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from profiler.integrations import pending
from profiler.interrupts import interrupts_held


def _spin(seconds=10.0):
    """Python code the main thread runs (pending calls land between its bytecodes), for at most
    `seconds`: a KeyboardInterrupt ends it sooner."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_an_error_in_a_call_is_one_line_and_the_code_goes_on(capsys):
    ran = []

    def failing(frame):
        ran.append(frame is not None)
        raise ValueError("boom")

    assert pending.soon(failing)
    _spin(0.01)
    assert ran == [True]
    assert capsys.readouterr().err == "profiler: ValueError: boom (in a pending call; the run goes on)\n"


def test_a_ctrl_c_in_a_call_reaches_the_code_it_landed_in(capsys):
    """A KeyboardInterrupt inside a call (the user's Ctrl-C while a freed pass's epoch was being
    written, or raised once a hold ends) was printed by ctypes and dropped: the loop ran on."""
    def interrupted(frame):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        assert pending.soon(interrupted)
        _spin()
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_ctrl_c_held_through_a_call_is_raised_after_it(capsys):
    """The second Ctrl-C of session.abandon_epoch, which a freed pass's call runs: held until the
    epoch is written, then raised at the hold's end, still inside the call."""
    written = []

    def held(frame):
        with interrupts_held():
            signal.raise_signal(signal.SIGINT)
            written.append(True)

    with pytest.raises(KeyboardInterrupt):
        assert pending.soon(held)
        _spin()
    assert written == [True]
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_ctrl_c_in_a_freed_objects_call_reaches_the_code_that_freed_it(capsys):
    class Iterator:
        pass

    def interrupted(frame):
        raise KeyboardInterrupt

    it = Iterator()
    ref = pending.when_freed(it, interrupted)
    with pytest.raises(KeyboardInterrupt):
        del it   # freed here (no cycle): a collection would run other finalizers, where Python drops a Ctrl-C
        _spin()
    assert id(ref) not in pending._armed   # its call ran
    assert "Exception ignored" not in capsys.readouterr().err


SCRIPT = textwrap.dedent("""
    import time
    from profiler.integrations import pending

    def interrupted(frame):
        raise KeyboardInterrupt

    pending.soon(interrupted)
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            pass
    except KeyboardInterrupt:
        print("interrupted in the loop")
    else:
        print("not interrupted")
""")


def test_a_ctrl_c_in_a_call_leaves_no_traceback_of_ctypes():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "interrupted in the loop\n"
    assert proc.stderr == ""


HANDLED = textwrap.dedent("""
    import signal, sys, time
    from profiler.integrations import pending

    calls = []

    def handler(signum, frame):   # the program's own: cleans up, then exits 130
        calls.append(signum)
        sys.exit(130)

    signal.signal(signal.SIGINT, handler)

    def interrupted(frame):   # the Ctrl-C lands while a pending call runs
        signal.raise_signal(signal.SIGINT)

    pending.soon(interrupted)
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            pass
    except SystemExit as e:
        print("exit", e.code, "handler calls", len(calls))
    else:
        print("not interrupted")
""")


def test_what_the_programs_own_handler_raises_in_a_call_reaches_its_code_once():
    # the handler's SystemExit(130) went to ctypes ("Exception ignored ... SystemExit: 130", then SystemError in
    # the script); signalled again, a handler would run twice for one Ctrl-C (a review)
    proc = subprocess.run([sys.executable, "-c", HANDLED], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "exit 130 handler calls 1\n" and proc.stderr == "", (proc.stdout, proc.stderr)


ALARMED = textwrap.dedent("""
    import signal, time
    from profiler.integrations import pending

    class Deadline(Exception):
        pass

    def timeout(signum, frame):   # the program's own alarm: its exception is the program's
        raise Deadline("deadline")

    signal.signal(signal.SIGALRM, timeout)
    pending.soon(lambda frame: signal.raise_signal(signal.SIGALRM))
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            pass
    except Deadline as e:
        print("timed out:", e)
""")

UNCAUGHT = textwrap.dedent("""
    import time
    from profiler.integrations import pending

    def interrupted(frame):
        raise KeyboardInterrupt

    pending.soon(interrupted)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        pass
""")


def test_an_exception_of_the_programs_signal_handler_in_a_call_is_the_programs():
    # its alarm's exception was printed as the profiler's own ("in a pending call; the run goes on") and the
    # script never timed out (a review)
    proc = subprocess.run([sys.executable, "-c", ALARMED], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "timed out: deadline\n", "")


def test_an_uncaught_ctrl_c_from_a_call_exits_as_a_ctrl_c_does():
    # raised again as a class of its own, it made the exit 1, not Python's exit by SIGINT (a review)
    proc = subprocess.run([sys.executable, "-c", UNCAUGHT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -2 and proc.stderr.rstrip().endswith("KeyboardInterrupt"), (proc.returncode, proc.stderr)
