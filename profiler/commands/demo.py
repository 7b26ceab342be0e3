"""`profiler demo`: reproduce both bug reports at small scale and write an HTML report."""

from .output import output_dir


class DemoCommand:
    name = "demo"
    help = "reproduce both bug reports (Axon, Keras-MXNet) at small scale and write an HTML report"

    @staticmethod
    def add_arguments(p):
        p.add_argument("--out", default="runs/demo", help="directory for the demo's runs and report")
        p.add_argument("--quick", action="store_true", help="smaller still (for tests)")

    @staticmethod
    def run(args):
        from ..workloads.demo import demo
        demo(output_dir(args.out, "--out"), quick=args.quick)
