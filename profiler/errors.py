"""One base for every error a user can cause, and the exit code the CLI gives it.

The CLI prints a ProfilerError as one line (`profiler: error: ...`) and exits with its `exit_code`:
2 for bad input (arguments, options, unreadable run directories), 1 when the work itself failed
(a write that could not be made, a recording that did not start). PROFILER_DEBUG=1 shows the
traceback instead. Anything that is not a ProfilerError is a bug in the profiler or an error of
the profiled code, and keeps its traceback.
"""


class ProfilerError(Exception):
    """An error the user can act on; its message says what was wrong and what to do."""

    exit_code = 2


class UsageError(ProfilerError, ValueError):
    """Bad arguments or options (CLI flags, Session options, epoch indices)."""


class SessionActiveError(UsageError):
    """A Session was opened while another one is open in this process (one at a time)."""


class RunDirError(ProfilerError, ValueError):
    """A run directory that cannot be read as one, with the reason and where."""


class RunWriteError(ProfilerError, OSError):
    """Records could not be written (disk full, directory removed, ...)."""

    exit_code = 1


class FlamegraphError(ProfilerError, RuntimeError):
    """py-spy could not record the command, or the recording cannot be drawn."""

    exit_code = 1


class WorkloadError(ProfilerError, RuntimeError):
    """The profiled work (a scenario, a script, a subprocess run) failed."""

    exit_code = 1
