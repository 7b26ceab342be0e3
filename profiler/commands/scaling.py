"""`profiler scaling SCENARIO --max-epochs ...`: does epoch time depend on max_epochs?"""

from ..errors import UsageError
from ..workloads.names import SCENARIO_NAMES
from .output import output_dir, output_file, show, write_html
from .options import add_scenario_options, check_gc_policy, default_dir, int_list, scenario_argv


class ScalingCommand:
    name = "scaling"
    help = "does epoch time depend on max_epochs? (the Axon report's benchmark)"

    @staticmethod
    def add_arguments(p):
        p.description = ("Run SCENARIO once per max_epochs value, each halted after the same epochs, "
                         "in fresh processes, and compare epoch times.")
        add_scenario_options(p, epochs_flag=False)
        p.add_argument("scenario", choices=SCENARIO_NAMES)
        p.add_argument("--max-epochs", type=int_list, required=True, help="e.g. 100,1000,10000")
        p.add_argument("--out", help="directory for the runs (default runs/scaling-SCENARIO-TIMESTAMP)")
        p.add_argument("--json", action="store_true", help="print the scaling result as JSON")
        p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML page")

    @staticmethod
    def run(args):
        from ..analysis import scaling
        from ..report import figures, json_out, text
        from ..workloads.processes import run_many
        from ..workloads.history import check_history_fits
        out = output_dir(args.out or default_dir(f"scaling-{args.scenario}"), "--out")
        if args.halt_after is not None and args.halt_after > args.max_epochs[0]:
            raise UsageError(f"--halt-after {args.halt_after} is more than the smallest --max-epochs {args.max_epochs[0]}")
        check_history_fits(args.history, max(args.max_epochs))   # before the first run, not after it
        check_gc_policy(args.gc_policy)
        from ..rundir.writer import holds_a_run
        runs = {n: out / f"max-{n}" for n in args.max_epochs}
        html_path = None if args.html is None else output_file(args.html, "--html", "scaling.html",
                                                               reads=runs.values())
        for run in runs.values():   # said before any run starts, not by the first child that finds it
            holds_a_run(run, f"--out {out}: ")
        run_many([scenario_argv(args, args.scenario, d, n) for n, d in runs.items()], f"scaling {args.scenario}")
        result = scaling(runs)
        figures.save(figures.scaling(result), out / "scaling.png")
        show(json_out.render(result) if args.json else text.scaling(result))
        if html_path:
            write_html(html_path, title=f"profiler scaling: {args.scenario}", scalings=[result])
