"""Record any command with py-spy as raw collapsed stacks (report/flamegraph.py draws them).

py-spy writes either its own SVG or raw collapsed stacks from one recording, and a diff needs the
stacks, so the recording is raw and is kept next to the SVG as the data behind it.
numba kernels are invisible to py-spy (no Python frames), so every kernel is entered through a
named Python function (conv2d_backward, broadcast_add_forward, ...) that shows in the stacks.
"""

import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import FlamegraphError


def py_spy():
    """Path of the py-spy executable (the venv's own first)."""
    local = Path(sys.executable).parent / "py-spy"
    found = str(local) if local.exists() else shutil.which("py-spy")
    if not found:
        raise FlamegraphError("py-spy is not installed: pip install py-spy (it is a dependency of profiler)")
    return found


def record(command, folded_path, *, rate=100):
    """Run `command` (a list) under py-spy; write collapsed stacks to folded_path."""
    folded_path = Path(folded_path)
    folded_path.parent.mkdir(parents=True, exist_ok=True)
    args = [py_spy(), "record", "--format", "raw", "--rate", str(rate), "--output", str(folded_path),
            "--nonblocking", "--", *command]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text = proc.stdout or ""
    if "Permission denied" in text or "ptrace" in text.lower() or "Operation not permitted" in text:
        raise FlamegraphError(
            "py-spy cannot attach to the process (no ptrace permission). Fix: run as root, or "
            "`sudo sysctl kernel.yama.ptrace_scope=0`, or in a container add --cap-add SYS_PTRACE. "
            f"py-spy said: {text.strip().splitlines()[-1] if text.strip() else ''}")
    if proc.returncode != 0 or not folded_path.exists():
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise FlamegraphError(f"py-spy failed (exit {proc.returncode}) recording {' '.join(command)}:\n{tail}")
    return folded_path
