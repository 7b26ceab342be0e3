"""`profiler timeline RUN_DIR`: the run as Chrome trace event JSON (open it in ui.perfetto.dev)."""

from .options import step_range
from .output import output_file, show


class TimelineCommand:
    name = "timeline"
    help = "write a run's epochs, steps, ops and GC pauses as Chrome trace JSON (Perfetto UI)"

    @staticmethod
    def add_arguments(p):
        p.description = ("Epochs, steps, per-epoch op totals, GC pauses (one track per generation) and RSS on one "
                         "time axis, as Chrome trace event JSON: open it in https://ui.perfetto.dev or chrome://tracing.")
        p.add_argument("run_dir")
        p.add_argument("--out", default="trace.json", help="trace file to write (default trace.json)")
        p.add_argument("--steps", type=step_range, metavar="A:B", default=None,
                       help="the steps to draw, by index (default the first 1,000,000: more make a trace too large "
                            "for Perfetto UI; epochs, ops and GC pauses are always whole)")

    @staticmethod
    def run(args):
        from ..report import trace
        steps = args.steps or slice(0, trace.MAX_STEPS)
        count, recorded = trace.write_run(args.run_dir, output_file(args.out, "--out", "trace.json",
                                                                    reads=[args.run_dir]), steps)
        first, last = steps.indices(recorded)[:2]
        shown = "" if (first, last) == (0, recorded) else (
            f"; steps {first:,} to {max(last - 1, first):,} of {recorded:,} (--steps A:B for others)"
            if last > first else f"; none of the {recorded:,} steps is in --steps")
        show(f"wrote {args.out} ({count:,} events{shown}): open it in https://ui.perfetto.dev")
