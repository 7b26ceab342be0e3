"""torchrun: where each rank writes its run, and `profiler run --nproc-per-node N` through torch's own
launcher.

Under torchrun (`torchrun [options] -m profiler run --out OUT [options] train.py`) every rank is
a process with RANK, LOCAL_RANK and WORLD_SIZE in its environment; each profiles itself into
OUT/rank-<RANK>/, and the directory OUT is one multi-rank run (profiler.rundir.ranks).
`--nproc-per-node N` starts torch.distributed.run on this host (through launcher.py, which says a
failed rank in a line) with a free port on 127.0.0.1 and the same `profiler run` arguments.
Nothing here imports torch.
"""

import os
import socket
import sys
from pathlib import Path

from ..capture.torchrun import rank_env
from ..errors import UsageError, WorkloadError
from ..rundir.format import RANK_PREFIX
from ..workloads.processes import run_child

LAUNCH_OPTION = "--nproc-per-node"
LAUNCHED = "PROFILER_LAUNCHED"   # set in the ranks `--nproc-per-node` starts: the launcher says what they wrote


def rank_out_dir(out, environ=None):
    """OUT/rank-<RANK> under torchrun, else OUT: the run directory this process writes."""
    env = rank_env(environ)
    return Path(out) / f"{RANK_PREFIX}{env['rank']}" if env else Path(out)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_command(nproc, profiler_argv, port):
    """torch's launcher on this host, starting `profiler <profiler_argv>` in `nproc` processes."""
    return [sys.executable, "-m", "profiler.integrations.launcher", "--nnodes", "1", LAUNCH_OPTION, str(nproc),
            "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "profiler", *profiler_argv]


def rank_argv(argv, out):
    """The `profiler run` arguments each rank gets: argv without --nproc-per-node N, writing under `out`."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == LAUNCH_OPTION:
            del argv[i:i + 2]
            break
        if arg.startswith(LAUNCH_OPTION + "="):
            del argv[i]
            break
    if not argv or argv[0] != "run":
        raise UsageError(f"{LAUNCH_OPTION} belongs to `profiler run`")
    return ["run", "--out", str(out), *argv[1:]]


def launch(nproc, argv, out):
    """Run `profiler <argv>` on `nproc` local ranks under torch.distributed.run; each rank writes
    out/rank-<RANK>/. WorkloadError when the launcher fails (a rank failed: its error is above)."""
    if rank_env() is not None:
        raise UsageError(f"{LAUNCH_OPTION} starts torchrun itself; under torchrun, leave it out")
    if Path(out).exists() and any(Path(out).iterdir()):
        raise UsageError(f"{out} is not empty; choose a new --out directory for the job's ranks")
    try:   # before any rank starts: a place no rank could write fails here, once
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create --out {out}: {e.strerror or e}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write in --out {out}: permission denied")
    command = launcher_command(nproc, rank_argv(argv, out), free_port())
    code, _ = run_child(command, capture=False)   # a SIGTERM is passed on: torchrun's agent stops the ranks
    if code != 0:
        raise WorkloadError(f"the job failed (the failed ranks and their errors are above); "
                            f"the ranks' runs are in {out}")
    return Path(out)
