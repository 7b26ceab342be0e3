"""profiler: why is my training epoch slow, and why does it get slower?

Data flows one way: workload -> capture (Session) -> run directory -> analysis -> report/CLI.

`import profiler` imports only the standard library: each public name below loads its module on
first use, so the profiled process pays for capture (numpy, psutil) only when it opens a Session,
and never for the engine (numba) or rendering (matplotlib) unless it asks for them.
"""

import importlib

__version__ = "0.2.0"

_PUBLIC = {
    "Session": "profiler.capture.session",
    "analyze": "profiler.analysis",
    "compare": "profiler.analysis",
    "scaling": "profiler.analysis",
    "read_run": "profiler.rundir",
    "Run": "profiler.rundir",
    "Diagnosis": "profiler.analysis",
    "Comparison": "profiler.analysis",
    "Scaling": "profiler.analysis",
    "Finding": "profiler.analysis",
    "ProfilerError": "profiler.errors",
    "UsageError": "profiler.errors",
    "RunDirError": "profiler.errors",
    "RunWriteError": "profiler.errors",
    "SessionActiveError": "profiler.errors",
    "WorkloadError": "profiler.errors",
    "FlamegraphError": "profiler.errors",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'profiler' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
