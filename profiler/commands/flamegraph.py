"""`profiler flamegraph`: a py-spy flamegraph of a scenario or any command, or a diff of two."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import FlamegraphError, UsageError, WorkloadError
from ..workloads.names import SCENARIO_NAMES
from .options import add_scenario_options, check_gc_policy, positive, scenario_argv
from .output import output_file, show


def _folded_for(path):
    path = Path(path)
    folded = path.with_suffix(".folded") if path.suffix == ".svg" else path
    if not folded.exists():
        raise UsageError(f"{folded} does not exist (record it first with profiler flamegraph)")
    return folded


def _record_from_first_epoch(pyspy, command, folded, rate, run_dir, epoch_fn=None):
    """Run `python [-m] SCRIPT args` as `python -m profiler run [--epoch-fn NAME] ... SCRIPT args`,
    which writes a byte to a pipe when the first epoch begins (integrations/detect.py); py-spy
    attaches then."""
    from ..integrations.detect import EPOCH_SIGNAL_FD
    if len(command) < 2 or not Path(command[0]).name.startswith("python") or command[1].startswith("-") and \
            command[1] != "-m":
        raise UsageError("--from-first-epoch records a Python script: -- python train.py [args] "
                         "(or -- python -m MODULE [args])")
    if command[1] != "-m" and not os.path.isfile(command[1]):
        raise UsageError(f"{command[1]!r} is not a script file: --from-first-epoch records -- python SCRIPT.py [args]")
    _imports_profiler(command)
    marks = ["--epoch-fn", epoch_fn] if epoch_fn is not None else []
    command = [command[0], "-m", "profiler", "run", "--quiet", *marks, "--out", run_dir, *command[1:]]
    read_end, write_end = os.pipe()
    open_fds = {read_end, write_end}

    def close(fd):
        if fd in open_fds:
            open_fds.discard(fd)
            os.close(fd)

    def first_epoch(process):
        close(write_end)   # the child holds its own copy: EOF here means it ended without an epoch
        return os.read(read_end, 1) == b"1"

    try:
        return pyspy.record(command, folded, rate=rate, env={**os.environ, EPOCH_SIGNAL_FD: str(write_end)},
                            pass_fds=(write_end,), wait=first_epoch)
    finally:
        close(read_end)
        close(write_end)


def _imports_profiler(command):
    """UsageError unless command[0], the Python that will run `-m profiler run`, can import this
    profiler: `python` on PATH may be another interpreter than the one profiler is installed in."""
    found = shutil.which(command[0])
    # abspath, not realpath: a venv's python is a link to its base interpreter, which lacks the venv
    if found and os.path.abspath(found) == os.path.abspath(sys.executable):
        return
    check = subprocess.run([command[0], "-c", "import profiler.cli"], capture_output=True, timeout=60)
    if check.returncode != 0:
        raise UsageError(f"{command[0]} ({found or 'not found'}) cannot import profiler, which --from-first-epoch "
                         f"runs the script under: give the Python profiler is installed in, "
                         f"-- {sys.executable} {' '.join(command[1:])}")


class FlamegraphCommand:
    name = "flamegraph"
    help = "py-spy flamegraph of a scenario or any command, or a diff of two"
    takes_command = True   # everything after `--` is the command to record

    @staticmethod
    def add_arguments(p):
        p.description = ("Record with py-spy: SCENARIO [scenario options], or -- COMMAND ...; "
                         "or --diff A.folded B.folded. Writes SVG plus the raw collapsed stacks (.folded).")
        add_scenario_options(p)
        p.add_argument("scenario", nargs="?", choices=SCENARIO_NAMES)
        p.add_argument("--out", default="flamegraph.svg", help="SVG path (default flamegraph.svg)")
        p.add_argument("--diff", nargs=2, metavar=("A", "B"), help="two .folded files (or their SVGs) to diff")
        p.add_argument("--rate", type=positive, default=100, help="samples per second (default 100)")
        p.add_argument("--from-first-epoch", action="store_true",
                       help="with -- python SCRIPT.py ... (or -m MODULE): run it under `profiler run` and record "
                            "from its first epoch on, leaving imports and set-up out")
        p.add_argument("--epoch-fn", metavar="NAME",
                       help="with --from-first-epoch: the script's function whose calls are its epochs, as for "
                            "profiler run (a plain loop that no framework marks)")

    @staticmethod
    def run(args):
        from ..capture import pyspy
        from ..report import flamegraph
        out, command = output_file(args.out, "--out", "flamegraph.svg"), args.command
        if args.diff:
            if command or args.scenario:
                raise UsageError("--diff takes two recordings; give no scenario or command with it")
            try:
                flamegraph.diff(_folded_for(args.diff[0]), _folded_for(args.diff[1]), out)
            except FlamegraphError as e:   # the two files are the user's input
                raise UsageError(str(e)) from None
            show(f"wrote {out}")
            return
        if bool(command) == bool(args.scenario):
            raise UsageError("give either a SCENARIO or -- COMMAND ... to record")
        if args.epoch_fn is not None and not args.from_first_epoch:
            raise UsageError("--epoch-fn marks the epochs --from-first-epoch waits for: give both, or neither")
        if not command and args.from_first_epoch:
            raise UsageError("--from-first-epoch records a script: -- python train.py ... (a scenario's "
                             "flamegraph is its training already)")
        if not command:
            check_gc_policy(args.gc_policy)
        folded = out.with_suffix(".folded")
        if folded.is_dir():
            raise UsageError(f"{folded} (the raw stacks, written beside --out {out}) is a directory: remove it or "
                             f"choose another --out")
        with tempfile.TemporaryDirectory(prefix="profiler-flame-") as run_dir:   # the recorded run's own records
            if not command:
                command = [sys.executable, "-m", "profiler", *scenario_argv(args, args.scenario, run_dir, args.epochs)]
            if args.from_first_epoch:
                code = _record_from_first_epoch(pyspy, command, folded, args.rate, run_dir + "/run", args.epoch_fn)
            else:
                code = pyspy.record(command, folded, rate=args.rate)
        title = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(command))
        flamegraph.write_svg(flamegraph.read_folded(folded), out, title=title)
        show(f"wrote {out} (raw stacks: {folded})")
        if code != 0:
            raise WorkloadError(f"the recorded command exited with code {code}; the flamegraph shows what ran")
