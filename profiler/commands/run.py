"""`profiler run SCENARIO`: train a built-in scenario with every epoch profiled."""

from ..errors import UsageError
from ..workloads.names import SCENARIO_NAMES
from .options import TRACEMALLOC, add_scenario_options, timestamp


class RunCommand:
    name = "run"
    help = "train a built-in scenario under the profiler"

    @staticmethod
    def add_arguments(p):
        p.description = "Train a built-in scenario (mlp, mnist-cnn, cifar10-cnn) with every epoch profiled."
        add_scenario_options(p)
        p.add_argument("scenario", choices=SCENARIO_NAMES)
        p.add_argument("--out", help="run directory (default runs/SCENARIO-LAYOUT-TIMESTAMP)")
        p.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    @staticmethod
    def run(args):
        from ..workloads.run import run_scenario
        out = args.out or f"runs/{args.scenario}-{args.layout}-{timestamp()}"
        if args.labels and args.scenario != "mlp":
            raise UsageError("--labels applies to the mlp scenario only")
        if args.halt_after is not None and args.halt_after > args.epochs:
            raise UsageError(f"--halt-after {args.halt_after} is more than --epochs {args.epochs}")
        state = run_scenario(args.scenario, out, layout=args.layout, epochs=args.epochs, halt_after=args.halt_after,
                             history=args.history, gc_collect=args.gc_collect, tracemalloc=TRACEMALLOC[args.tracemalloc],
                             samples=args.samples, seed=args.seed, labels=args.labels, progress=not args.quiet)
        if not args.quiet:
            summary = f"wrote {out}: {len(state.times)} epochs{' (halted)' if state.halted else ''}"
            if state.times:
                median = sorted(state.times)[len(state.times) // 2]
                summary += f", median {median * 1e3:.2f} ms per epoch, last loss {state.metrics['loss']:.4f}"
            print(summary)
            print(f"next: profiler report {out}")
