"""The `profiler` command: parse, call one command, print; errors become one line and an exit code.

Exit codes: 0 done, 1 the work failed (a ProfilerError with exit_code 1, or any other exception),
2 bad input (usage, options, unreadable run directories), 130 interrupted (Ctrl-C), 143 (128 +
SIGTERM) terminated while waiting on processes of its own (which are stopped first), 141 (128 +
SIGPIPE) quietly when the reader of the output went away (`profiler report RUN | head`).
PROFILER_DEBUG=1 shows tracebacks instead of one line.
"""

import argparse
import os
import signal
import sys

from .errors import ProfilerError, UsageError
from .interrupts import Terminated
from .commands.options import remove_unused
from .commands.output import closed, stdout_to_devnull

EXAMPLES = """examples:
  profiler run mlp --epochs 1000 --halt-after 100 --history preallocated --gc-collect epoch
  profiler report runs/mlp-NHWC-20261130-101500
  profiler report RUN --json | jq .primary_cause
  profiler compare runs/cnn-nchw runs/cnn-nhwc --html layouts.html
  profiler scaling mlp --max-epochs 100,1000,10000 --halt-after 100 --history preallocated --gc-collect epoch
  profiler flamegraph mnist-cnn --layout NCHW --epochs 2 --out nchw.svg
  profiler flamegraph --out mine.svg -- python train.py
  profiler flamegraph --diff nchw.folded nhwc.folded --out diff.svg
  profiler demo"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser():
    from .commands import COMMANDS
    parser = _Parser(prog="profiler", description="Why is my training epoch slow, and why does it get slower?",
                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        command.add_arguments(p)
        p.set_defaults(handler=command)
    return parser


def _parse(argv):
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):   # argparse would ask for COMMAND
        raise UsageError(f"unrecognized option {argv[0]}: profiler takes a COMMAND first (profiler --help lists them)")
    try:
        return build_parser().parse_args(argv)
    except UsageError as e:
        if argv[:1] == ["run"] and str(e).startswith("unrecognized arguments"):   # a script's option before it
            raise UsageError(f"{e} (profiler run's own options go before the script or scenario, the script's "
                             f"or scenario's after its name: profiler run train.py --epochs 3)") from None
        raise


def _split_command(argv):
    """argv before `--`, and the command after it (for commands that record another program)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _message(error):
    text = str(error).strip()
    if isinstance(error, MemoryError):
        return "out of memory" + (f" ({text})" if text else "") + ": use fewer epochs or samples, or a machine with more memory"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _forget_unhandled_interrupt():
    """Keep the exit code after a Ctrl-C that landed in code run by exec() or eval() of a string
    (namedtuple and dataclass definitions while numpy or numba import). CPython 3.11 to 3.13 then
    mark the interrupt unhandled even though it was caught, and `python -m profiler` ends by
    SIGINT after exit; every exec() of a string clears that mark before it runs (3.14 no longer
    sets it there)."""
    exec("")


def _fill_closed_descriptors():
    """A standard stream closed at start (`>&-`, `2>&-`): Python sets it to None and leaves its
    descriptor free, so the next file opened (a run's records) would take it, and a C library's
    writes to it (LLVM's, TBB's) would land in that file. os.devnull takes the descriptor. stderr
    then writes there (there is nowhere to say anything; print() to a None stderr went to stdout);
    stdout stays None, so output to it is a failed write (commands/output.show)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None and not _open_descriptor(fd):
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")


def _open_descriptor(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(os.environ.get("PROFILER_DEBUG"))
    _fill_closed_descriptors()
    try:
        argv, command = _split_command(argv)
        args = _parse(argv)
        if command and not getattr(args.handler, "takes_command", False):
            raise UsageError(f"`profiler {args.command_name}` takes no -- COMMAND")
        args.command = command
        args.handler.run(args)
        if not closed(sys.stdout):   # `>&-`: nothing to flush, as at Python's exit
            sys.stdout.flush()   # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        if debug:
            raise
        stdout_to_devnull()
        return 141
    except KeyboardInterrupt:
        if debug:
            raise
        print("profiler: interrupted", file=sys.stderr)
        return 130
    except Terminated:   # the processes it started are stopped: end as SIGTERM would have
        if debug:
            raise
        print("profiler: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except ProfilerError as e:
        if debug:
            raise
        print(f"profiler: error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # the workload failed: one line, not a traceback
        if debug:
            raise
        print(f"profiler: {_message(e)} (PROFILER_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
    finally:   # every exit code here is meant, also after a Ctrl-C that a recorded script caught
        remove_unused()
        _forget_unhandled_interrupt()
    return 0
