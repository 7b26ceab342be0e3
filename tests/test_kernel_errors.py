"""Bad input reaches a plain ValueError/TypeError that names the argument, never numba's typing errors."""

import numpy as np
import pytest

import kernels as K

x4 = np.zeros((2, 3, 5, 5), np.float32)
w = np.zeros((3, 3, 3, 4), np.float32)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: K.conv2d_forward(x4, w, layout="NCWH"), ValueError, ["'NCHW'", "'NHWC'", "NCWH"]),
    (lambda: K.conv2d_forward(x4, w, layout="channels_first"), ValueError, ["NCHW", "channels_first"]),
    (lambda: K.broadcast_add_forward(x4, np.zeros(3, np.float32), layout="nchw"), ValueError, ["NHWC", "nchw"]),
    (lambda: K.conv2d_forward(x4.astype(np.float64), w, layout="NCHW"), TypeError, ["x", "float32", "float64"]),
    (lambda: K.conv2d_forward(x4, w.astype(np.float16), layout="NCHW"), TypeError, ["w", "float16"]),
    (lambda: K.conv2d_forward(x4.tolist(), w, layout="NCHW"), TypeError, ["x", "numpy array", "list"]),
    (lambda: K.conv2d_forward(x4[0], w, layout="NCHW"), ValueError, ["x", "4-D", "(3, 5, 5)"]),
    (lambda: K.conv2d_forward(x4, w, layout="NHWC"), ValueError, ["input channels", "(2, 3, 5, 5)"]),
    (lambda: K.conv2d_forward(x4, np.zeros((6, 6, 3, 4), np.float32), layout="NCHW"), ValueError,
     ["kernel 6x6", "larger than the input 5x5"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", stride=0), ValueError, ["stride", "0"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", padding="full"), ValueError, ["padding", "'full'"]),
    (lambda: K.conv2d_backward(x4, w, np.zeros((2, 4, 4, 4), np.float32), layout="NCHW"), ValueError,
     ["dy", "(2, 4, 4, 4)", "(2, 4, 3, 3)"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", out=np.zeros((2, 4, 3, 3), np.float64)), ValueError,
     ["out", "float32", "(2, 4, 3, 3)"]),
    (lambda: K.broadcast_add_forward(x4, np.zeros(4, np.float32), layout="NCHW"), ValueError,
     ["b has 4 channels", "has 3"]),
    (lambda: K.broadcast_add_forward(np.zeros((2, 3, 4), np.float32), np.zeros(3, np.float32), layout="NCHW"),
     ValueError, ["x", "2-D or 4-D", "(2, 3, 4)"]),
    (lambda: K.broadcast_add_backward(np.zeros((0, 3), np.float32), layout="NHWC"), ValueError, ["dy", "empty"]),
    (lambda: K.dense_forward(np.zeros((2, 5), np.float32), np.zeros((4, 3), np.float32), np.zeros(3, np.float32)),
     ValueError, ["5 features", "(4, 3)"]),
    (lambda: K.dense_forward(np.zeros((2, 4), np.float32), np.zeros((4, 3), np.float32), np.zeros(2, np.float32)),
     ValueError, ["b (2,)", "(4, 3)"]),
    (lambda: K.dense_backward(np.zeros((2, 4), np.float32), np.zeros((4, 3), np.float32), np.zeros((3, 3), np.float32)),
     ValueError, ["dy", "(3, 3)", "(2, 3)"]),
    (lambda: K.maxpool2d_forward(np.zeros((1, 1, 1, 1), np.float32), layout="NCHW"), ValueError,
     ["pool window 2x2", "larger than the input 1x1"]),
    (lambda: K.relu_backward(np.zeros(3, np.float32), np.zeros(4, np.float32)), ValueError, ["y", "dy", "(3,)", "(4,)"]),
    (lambda: K.softmax_cross_entropy(np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)), ValueError,
     ["logits", "target", "(2, 3)", "(2, 4)"]),
    (lambda: K.softmax_cross_entropy(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64)), TypeError,
     ["target", "float32", "int64"]),
], ids=lambda v: None)
def test_bad_input_is_named(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert "numba" not in message.lower() and "Typing" not in message


def test_compiled_names_are_stable_across_processes():
    """numba's disk cache is keyed on the function's name; a name that changes per process (e.g. from
    a set's hash order) silently recompiles every kernel in every process."""
    import subprocess
    import sys
    code = "from kernels import bias; print(bias._add_inner.serial.py_func.__qualname__)"
    names = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2, 3)}
    assert len(names) == 1 and names.pop().startswith("_add_inner_")


def _threading_layer(env):
    import os
    import subprocess
    import sys
    code = ("import numpy as np, numba, kernels; kernels.relu_forward(np.ones(1 << 17, np.float32)); "
            "print(numba.threading_layer())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"} | env
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_threading_layer_is_tbb_unless_the_user_chose_one():
    """pip's libtbb sits off the loader's path; kernels preloads it, since numba's workqueue layer ran
    training steps 15-30% slower here. Without the tbb package (not built for every platform) it
    is workqueue; a layer the user names is kept."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        version("tbb")
        expected = "tbb"
    except PackageNotFoundError:
        expected = "workqueue"
    assert _threading_layer({}) == expected
    assert _threading_layer({"NUMBA_THREADING_LAYER": "workqueue"}) == "workqueue"
