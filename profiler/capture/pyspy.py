"""Record any command with py-spy as raw collapsed stacks (report/flamegraph.py draws them).

py-spy writes either its own SVG or raw collapsed stacks from one recording, and a diff needs the
stacks, so the recording is raw and is kept next to the SVG as the data behind it.
numba kernels are invisible to py-spy (no Python frames), so every kernel is entered through a
named Python function (conv2d_backward, broadcast_add_forward, ...) that shows in the stacks.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import FlamegraphError, RunWriteError, UsageError
from ..interrupts import terminated_raises
from ..replaced import replaced


def py_spy():
    """Path of the py-spy executable (the venv's own first)."""
    local = Path(sys.executable).parent / "py-spy"
    found = str(local) if local.exists() else shutil.which("py-spy")
    if not found:
        raise FlamegraphError("py-spy is not installed: pip install py-spy (it is a dependency of profiler)")
    return found


def _said(text):
    """py-spy's own error line, without the Rust backtrace it prints on some machines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors or lines or ["(nothing)"])[0]


def record(command, folded_path, *, rate=100, env=None, pass_fds=(), wait=None):
    """Start `command` (a list), record it with py-spy until it ends, write collapsed stacks to
    folded_path. Returns the command's exit code (the stacks are kept whatever it is).
    wait(process), when given, runs before py-spy attaches and returns whether to record: py-spy
    records from then on (`profiler flamegraph --from-first-epoch` waits for the first epoch).

    The command is started here and py-spy attaches to its pid, so its exit code is known (py-spy
    run as a launcher exits 0 whatever the command did) and a command that ends before py-spy
    could look at it is reported as that, not as py-spy's own error. The recording replaces
    folded_path only once it holds samples (replaced.py): a failed one leaves an earlier one."""
    program = shutil.which(command[0])
    if program is None:
        raise UsageError(f"cannot run {command[0]!r}: no such program (give a path or a program on PATH)")
    folded_path = Path(folded_path)
    with replaced(folded_path) as target:
        try:
            folded_path.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"")   # a path that cannot be written is said now, before the command runs
        except OSError as e:
            raise RunWriteError(f"cannot write the recording to {folded_path}: {e.strerror or e}") from e
        with terminated_raises():   # the command and py-spy are stopped, the partial recording removed
            return _record(program, command, target, rate, env, pass_fds, wait)


def _record(program, command, folded_path, rate, env, pass_fds, wait):
    target = subprocess.Popen([program, *command[1:]], env=env, pass_fds=pass_fds)
    try:
        if wait is not None and not wait(target):
            code = target.wait()
            if code == 2:   # `profiler run` refused its arguments, in its own line: the mistake is the user's
                raise UsageError(f"{' '.join(command)} stopped on the usage error above before its first epoch "
                                 f"began; nothing was recorded")
            raise FlamegraphError(f"{' '.join(command)} exited with code {code} before its first epoch began; "
                                  f"nothing was recorded (profiler run shows where its epochs come from; a plain "
                                  f"loop's are marked by --epoch-fn NAME)")
        spy = subprocess.run([py_spy(), "record", "--pid", str(target.pid), "--format", "raw", "--rate", str(rate),
                              "--output", str(folded_path), "--nonblocking"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "RUST_BACKTRACE": "0"})
        code = target.wait()
    finally:   # py-spy itself: subprocess.run kills it on any exception
        if target.poll() is None:
            target.kill()
            target.wait()
    text = spy.stdout or ""
    if "Permission denied" in text or "ptrace" in text.lower() or "Operation not permitted" in text:
        raise FlamegraphError(
            "py-spy cannot attach to the process (no ptrace permission). Fix: run as root, or "
            "`sudo sysctl kernel.yama.ptrace_scope=0`, or in a container add --cap-add SYS_PTRACE. "
            f"py-spy said: {_said(text)}")
    if spy.returncode != 0 or not folded_path.exists() or folded_path.stat().st_size == 0:
        raise FlamegraphError(f"{' '.join(command)} exited with code {code} before py-spy took a sample; "
                              f"record a command that runs for at least a fraction of a second "
                              f"(py-spy said: {_said(text)})")
    return code
