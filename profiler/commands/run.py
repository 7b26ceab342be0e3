"""`profiler run`: a script, a module or a built-in scenario, with every epoch profiled.

    profiler run [options] SCRIPT.py [script args...]
    profiler run [options] -m MODULE [module args...]
    profiler run SCENARIO [scenario options]

Options are read only before SCRIPT (or -m MODULE): everything after it is the script's. A name
that is a built-in scenario and not an existing file is the scenario; its options follow it.
The script's exit code is ours; its own exception prints as Python prints it (its traceback, not
ours) and exits 1; Ctrl-C exits 130. Under torchrun each rank writes
OUT/rank-<RANK>/; --nproc-per-node N starts torchrun itself.
"""

import argparse
import os
import shlex
import sys
import traceback
from pathlib import Path

from ..errors import SessionActiveError, UsageError
from ..workloads.names import SCENARIO_NAMES
from ..interrupts import Terminated, interrupts_held, interrupts_held_in_compiles
from .options import TRACEMALLOC, add_scenario_options, default_dir, non_negative, positive, scenario_argv
from .output import output_dir, show


class _ScenarioParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


class RunCommand:
    name = "run"
    help = "run a script (or -m module, or a built-in scenario) under the profiler"
    takes_command = True   # a script's own `--` (the CLI cuts argv there) goes back to the script

    @staticmethod
    def add_arguments(p):
        p.description = ("Run SCRIPT.py (or -m MODULE) as `python` would, with its epochs and steps found without "
                         "edits (PyTorch DataLoader passes and optimizer steps, Keras fit, Lightning Trainer, "
                         "--epoch-fn, or fixed time windows); or train a built-in scenario ("
                         + ", ".join(SCENARIO_NAMES) + ") with its options after its name "
                         "(profiler run mlp --help lists them). Options go before SCRIPT; what follows it is the "
                         "script's.")
        p.usage = ("profiler run [options] (SCRIPT.py | -m MODULE) [args...]  |  "
                   "profiler run SCENARIO [scenario options]")
        p.add_argument("--out", help="run directory (default runs/NAME-TIMESTAMP)")
        p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
        p.add_argument("--tracemalloc", choices=tuple(TRACEMALLOC), default="off", help="deep memory capture")
        p.add_argument("-m", dest="as_module", action="store_true", help="run a module as `python -m MODULE` does")
        p.add_argument("--epoch-fn", metavar="NAME", help="each call of this function is an epoch: NAME or "
                       "Class.NAME in the script, or module:qualname")
        p.add_argument("--step-fn", metavar="NAME", help="each call of this function is a step (same forms)")
        p.add_argument("--gc-policy", default="default", metavar="POLICY",
                       help="default | freeze (gc.freeze() when training starts) | manual:N (automatic GC off from "
                            "then on, gc.collect() every N steps) | off (automatic GC off from then on)")
        p.add_argument("--window", type=float, metavar="SECONDS",
                       help="epochs as fixed time windows of this length when nothing marks them (default 1, at least 0.1)")
        p.add_argument("--nproc-per-node", type=positive, metavar="N", help="start N ranks with torchrun on this host")
        p.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT|SCENARIO ...")

    @staticmethod
    def run(args):
        if args.command:
            args.target = [*args.target, "--", *args.command] if args.target else args.command
        if not args.target:
            raise UsageError("give a script (profiler run train.py), -m MODULE, or a scenario "
                             f"({', '.join(SCENARIO_NAMES)})")
        _check_out(args.out)
        name, rest = args.target[0], args.target[1:]
        if not args.as_module and name in SCENARIO_NAMES and not os.path.exists(name):
            return _run_scenario(args, name, rest)
        return _run_script(args, name, rest)


def _next(out):
    """The lines that say which command reports the run in `out`, quoted for a shell: under torchrun,
    its job's directory (rank 0 says it, the other ranks nothing; under `--nproc-per-node`, the
    launcher once the job ends)."""
    from ..integrations.launch import LAUNCHED, rank_env
    env = rank_env()
    if env is not None:
        if env["rank"] != 0 or os.environ.get(LAUNCHED):
            return []
        out = Path(out).parent
    return [f"next: profiler report {shlex.quote(str(out))}"]


def _check_out(out):
    if out is not None and not out.strip():   # not the default name in its place
        raise UsageError("--out '': give a run directory, e.g. --out runs/mine")


def _default_out(stem):
    """runs/STEM-TIMESTAMP; under torchrun --out is required, since each rank would pick its own time."""
    from ..integrations.launch import rank_env
    if rank_env() is not None:
        raise UsageError("under torchrun, give --out DIR: every rank writes DIR/rank-<RANK>/ (a default name "
                         "holds the time, which differs between ranks)")
    return default_dir(stem)


