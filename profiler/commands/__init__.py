"""The CLI's commands, one module each. A command is a class with `name`, `help`, `add_arguments`
(argparse) and `run(args)`; it parses nothing itself, calls one function and prints its result.
Heavy modules (numba, matplotlib, torch) are imported inside `run`, never at import time, so
`profiler --help` and Ctrl-C in the first second stay instant."""

from .compare import CompareCommand
from .demo import DemoCommand
from .flamegraph import FlamegraphCommand
from .report import ReportCommand
from .run import RunCommand
from .scaling import ScalingCommand
from .timeline import TimelineCommand

COMMANDS = [RunCommand, ReportCommand, CompareCommand, ScalingCommand, TimelineCommand, FlamegraphCommand, DemoCommand]
