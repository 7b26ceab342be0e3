"""Whether progress bars belong on this process's stderr."""

import sys


def stderr_is_a_terminal():
    """Whether a progress bar belongs on stderr: a terminal, not a log file, and not a stderr that
    is closed (`2>&-`: sys.stderr is None), where the work goes on without one."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (OSError, ValueError):   # a stream closed since (ValueError: I/O operation on closed file)
        return False
