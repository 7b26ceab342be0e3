"""The `profiler` command: run, report, compare, scaling, flamegraph, demo.

Usage errors and unreadable inputs exit 2 with one line on stderr; a failed workload exits 1.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = """examples:
  profiler run mlp --epochs 1000 --halt-after 100 --history preallocated --gc-collect epoch
  profiler report runs/mlp-NHWC-20261130-101500
  profiler report RUN --json | jq .primary_cause
  profiler compare runs/cnn-nchw runs/cnn-nhwc --html layouts.html
  profiler scaling mlp --max-epochs 100,1000,10000 --halt-after 100 --history preallocated --gc-collect epoch
  profiler flamegraph mnist-cnn --layout NCHW --epochs 2 --out nchw.svg
  profiler flamegraph --out mine.svg -- python train.py
  profiler flamegraph --diff nchw.folded nhwc.folded --out diff.svg
  profiler demo"""


class UsageError(Exception):
    """Bad arguments or unreadable inputs: exit 2 with one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _int_list(text):
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 100,1000,10000, got {text!r}") from None
    if len(values) < 2 or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected at least two positive integers, got {text!r}")
    return values


def _add_run_options(p, epochs_flag=True):
    from .scenarios import SCENARIOS
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NHWC", help="data layout (default NHWC)")
    if epochs_flag:
        p.add_argument("--epochs", type=_positive, default=10, help="max_epochs of the loop (default 10)")
    p.add_argument("--halt-after", type=_positive, help="a handler halts the loop after K epochs (the seed's early exit)")
    p.add_argument("--history", choices=("append", "preallocated"), default="append",
                   help="metrics history: append (default) or preallocated (reproduces seed 1)")
    p.add_argument("--gc-collect", choices=("never", "iteration", "epoch"), default="never",
                   help="call gc.collect() this often (default never)")
    p.add_argument("--tracemalloc", choices=("off", "on", "auto"), default="off", help="deep memory capture")
    p.add_argument("--samples", type=_positive, help="data set size (default: the scenario's)")
    p.add_argument("--labels", choices=("random", "learnable"), help="mlp only: the seed's random labels or learnable ones")
    p.add_argument("--seed", type=int, default=0)
    return SCENARIOS


