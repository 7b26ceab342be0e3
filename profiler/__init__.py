"""profiler: why is my training epoch slow, and why does it get slower?

Data flows one way: workload -> capture (Session) -> run directory -> analysis -> report/CLI.
"""

from .analysis import analyze, compare
from .capture import Session

__all__ = ["Session", "analyze", "compare"]
