"""`profiler timeline RUN_DIR`: the run as Chrome trace event JSON (open it in ui.perfetto.dev)."""

from .output import output_file, show


class TimelineCommand:
    name = "timeline"
    help = "write a run's epochs, steps, ops and GC pauses as Chrome trace JSON (Perfetto UI)"

    @staticmethod
    def add_arguments(p):
        p.description = ("Epochs, steps, per-epoch op totals and GC pauses (one track per generation) on one "
                         "time axis, as Chrome trace event JSON: open it in https://ui.perfetto.dev or chrome://tracing.")
        p.add_argument("run_dir")
        p.add_argument("--out", default="trace.json", help="trace file to write (default trace.json)")

    @staticmethod
    def run(args):
        from ..report import trace
        count = trace.write_run(args.run_dir, output_file(args.out, "--out", "trace.json", reads=[args.run_dir]))
        show(f"wrote {args.out} ({count:,} events): open it in https://ui.perfetto.dev")
