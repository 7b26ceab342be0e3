"""profiler: why is my training epoch slow, and why does it get slower?

Data flows one way: workload -> capture (Session) -> run directory -> analysis -> report/CLI.
"""

from .capture import Session

__all__ = ["Session"]
