"""`profiler report RUN_DIR`: the diagnosis as text, JSON or HTML."""

from .output import output_file, show, write_html


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
        html_path = output_file(args.html, "--html", "report.html") if args.html is not None else None
        diagnosis = analyze(args.run_dir)
        show(json_out.render(diagnosis) if args.json else text.diagnosis(diagnosis))
        if html_path:
            from ..rundir import read_run
            from ..rundir.ranks import rank_dirs
            run_dir, sections = args.run_dir, []
            if diagnosis.rank_analysis is not None:   # a multi-rank run: the ranks, then the diagnosed rank's run
                from ..analysis.ranks import rank_heatmap
                from ..report.html import ranks_section
                ra = diagnosis.rank_analysis
                run_dir = str(next(r.path for r in rank_dirs(args.run_dir) if r.rank == ra.diagnosed))
                sections = [(None, ranks_section(ra, rank_heatmap(args.run_dir)))]
            write_html(html_path, title=f"profiler report: {args.run_dir}", sections=sections,
                       diagnoses=[(diagnosis, series(run_dir), step_series(read_run(run_dir)))],
                       meta=diagnosis.meta)
