"""`profiler demo`: reproduce both bug reports at small scale and write an HTML report."""

from .output import output_dir


class DemoCommand:
    name = "demo"
    help = "reproduce both bug reports (Axon, Keras-MXNet) at small scale and write an HTML report"

    @staticmethod
    def add_arguments(p):
        p.description = ("Reproduce the Axon report (epoch time that depends on max_epochs) under scaling, the "
                         "Keras-MXNet report (NCHW vs NHWC) under compare, and, with torch installed, a 2-rank GC "
                         "straggler with and without --gc-policy freeze; write OUT/report.html.")
        p.add_argument("--out", default="runs/demo", help="directory for the demo's runs and report (default runs/demo)")
        p.add_argument("--quick", action="store_true", help="fewer epochs and samples (a smoke test)")

    @staticmethod
    def run(args):
        from ..workloads.demo import demo
        demo(output_dir(args.out, "--out"), quick=args.quick)