def _run_argv(args, scenario, out, epochs):
    """The `profiler run` argument list that repeats these run options (for subprocesses)."""
    argv = ["run", scenario, "--out", str(out), "--epochs", str(epochs), "--layout", args.layout,
            "--history", args.history, "--gc-collect", args.gc_collect, "--tracemalloc", args.tracemalloc,
            "--seed", str(args.seed), "--quiet"]
    for flag, value in (("--halt-after", args.halt_after), ("--samples", args.samples), ("--labels", args.labels)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def build_parser():
    parser = _Parser(prog="profiler", description="Why is my training epoch slow, and why does it get slower?",
                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="train a built-in scenario under the profiler",
                       description="Train a built-in scenario (mlp, mnist-cnn, cifar10-cnn) with every epoch profiled.")
    scenarios = _add_run_options(p)
    p.add_argument("scenario", choices=sorted(scenarios))
    p.add_argument("--out", help="run directory (default runs/SCENARIO-LAYOUT-TIMESTAMP)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    p = sub.add_parser("report", help="diagnose a run directory",
                       description="Attribute a run's slowdown to GC, allocation or compute.")
    p.add_argument("run_dir")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")

    p = sub.add_parser("compare", help="compare two runs op by op, with what-if projections")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--json", action="store_true")
    p.add_argument("--html", metavar="PATH")

    p = sub.add_parser("scaling", help="does epoch time depend on max_epochs? (seed 1's benchmark)",
                       description="Run SCENARIO once per max_epochs value, each halted after the same epochs, "
                                   "in fresh processes, and compare epoch times.")
    _add_run_options(p, epochs_flag=False)
    p.add_argument("scenario", choices=sorted(scenarios))
    p.add_argument("--max-epochs", type=_int_list, required=True, help="e.g. 100,1000,10000")
    p.add_argument("--out", help="directory for the runs (default runs/scaling-SCENARIO-TIMESTAMP)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--html", metavar="PATH")

    p = sub.add_parser("flamegraph", help="py-spy flamegraph of a scenario or any command, or a diff of two",
                       description="Record with py-spy: SCENARIO [run options], or -- COMMAND ...; "
                                   "or --diff A.folded B.folded. Writes SVG plus the raw collapsed stacks (.folded).")
    _add_run_options(p)
    p.add_argument("scenario", nargs="?", choices=sorted(scenarios))
    p.add_argument("--out", default="flamegraph.svg", help="SVG path (default flamegraph.svg)")
    p.add_argument("--diff", nargs=2, metavar=("A", "B"), help="two .folded files (or their SVGs) to diff")
    p.add_argument("--rate", type=_positive, default=100, help="samples per second (default 100)")

    p = sub.add_parser("demo", help="reproduce both seed reports at small scale and write an HTML report")
    p.add_argument("--out", default="runs/demo", help="directory for the demo's runs and report")
    p.add_argument("--quick", action="store_true", help="smaller still (for tests)")
    return parser


def _timestamp():
    return time.strftime("%Y%m%d-%H%M%S")


def _read(fn, *args):
    """Call an analysis function, turning unreadable run directories into usage errors."""
    from .rundir import RunDirError
    try:
        return fn(*args)
    except RunDirError as e:
        raise UsageError(str(e)) from None


def cmd_run(args):
    from .workload import run_scenario
    out = args.out or f"runs/{args.scenario}-{args.layout}-{_timestamp()}"
    if args.labels and args.scenario != "mlp":
        raise UsageError("--labels applies to the mlp scenario only")
    if args.halt_after is not None and args.halt_after > args.epochs:
        raise UsageError(f"--halt-after {args.halt_after} is more than --epochs {args.epochs}")
    tracemalloc = {"off": False, "on": True, "auto": "auto"}[args.tracemalloc]
    state = run_scenario(args.scenario, out, layout=args.layout, epochs=args.epochs, halt_after=args.halt_after,
                         history=args.history, gc_collect=args.gc_collect, tracemalloc=tracemalloc,
                         samples=args.samples, seed=args.seed, labels=args.labels, progress=not args.quiet)
    if not args.quiet:
        median = sorted(state.times)[len(state.times) // 2] if state.times else float("nan")
        print(f"wrote {out}: {len(state.times)} epochs{' (halted)' if state.halted else ''}, "
              f"median {median * 1e3:.2f} ms per epoch, last loss {state.metrics.get('loss', float('nan')):.4f}")
        print(f"next: profiler report {out}")


def _write_html(path, **sections):
    from .report import html
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(html.render(**sections), encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def cmd_report(args):
    from .analysis import analyze, series
    from .report import text
    diagnosis = _read(analyze, args.run_dir)
    print(json.dumps(diagnosis.to_dict(), indent=2) if args.json else text.diagnosis(diagnosis))
    if args.html:
        _write_html(args.html, title=f"profiler report: {args.run_dir}",
                    diagnoses=[(diagnosis, series(args.run_dir))], meta=diagnosis.meta)


def cmd_compare(args):
    from .analysis import compare
    from .report import text
    comparison = _read(compare, args.run_a, args.run_b)
    print(json.dumps(comparison.to_dict(), indent=2) if args.json else text.comparison(comparison))
    if args.html:
        _write_html(args.html, title="profiler compare", comparisons=[comparison])


def run_many(jobs, desc):
    """Run `profiler run` argument lists in fresh processes (GC state must not carry over)."""
    from tqdm import tqdm
    for argv in tqdm(jobs, desc=desc, unit="run", leave=False, disable=not sys.stderr.isatty()):
        proc = subprocess.run([sys.executable, "-m", "profiler", *argv], stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            raise RuntimeError(f"`profiler {' '.join(argv)}` failed: {lines[-1] if lines else proc.returncode}")


def cmd_scaling(args):
    from .analysis import scaling
    from .report import figures, text
    out = Path(args.out or f"runs/scaling-{args.scenario}-{_timestamp()}")
    if args.halt_after is not None and args.halt_after > args.max_epochs[0]:
        raise UsageError(f"--halt-after {args.halt_after} is more than the smallest --max-epochs {args.max_epochs[0]}")
    runs = {n: out / f"max-{n}" for n in args.max_epochs}
    run_many([_run_argv(args, args.scenario, d, n) for n, d in runs.items()], f"scaling {args.scenario}")
    result = scaling(runs)
    figures.save(figures.scaling(result), out / "scaling.png")
    print(json.dumps(result.to_dict(), indent=2) if args.json else text.scaling(result))
    if args.html:
        _write_html(args.html, title=f"profiler scaling: {args.scenario}", scalings=[result])


def _folded_for(path):
    path = Path(path)
    folded = path.with_suffix(".folded") if path.suffix == ".svg" else path
    if not folded.exists():
        raise UsageError(f"{folded} does not exist (record it first with profiler flamegraph)")
    return folded


def cmd_flamegraph(args, command):
    from . import flamegraph
    out = Path(args.out)
    if args.diff:
        if command or args.scenario:
            raise UsageError("--diff takes two recordings; give no scenario or command with it")
        flamegraph.diff(_folded_for(args.diff[0]), _folded_for(args.diff[1]), out)
        print(f"wrote {out}")
        return
    if bool(command) == bool(args.scenario):
        raise UsageError("give either a SCENARIO or -- COMMAND ... to record")
    if not command:
        tmp = tempfile.mkdtemp(prefix="profiler-flame-")
        command = [sys.executable, "-m", "profiler", *_run_argv(args, args.scenario, tmp, args.epochs)]
    folded = flamegraph.record(command, out.with_suffix(".folded"), rate=args.rate)
    title = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(command))
    flamegraph.write_svg(flamegraph.read_folded(folded), out, title=title)
    print(f"wrote {out} (raw stacks: {folded})")


def cmd_demo(args):
    from .demo import demo
    demo(Path(args.out), quick=args.quick)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    try:
        args = build_parser().parse_args(argv)
        if command and args.command != "flamegraph":
            raise UsageError("only `profiler flamegraph` takes -- COMMAND")
        if args.command == "flamegraph":
            cmd_flamegraph(args, command)
        else:
            {"run": cmd_run, "report": cmd_report, "compare": cmd_compare, "scaling": cmd_scaling,
             "demo": cmd_demo}[args.command](args)
    except UsageError as e:
        print(f"profiler: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("profiler: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a failed workload or write: one line, not a traceback
        if os.environ.get("PROFILER_DEBUG"):
            raise
        print(f"profiler: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0
