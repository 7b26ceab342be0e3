"""`profiler compare RUN_A RUN_B`: two runs op by op, with what-if projections."""

from .html_out import write_html


class CompareCommand:
    name = "compare"
    help = "compare two runs op by op, with what-if projections"

    @staticmethod
    def add_arguments(p):
        p.add_argument("run_a")
        p.add_argument("run_b")
        p.add_argument("--json", action="store_true")
        p.add_argument("--html", metavar="PATH")

    @staticmethod
    def run(args):
        from ..analysis import compare
        from ..report import json_out, text
        comparison = compare(args.run_a, args.run_b)
        print(json_out.render(comparison) if args.json else text.comparison(comparison))
        if args.html:
            write_html(args.html, title="profiler compare", comparisons=[comparison])
