"""Cold compile (empty numba cache) and warm start (second process): the kernels' probe, and
`profiler run mlp` (issue #15's cold start)."""

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


def _timed(args, env):
    start = time.perf_counter()
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _cold_warm(args):
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as runs:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        # each run gets its own --out (appended last) so the second is not refused
        times = [_timed(args(os.path.join(runs, str(i))), env) for i in range(2)]
    return times


def run():
    probe = _cold_warm(lambda _: [sys.executable, "-c", PROBE])
    mlp = _cold_warm(lambda out: [sys.executable, "-m", "profiler", "run", "--quiet", "--out", out, "mlp"])
    return {"cold_s": probe[0], "warm_s": probe[1], "mlp_cold_s": mlp[0], "mlp_warm_s": mlp[1]}


def markdown(r):
    return (f"A process that imports the kernels and runs conv2d, broadcast_add and max-pool in both layouts "
            f"(serial variants, small shapes): cold (empty numba cache) {r['cold_s']:.1f} s, "
            f"warm (second process, cache on disk) {r['warm_s']:.1f} s. `profiler run mlp` (10 epochs): "
            f"cold {r['mlp_cold_s']:.1f} s, warm {r['mlp_warm_s']:.1f} s.")
