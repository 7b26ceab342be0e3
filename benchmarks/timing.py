"""Side-by-side timing: candidates are called in turn, round after round, so a noisy neighbour
slows all of them alike; we report medians and the ratios between them.

Each turn first makes one untimed call: thread pools spin for a while after their work (OpenBLAS,
torch's OpenMP), and a candidate timed right after another one's call would share the cores with
those spinning threads. Then it times a burst of calls lasting at least `burst` seconds. The order
rotates round by round: the first candidate of a round measured 5-10% slower than an identical
second one here.
"""

import os
import time

import numpy as np


def interleaved(fns, rounds=20, warmup=2, burst=0.02):
    """{name: median seconds per call} for {name: fn}, each fn called in bursts, in turn."""
    calls = {}
    for _ in range(warmup):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            calls[name] = max(1, int(burst / max(time.perf_counter() - start, 1e-9)))
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:   # each candidate first in turn
            fn = fns[name]
            fn()
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            times[name].append((time.perf_counter() - start) / calls[name])
    return {name: float(np.median(t)) for name, t in times.items()}


def set_threads(n):
    """Same thread count for torch, numba and numpy's BLAS."""
    import numba
    import torch
    from threadpoolctl import threadpool_limits
    torch.set_num_threads(n)
    numba.set_num_threads(n)
    return threadpool_limits(n)


def machine():
    import platform
    import numba
    import torch
    from threadpoolctl import threadpool_info
    isa = _kernel_isa()   # first: importing the kernels also sets numba's threading layer
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    blas = ", ".join(f"{i['internal_api']} {i.get('version')} ({i.get('architecture')})" for i in threadpool_info()
                     if i["user_api"] == "blas")
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "torch": torch.__version__, "blas": blas,
            "numba threading layer": numba.config.THREADING_LAYER,
            "kernels ISA / block": "{isa} ({cpu}) / {block} ({block_source})".format(**isa),
            "torch CPU capability": torch.backends.cpu.get_cpu_capability(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)")}


def _kernel_isa():
    import kernels
    kernels.BLOCK   # imports the kernels, which settle the vector width and so the block
    return kernels.isa_info()
