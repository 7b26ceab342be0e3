"""Side-by-side timing: candidates are called in turn, round after round, so a noisy neighbour
slows all of them alike; we report medians, the ratios between them, and the spread of each
ratio taken round by round (middle_half).

Each turn first waits `settle` seconds, then makes untimed calls for `warm` seconds (at least
one), then times a burst of calls lasting at least `burst` seconds. The wait is for the thread
pools of the candidate before, which spin on their cores for a while after their work (torch's
libgomp, OpenBLAS): a candidate timed while they spin shares the cores with them. After one
2-thread conv2d call torch's threads burnt 9.5-9.9 ms of CPU time during a sleep of 10-100 ms (the
Zen 5 VM), and one untimed call (~1.4 ms) did not cover that: our 2-thread cifar conv2 forward
timed 1.81-1.97 ms in turns after torch's against 1.37-1.52 after a copy of itself, 1.23-1.42 with
a 20 ms wait (docs/performance.md). The untimed calls then wake the candidate's own pool, asleep
after the wait, and let it spread over the cores: on the project's VMs a worker woken after an
idle spell can wait ~10 ms queued behind the caller on the caller's vCPU, and with one untimed
call a 2-thread broadcast_add ran at 1-thread speed in 56-75% of its 5 ms bursts (none with 20 ms
of untimed calls; docs/performance.md). The bursts time a loop's steady state, ops back to back,
as in a training step. The order rotates round by round: the first candidate of a round measured
5-10% slower than an identical second one here.
"""

import os
import time

import numpy as np


SETTLE_S = 0.03   # three times the spin measured above
WARM_S = 0.02   # twice the longest queueing of a woken worker measured above


def interleaved(fns, rounds=20, warmup=2, burst=0.02, settle=SETTLE_S, warm=WARM_S):
    """{name: [seconds per call in each round]} for {name: fn}, each fn called in bursts, in turn."""
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
            time.sleep(settle)
            start = time.perf_counter()
            fn()
            while time.perf_counter() - start < warm:
                fn()
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            times[name].append((time.perf_counter() - start) / calls[name])
    return times


def medians(times):
    """{name: median seconds per call} of interleaved's rounds."""
    return {name: float(np.median(t)) for name, t in times.items()}


def middle_half(times, num, den):
    """The quartiles of num's time over den's, round by round: each round timed the two within
    moments of each other, so their spread is the run's own noise on that ratio (the tables' ratio
    is of the medians)."""
    ratios = np.array(times[num]) / np.array(times[den])
    return tuple(float(q) for q in np.percentile(ratios, (25, 75)))


def spread_cell(spread):
    """A middle_half as a table cell: "0.95-1.02"."""
    return f"{spread[0]:.2f}-{spread[1]:.2f}"


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
    kernels_block = "{isa} ({cpu}) / {block} ({block_source})".format(**isa)
    if isa["wide"]:
        kernels_block += f"; {isa['wide']} where the axis along the lanes is whole blocks of it"
    if isa["pixels"]:
        kernels_block += f"; {isa['pixels']}, its rows fitted to the channels, with pixels along the lanes"
    if isa["half"]:
        kernels_block += f"; {isa['half']} where its lanes pad the axis along them at least a tenth less"
    kernels_block += "; each kernel row names the blocks its calls ran (our blocks)"
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
            "numba threading layer": _threading_layer(),
            "kernels ISA / blocks": kernels_block,
            "L1 data cache": (f"{isa['l1d'] // 1024} KiB (cpu0's): the NHWC forward runs its blocks in passes of "
                              "kernel rows where a kernel's weights overflow it and it is at least 48 KiB")
                             if isa["l1d"] else "unknown: the NHWC forward runs no passes of kernel rows",
            "torch CPU capability": torch.backends.cpu.get_cpu_capability(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)")}


def _threading_layer():
    """The layer numba's pool runs on, launched here: one launched before the kernels were
    imported (numba.set_num_threads called first) ignores the layer they choose (OpenMP here,
    where pip's TBB is not on the loader's path), and the rows would run on that one."""
    import numba
    numba.get_num_threads()   # launches the pool, which set_threads would launch before any timed call
    return numba.threading_layer()


def _kernel_isa():
    import kernels
    kernels.BLOCK   # imports the kernels, which settle the vector width and so the block
    return kernels.isa_info()
