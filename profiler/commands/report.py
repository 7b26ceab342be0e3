"""`profiler report RUN_DIR`: the diagnosis as text, JSON or HTML."""

from .html_out import write_html


class ReportCommand:
    name = "report"
    help = "diagnose a run directory"

    @staticmethod
    def add_arguments(p):
        p.description = ("Find what makes a run slow or slower (GC steady share, GC spikes, growing pauses, "
                         "memory growth, compute growth by op, worker memory), ranked by the time each costs.")
        p.add_argument("run_dir")
        p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
        p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")

    @staticmethod
    def run(args):
        from ..analysis import analyze, series, step_series
        from ..report import json_out, text
        diagnosis = analyze(args.run_dir)
        print(json_out.render(diagnosis) if args.json else text.diagnosis(diagnosis))
        if args.html:
            from ..rundir import read_run
            write_html(args.html, title=f"profiler report: {args.run_dir}",
                       diagnoses=[(diagnosis, series(args.run_dir), step_series(read_run(args.run_dir)))],
                       meta=diagnosis.meta)
