"""Cold compile (empty numba cache) and warm start (second process) of the kernels."""

import os
import subprocess
import sys
import tempfile
import time

PROBE = ("import numpy as np, kernels as K\n"
         "x = np.ones((2, 8, 8, 3), np.float32); w = np.ones((3, 3, 3, 4), np.float32)\n"
         "for layout in ('NCHW', 'NHWC'):\n"
         "    xl = x if layout == 'NHWC' else np.ascontiguousarray(x.transpose(0, 3, 1, 2))\n"
         "    y = K.conv2d_forward(xl, w, layout=layout); K.conv2d_backward(xl, w, y, layout=layout)\n"
         "    K.broadcast_add_backward(y, layout=layout); K.maxpool2d_forward(y, layout=layout)\n")


def _timed(env):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", PROBE], env=env, check=True)
    return time.perf_counter() - start


def run():
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cold = _timed(env)
        warm = _timed(env)
    return {"cold_s": cold, "warm_s": warm}


def markdown(r):
    return (f"A process that imports the kernels and runs conv2d, broadcast_add and max-pool in both layouts "
            f"(serial variants, small shapes): cold (empty numba cache) {r['cold_s']:.1f} s, "
            f"warm (second process, cache on disk) {r['warm_s']:.1f} s.")
