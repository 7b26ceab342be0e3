"""`python -m profiler.integrations.launcher ARGS`: torch's launcher (torch.distributed.run ARGS),
with a failed job said as one line per failed rank instead of the launcher's traceback.

torch.distributed.run raises ChildFailedError when a rank exits non-zero, and SignalException when
it is itself stopped by a signal; both end its process with a traceback of its own frames and a
table, after the rank's own error (printed by the rank) and torch's one-line log of the failure.
Here each becomes a line naming the rank and how it ended, and an exit code: 1, or 128 + the
signal's number. This process is the launcher's, never a profiled one, so importing torch is fine.
"""

import os
import signal
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import main as torch_run

from .launch import LAUNCHED


def how_it_ended(exitcode):
    """'exited with code 1' or 'was killed by SIGKILL' (a process's exit code as Popen gives it)."""
    if exitcode >= 0:
        return f"exited with code {exitcode}"
    try:
        return f"was killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"was killed by signal {-exitcode}"


def failure_lines(error):
    """One line per failed rank of a ChildFailedError: ranks that exited with an error first, then
    those killed by a signal (when one rank fails, the launcher stops the others with SIGTERM, so
    they fail too; the failures' timestamps are whole seconds and tie), each kind by rank."""
    failures = sorted(error.failures.items(), key=lambda item: (item[1].exitcode < 0, item[0]))
    return [f"profiler: rank {rank} (pid {failure.pid}) {how_it_ended(failure.exitcode)}" for rank, failure in failures]


def main(argv):
    os.environ[LAUNCHED] = "1"   # the ranks' environment: their `next:` line is the launcher's to print
    try:
        torch_run(argv)
    except ChildFailedError as e:
        print("\n".join(failure_lines(e)), file=sys.stderr)
        return 1
    except SignalException as e:
        print(f"profiler: the launcher was stopped by {signal.Signals(e.sigval).name}; its ranks were stopped",
              file=sys.stderr)
        return 128 + e.sigval
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