def _launch(args, argv, stem):
    from ..integrations.launch import launch
    out = output_dir(args.out, "--out") if args.out else _default_out(stem)
    try:
        launch(args.nproc_per_node, argv, out)
    except (KeyboardInterrupt, Terminated):   # the ranks' finished epochs are on disk: say where
        from ..rundir.format import EPOCHS   # here: it imports numpy, which the CLI starts without
        if not args.quiet and any(p.stat().st_size for p in Path(out).glob(f"*/{EPOCHS}")):
            print("\n".join([f"profiler: wrote {out} (interrupted)", *_next(out)]), file=sys.stderr)
        raise
    if not args.quiet:
        print("\n".join([f"profiler: wrote {out} ({_counted(args.nproc_per_node, 'rank')})", *_next(out)]),
              file=sys.stderr)


def _run_scenario(args, scenario, rest):
    from ..integrations.launch import rank_out_dir
    given = [flag for flag, value in (("--epoch-fn", args.epoch_fn), ("--step-fn", args.step_fn),
                                      ("--window", args.window)) if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} to scripts, not to the "
                         f"built-in scenario {scenario}")
    parser = _ScenarioParser(prog=f"profiler run {scenario}")
    parser.add_argument("--out", help="run directory (default runs/SCENARIO-LAYOUT-TIMESTAMP)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.add_argument("--nproc-per-node", type=positive, metavar="N", help="train data-parallel on N ranks")
    parser.add_argument("--straggler-rank", type=non_negative, metavar="R",
                        help="data-parallel runs: rank R plants GC stalls (docs/multi-rank.md)")
    add_scenario_options(parser)
    args.straggler_rank = None
    parser.parse_args(rest, namespace=args)   # options given before the name stay unless repeated
    _check_out(args.out)
    if args.labels and scenario != "mlp":
        raise UsageError("--labels applies to the mlp scenario only")
    if args.halt_after is not None and args.halt_after > args.epochs:
        raise UsageError(f"--halt-after {args.halt_after} is more than --epochs {args.epochs}")
    if args.nproc_per_node:
        if args.straggler_rank is not None and args.straggler_rank >= args.nproc_per_node:
            raise UsageError(f"--straggler-rank {args.straggler_rank} is not a rank of --nproc-per-node "
                             f"{args.nproc_per_node} (ranks 0-{args.nproc_per_node - 1})")
        argv = scenario_argv(args, scenario, None, args.epochs) + (
            ["--straggler-rank", str(args.straggler_rank)] if args.straggler_rank is not None else [])
        return _launch(args, argv, f"{scenario}-{args.layout}")
    with interrupts_held():   # the engine imports numba
        from ..workloads.run import run_scenario
    out = str(rank_out_dir(args.out or _default_out(f"{scenario}-{args.layout}")))
    try:
        with interrupts_held_in_compiles():   # the kernels compile on their first call
            state = run_scenario(scenario, out, layout=args.layout, epochs=args.epochs, halt_after=args.halt_after,
                                 history=args.history, gc_collect=args.gc_collect,
                                 tracemalloc=TRACEMALLOC[args.tracemalloc], samples=args.samples, seed=args.seed,
                                 labels=args.labels, progress=not args.quiet, gc_policy=args.gc_policy,
                                 straggler_rank=args.straggler_rank)
    except KeyboardInterrupt:   # the epochs that finished are on disk: say where
        from ..rundir.format import EPOCHS
        lines = Path(out, EPOCHS)
        if not args.quiet and lines.exists() and lines.stat().st_size:
            print("\n".join([f"profiler: wrote {out} (interrupted)", *_next(out)]), file=sys.stderr)
        raise
    if not args.quiet:
        summary = f"wrote {out}: {_counted(len(state.times), 'epoch')}{' (halted)' if state.halted else ''}"
        if state.times:
            median = sorted(state.times)[len(state.times) // 2]
            summary += f", median {median * 1e3:.2f} ms per epoch, last loss {state.metrics['loss']:.4f}"
        show(summary, *_next(out))


def _script_argv(args, target, rest):
    """`profiler run` arguments that repeat this run for each rank (without --out)."""
    argv = ["run", "--tracemalloc", args.tracemalloc, "--gc-policy", args.gc_policy]
    for flag, value in (("--epoch-fn", args.epoch_fn), ("--step-fn", args.step_fn), ("--window", args.window)):
        if value is not None:
            argv += [flag, str(value)]
    if args.quiet:
        argv.append("--quiet")
    return argv + (["-m"] if args.as_module else []) + [target, *rest]


def _run_script(args, target, rest):
    from ..integrations.launch import rank_out_dir
    from ..integrations.marks import succeeded
    from ..integrations.script import run_script
    from ..integrations.windows import check_seconds
    if not args.as_module and not os.path.isfile(target):
        python = Path(target).name.startswith("python") and rest
        raise UsageError(f"{target!r} is neither a script file nor a scenario (invalid choice: give SCRIPT.py, "
                         f"-m MODULE or one of {', '.join(SCENARIO_NAMES)})"
                         + (f"; profiler runs the script itself: profiler run {' '.join(rest)}" if python else ""))
    stem = target.rsplit(".", 1)[-1] if args.as_module else Path(target).stem
    if args.window is not None:
        check_seconds(args.window)   # before the ranks start
    if args.nproc_per_node:
        return _launch(args, _script_argv(args, target, rest), stem)
    out = str(rank_out_dir(args.out or _default_out(stem)))
    try:
        result = run_script(target, rest, out=out, module=args.as_module, tracemalloc=TRACEMALLOC[args.tracemalloc],
                            epoch_fn=args.epoch_fn, step_fn=args.step_fn, gc_policy=args.gc_policy,
                            window_s=1.0 if args.window is None else args.window)
    except SyntaxError as e:   # the script does not compile: Python's own message, nothing run or written
        traceback.print_exception(type(e), e, None)
        raise SystemExit(1) from None
    raised = result.raised
    if isinstance(raised, SessionActiveError):
        raise UsageError(f"{target} opens its own profiler Session, which records the run itself: run it with "
                         f"python, not profiler run ({out} holds only the failed attempt)") from None
    ends = (SystemExit, KeyboardInterrupt)   # raised again after the summary: exit codes 0-255 and 130
    # python prints the traceback of the script's own exception, and of a Ctrl-C that landed in it
    if raised is not None and not isinstance(raised, SystemExit) and (
            not isinstance(raised, KeyboardInterrupt) or _script_frames(raised, result.code) is not None):
        _print_script_traceback(raised, result.code)
    if result.forked:   # a child the script forked and that returned: it exits as the script would
        raise raised if isinstance(raised, ends) else SystemExit(0 if raised is None else 1)
    # a name that names no function of the script is the command's error once the script succeeded (a
    # typo marks nothing, and exit 0 would hide it); beside the script's own failure, a note
    typo = succeeded(raised) and result.misnamed
    for note in ([] if typo else result.misnamed) + result.notes + _misplaced_note(raised, target, rest, args.as_module):
        print(f"profiler: {note}", file=sys.stderr)
    if not args.quiet:
        source = f" from {result.epochs_from}" if result.epochs_from else ""
        if result.epochs_from != "windows" and result.windows:   # set-up before the framework's first epoch
            source += (f" ({result.windows} of them {'a time window' if result.windows == 1 else 'time windows'} "
                       f"before its first: set-up)")
        written = f"{_counted(result.epochs, 'epoch')}{source}, {_counted(result.steps, 'step')}"
        if result.unfinished:   # the epoch it stopped in, or, with none finished, its one epoch
            index, steps = result.unfinished
            written = (f"{written}, and epoch {index} unfinished ({_counted(steps, 'step')})" if result.epochs
                       else f"epoch {index} unfinished{source} ({_counted(steps, 'step')})")
        print("\n".join([f"profiler: wrote {out}: {written}",
                         *(_next(out) if result.epochs or result.unfinished else [])]), file=sys.stderr)
    if typo:
        raise UsageError("; ".join(result.misnamed))
    if isinstance(raised, ends):
        raise raised
    if raised is not None:
        raise SystemExit(1)


def _misplaced_note(raised, target, rest, module=False):
    """[a line] when the script's argument parser refused its arguments (exit code 2) and some of them
    are profiler run's options, which go before the script; else []. Not those the script names
    itself (its own --out), nor any after its `--`."""
    if not (isinstance(raised, SystemExit) and raised.code == 2):
        return []
    parser = argparse.ArgumentParser(add_help=False)
    RunCommand.add_arguments(parser)
    valued = {s: action.nargs != 0 for action in parser._actions for s in action.option_strings if s.startswith("--")}
    try:
        source = "" if module else Path(target).read_text(errors="replace")
    except OSError:
        source = ""
    valued = {name: takes for name, takes in valued.items() if f'"{name}"' not in source and f"'{name}'" not in source}
    moved, left, i = [], [], 0
    while i < len(rest) and rest[i] != "--":
        name = rest[i].split("=", 1)[0]
        takes = valued.get(name, False) and "=" not in rest[i] and i + 1 < len(rest)
        (moved if name in valued else left).extend(rest[i:i + 1 + takes])
        i += 1 + takes
    if not moved:
        return []
    names = [a.split("=", 1)[0] for a in moved if a.split("=", 1)[0] in valued]
    named = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    command = [*moved, *(["-m"] if module else []), target, *left, *rest[i:]]
    return [f"{named} came after the script, so the script got {'it' if len(names) == 1 else 'them'}: profiler "
            f"run's options go before the script: profiler run {shlex.join(command)}"]


def _counted(n, unit):   # as report.text.counted, which this process does not import (analysis with it)
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def _script_frames(error, code):
    """The traceback of `error` from the script's first frame on, or None if it never reached it."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    return tb


def _print_script_traceback(error, code):
    """The traceback as `python SCRIPT.py` prints it: from the script's first frame on, without the
    profiler's own frames."""
    tb = _script_frames(error, code)
    shown = traceback.TracebackException(type(error), error, tb if tb is not None else error.__traceback__)
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # the wrappers --epoch-fn adds
    shown.stack = traceback.StackSummary.from_list([f for f in shown.stack if not f.filename.startswith(ours)])
    print("".join(shown.format()), end="", file=sys.stderr)
