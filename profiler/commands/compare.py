"""`profiler compare RUN_A RUN_B`: two runs op by op, with what-if projections."""

from .output import output_file, show, write_html


class CompareCommand:
    name = "compare"
    help = "compare two runs op by op, with what-if projections"

    @staticmethod
    def add_arguments(p):
        p.description = ("Two runs side by side: epoch time, GC pause and the program's gc.collect() calls, then each op "
                         "(matched by name and tags) with its ratio and what-if: A's epoch if the op ran at B's speed. "
                         "Two multi-rank directories compare as jobs: step time, time lost waiting, straggler.")
        p.add_argument("run_a")
        p.add_argument("run_b")
        p.add_argument("--json", action="store_true", help="print the comparison as JSON")
        p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML page")

    @staticmethod
    def run(args):
        from ..analysis import compare
        from ..analysis.ranks import RankComparison
        from ..report import json_out, rank_text, text
        html_path = None if args.html is None else output_file(args.html, "--html", "compare.html",
                                                               reads=[args.run_a, args.run_b])
        comparison = compare(args.run_a, args.run_b)
        jobs = isinstance(comparison, RankComparison)   # two multi-rank runs
        show(json_out.render(comparison) if args.json else text.comparison(comparison))
        if html_path and jobs:
            write_html(html_path, title="profiler compare", sections=[
                (rank_text.comparison_verdict(comparison), f"<pre>{rank_text.comparison(comparison)}</pre>")])
        elif html_path:
            write_html(html_path, title="profiler compare", comparisons=[comparison])
