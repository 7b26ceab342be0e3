"""Argument types and the scenario run options shared by run, scaling and flamegraph."""

import argparse
import contextlib
import itertools
import os
import time

from ..errors import UsageError



def _integer(minimum, expected):
    """An argparse type: an int of at least `minimum`, else an error that says what was expected."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


positive = _integer(1, "a positive integer")
non_negative = _integer(0, "a non-negative integer")


def int_list(text):
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 100,1000,10000, got {text!r}") from None
    if len(values) < 2 or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected at least two different positive integers, got {text!r}")
    return values


def step_range(text):
    """'A:B' (either may be left out) as a slice of step indices."""
    first, colon, last = text.partition(":")
    try:
        bounds = [int(v) if v.strip() else None for v in (first, last)]
    except ValueError:
        bounds = None
    if (not colon or bounds is None or any(b is not None and b < 0 for b in bounds)
            or None not in bounds and bounds[1] <= bounds[0]):
        raise argparse.ArgumentTypeError(f"expected a range of step indices A:B with B above A (e.g. 0:100000, or "
                                         f"500000:), got {text!r}")
    return slice(*bounds)


TRACEMALLOC = {"off": False, "on": True, "auto": "auto"}


def check_gc_policy(text):
    """UsageError for a bad --gc-policy before any run starts: scaling's and flamegraph's runs are
    child processes, which would each refuse it."""
    from ..integrations.gc_policy import GcPolicy
    GcPolicy.parse(text)


def add_scenario_options(p, epochs_flag=True):
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NHWC", help="data layout (default NHWC)")
    if epochs_flag:
        p.add_argument("--epochs", type=positive, default=10, help="max_epochs of the loop (default 10)")
    p.add_argument("--halt-after", type=positive, help="a handler halts the loop after K epochs (the Axon report's early exit)")
    p.add_argument("--history", choices=("append", "preallocated"), default="append",
                   help="metrics history: append (default) or preallocated (reproduces the Axon report)")
    p.add_argument("--gc-collect", choices=("never", "iteration", "epoch"), default="never",
                   help="call gc.collect() this often (default never)")
    p.add_argument("--tracemalloc", choices=tuple(TRACEMALLOC), default="off", help="deep memory capture")
    p.add_argument("--gc-policy", default="default", metavar="POLICY",
                   help="as for scripts: default | freeze | manual:N | off")
    p.add_argument("--samples", type=positive, help="data set size (default: the scenario's)")
    p.add_argument("--labels", choices=("random", "learnable"), help="mlp only: the report's random labels or learnable ones")
    p.add_argument("--seed", type=non_negative, default=0, help="random seed for data and weights (default 0)")


def scenario_argv(args, scenario, out, epochs):
    """The `profiler run` argument list that repeats these run options (for subprocesses); without
    --out when `out` is None (a launcher gives each rank its own)."""
    argv = ["run", scenario] + (["--out", str(out)] if out is not None else []) + [
            "--epochs", str(epochs), "--layout", args.layout, "--history", args.history, "--gc-collect",
            args.gc_collect, "--tracemalloc", args.tracemalloc, "--gc-policy", args.gc_policy, "--seed", str(args.seed),
            "--quiet"]
    for flag, value in (("--halt-after", args.halt_after), ("--samples", args.samples), ("--labels", args.labels)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


_RESERVED = []   # (pid, absolute path) of the default run directories this command created


def default_dir(stem):
    """runs/STEM-TIMESTAMP, or with -2, -3, ... when that exists (runs started in one second, as a
    sweep started with `&` does), created here so that no other run takes it (remove_unused)."""
    base = f"runs/{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        if not os.path.isdir("runs"):
            with contextlib.suppress(FileExistsError):   # another command may make it meanwhile
                os.mkdir("runs")
                _RESERVED.append((os.getpid(), os.path.abspath("runs")))   # removed after the run's, if empty
        for n in itertools.count(1):
            path = base if n == 1 else f"{base}-{n}"
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            _RESERVED.append((os.getpid(), os.path.abspath(path)))   # the script may change directory
            return path
    except OSError as e:
        raise UsageError(f"cannot create a run directory under runs/ ({e}); give --out DIR") from None


def remove_unused():
    """Remove the default run directories that stayed empty (the command failed before its run
    wrote anything), as a run given --out leaves none; in the process that made them only (not in
    a child the script forked)."""
    while _RESERVED:
        pid, path = _RESERVED.pop()
        if pid == os.getpid():
            with contextlib.suppress(OSError):   # not empty: the run's
                os.rmdir(path)
