"""`profiler report RUN_DIR`: the diagnosis as text, JSON or HTML."""

from .output import output_file, show, write_html


class ReportCommand:
    name = "report"
    help = "diagnose a run directory"

    @staticmethod
    def add_arguments(p):
        p.description = ("Find what makes a run slow or slower (GC steady share, GC spikes, growing pauses, GC "
                         "between epochs, memory growth, compute growth by op, steps waiting for their DataLoader, "
                         "worker memory; on a multi-rank directory the straggler rank, the stalls and a rank slow to "
                         "load), ranked by the time each costs.")
        p.add_argument("run_dir")
        p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
        p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")

    @staticmethod
    def run(args):
        from ..analysis import analyze, series, step_series
        from ..report import json_out, text
        from ..rundir import read_run
        from ..rundir.ranks import is_multi_rank, rank_dirs
        html_path = None if args.html is None else output_file(args.html, "--html", "report.html", reads=[args.run_dir])
        run = None if is_multi_rank(args.run_dir) else read_run(args.run_dir)   # read once: diagnosis and page
        diagnosis = analyze(args.run_dir if run is None else run)
        show(json_out.render(diagnosis) if args.json else text.diagnosis(diagnosis))
        if html_path:
            sections = []
            if diagnosis.rank_analysis is not None:   # a multi-rank run: the ranks, then the diagnosed rank's run
                from ..analysis.ranks import rank_heatmap
                from ..report.html import ranks_section
                ra = diagnosis.rank_analysis
                run = read_run(next(r.path for r in rank_dirs(args.run_dir) if r.rank == ra.diagnosed))
                sections = [(None, ranks_section(ra, rank_heatmap(args.run_dir)))]
            write_html(html_path, title=f"profiler report: {args.run_dir}", sections=sections,
                       diagnoses=[(diagnosis, series(run), step_series(run))], meta=diagnosis.meta)
