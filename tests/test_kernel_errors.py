"""Bad input reaches a plain ValueError/TypeError that names the argument, never numba's typing errors."""

import os

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
    (lambda: K.conv2d_backward(x4, w, np.zeros((2, 4, 3, 3), np.float32), layout="NCHW", need_dx="no"), TypeError,
     ["need_dx", "True or False", "str 'no'"]),
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


def _python(code, env=None):
    """stdout of `code` in a fresh interpreter whose environment names no threading layer but `env`'s."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"} | (env or {})
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _threading_layer(env, first=""):
    return _python(f"import numpy as np, numba\n{first}\nimport kernels; kernels.relu_forward(np.ones(1 << 17, np.float32)); "
                   "print(numba.threading_layer())", env)


def test_threading_layer_is_tbb_unless_the_user_chose_one():
    """pip's libtbb sits off the loader's path; kernels preloads it, since numba's workqueue layer ran
    training steps 15-30% slower here. Without the tbb package (not built for every platform) it
    is workqueue; a layer the user names is kept, TBB too (which needs the preload as well)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        version("tbb")
        expected = "tbb"
    except PackageNotFoundError:
        expected = "workqueue"
    assert _threading_layer({}) == expected
    assert _threading_layer({"NUMBA_THREADING_LAYER": "workqueue"}) == "workqueue"
    assert _threading_layer({}, first="numba.config.THREADING_LAYER = 'workqueue'") == "workqueue"   # set in code
    if expected == "tbb":
        assert _threading_layer({"NUMBA_THREADING_LAYER": "tbb"}) == "tbb"
        assert _threading_layer({"NUMBA_THREADING_LAYER": "threadsafe"}) == "tbb"


def _warnings_on_import(first):
    """(layer numba's pool runs on, warning texts) after `first`, then `import kernels`."""
    out = _python(f"import warnings, numba\n{first}\nwith warnings.catch_warnings(record=True) as caught:\n"
                  "    warnings.simplefilter('always'); import kernels; kernels.BLOCK\n"
                  "numba.set_num_threads(1); print(numba.threading_layer()); print(*[w.message for w in caught], sep='\\n')")
    layer, *texts = out.split("\n")
    return layer, [t for t in texts if t]


def test_a_thread_pool_started_before_the_kernels_is_named_in_a_warning():
    """numba picks its layer once, when the pool starts: started before the kernels are imported
    (numba.set_num_threads first) it keeps numba's own default, OpenMP where pip's libtbb is off
    the loader's path, and OpenMP kills a forked child that runs a parallel kernel. The kernels
    cannot change it then; they say so, naming the layer, unless it is the one they pick."""
    layer, texts = _warnings_on_import("numba.set_num_threads(1)")
    chosen = _threading_layer({})
    if layer == chosen:
        assert texts == []
    else:
        assert len(texts) == 1 and f"runs on its {layer!r} threading layer, not {chosen!r}" in texts[0]
        assert "read kernels.BLOCK (or call any kernel) before numba.set_num_threads" in texts[0]
    assert _warnings_on_import("pass") == (chosen, [])   # imported first: the kernels' own layer, no warning


def test_the_warning_names_the_running_layer_and_the_risk(monkeypatch):
    """The warning's own logic, on any host (the test above sees a mismatch only where numba's
    default differs from the kernels' pick): a pool on another layer is named, OpenMP with its
    fork hazard; no pool, or one on the chosen layer, says nothing."""
    import warnings
    from kernels import _jit
    for running, chosen in [("omp", "tbb"), ("workqueue", "tbb"), ("omp", "workqueue")]:
        monkeypatch.setattr(_jit, "_launched_layer", lambda running=running: running)
        with pytest.warns(RuntimeWarning) as caught:
            _jit._warn_if_launched(chosen)
        text = str(caught[0].message)
        assert len(caught) == 1 and f"runs on its {running!r} threading layer, not {chosen!r}" in text
        assert ("forked child" in text) == (running == "omp")
    for running in (None, "tbb"):
        monkeypatch.setattr(_jit, "_launched_layer", lambda running=running: running)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _jit._warn_if_launched("tbb")


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


p1, g1 = np.zeros(8, np.float32), np.ones(8, np.float32)
x2, w2, b2 = np.ones((4, 6), np.float32), np.ones((6, 3), np.float32), np.ones(3, np.float32)
xp = np.ones((1, 2, 4, 4), np.float32)
y_pool, arg_pool = K.maxpool2d_forward(xp, layout="NCHW")


@pytest.mark.parametrize("call,exc,words", [
    # read-only buffers the kernel writes: one ValueError line, before any compiled code
    (lambda: K.relu_forward(x2, out=_read_only(x2)), ValueError, ["out", "read-only"]),
    (lambda: K.sigmoid_backward(x2, x2, out=_read_only(x2)), ValueError, ["out", "read-only"]),
    (lambda: K.broadcast_add_forward(x2, np.ones(6, np.float32), layout="NHWC", out=_read_only(x2)), ValueError,
     ["out", "read-only"]),
    (lambda: K.broadcast_add_backward(x2, layout="NHWC", out=_read_only(np.ones(6, np.float32))), ValueError,
     ["out", "read-only"]),
    (lambda: K.dense_forward(x2, w2, b2, out=_read_only(np.ones((4, 3), np.float32))), ValueError, ["out", "read-only"]),
    (lambda: K.dense_backward(x2, w2, np.ones((4, 3), np.float32),
                              out=(None, _read_only(w2), None)), ValueError, ["out[1] (dw)", "read-only"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", out=_read_only(np.ones((2, 4, 3, 3), np.float32))), ValueError,
     ["out", "read-only"]),
    (lambda: K.conv2d_backward(x4, w, np.ones((2, 4, 3, 3), np.float32), layout="NCHW",
                               out=(_read_only(x4), None)), ValueError, ["out[0] (dx)", "read-only"]),
    (lambda: K.maxpool2d_forward(xp, layout="NCHW", argmax_out=_read_only(arg_pool)), ValueError,
     ["argmax_out", "read-only"]),
    (lambda: K.maxpool2d_backward(y_pool, arg_pool, xp.shape, layout="NCHW", out=_read_only(xp)), ValueError,
     ["out", "read-only"]),
    (lambda: K.softmax_cross_entropy(x2, x2, grad_out=_read_only(x2)), ValueError, ["grad_out", "read-only"]),
    (lambda: K.sgd_update(_read_only(p1), g1, p1.copy(), lr=0.1), ValueError, ["p", "read-only"]),
    (lambda: K.adam_update(p1.copy(), g1, p1.copy(), _read_only(p1), lr_t=0.1, beta1=0.9, beta2=0.99, eps=1e-7),
     ValueError, ["v", "read-only"]),
    (lambda: K.rmsprop_update(p1.copy(), g1, _read_only(p1), lr=0.1, rho=0.9, eps=1e-7), ValueError,
     ["avg_sq", "read-only"]),
    (lambda: K.adadelta_update(p1.copy(), g1, p1.copy(), _read_only(p1), lr=1.0, rho=0.9, eps=1e-7), ValueError,
     ["avg_step", "read-only"]),
    # scalars and helper objects of the wrong kind
    (lambda: K.sgd_update(p1.copy(), g1, p1.copy(), lr="fast"), TypeError, ["lr", "real number", "str", "'fast'"]),
    (lambda: K.sgd_update(p1.copy(), g1, p1.copy(), lr=0.1, momentum=None), TypeError,
     ["momentum", "real number", "NoneType"]),
    (lambda: K.adam_update(p1.copy(), g1, p1.copy(), p1.copy(), lr_t=0.1, beta1=[0.9], beta2=0.99, eps=1e-7),
     TypeError, ["beta1", "real number", "list"]),
    (lambda: K.rmsprop_update(p1.copy(), g1, p1.copy(), lr=0.1, rho="0.9", eps=1e-7), TypeError, ["rho", "str"]),
    (lambda: K.adadelta_update(p1.copy(), g1, p1.copy(), p1.copy(), lr=1.0, rho=0.9, eps=True), TypeError,
     ["eps", "bool"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", workspace="x"), TypeError, ["workspace", "Workspace", "str"]),
    (lambda: K.conv2d_backward(x4, w, np.ones((2, 4, 3, 3), np.float32), layout="NCHW", workspace={}), TypeError,
     ["workspace", "Workspace", "dict"]),
    (lambda: K.dense_forward(x2, w2, b2, workspace=1), TypeError, ["workspace", "Workspace", "int"]),
    (lambda: K.conv2d_backward(x4, w, np.ones((2, 4, 3, 3), np.float32), layout="NCHW", out=np.ones(3)), TypeError,
     ["out", "(dx, dw)", "ndarray"]),
    (lambda: K.dense_backward(x2, w2, np.ones((4, 3), np.float32), out=(None, None)), TypeError,
     ["out", "(dx, dw, db)", "length 2"]),
    (lambda: K.maxpool2d_backward(y_pool, arg_pool.tolist(), xp.shape, layout="NCHW"), TypeError,
     ["argmax", "int8", "list"]),
    (lambda: K.maxpool2d_backward(y_pool, arg_pool.astype(np.int64), xp.shape, layout="NCHW"), TypeError,
     ["argmax", "int8", "int64"]),
    (lambda: K.maxpool2d_backward(y_pool, arg_pool, (1, 4, 4), layout="NCHW"), ValueError,
     ["x_shape", "4 positive ints", "(1, 4, 4)"]),
    (lambda: K.maxpool2d_backward(y_pool, arg_pool, 16, layout="NCHW"), ValueError, ["x_shape", "16"]),
    (lambda: K.maxpool2d_forward(xp, layout="NCHW", argmax_out=np.zeros(y_pool.shape, np.int32)), ValueError,
     ["argmax_out", "int8", "int32"]),
    # an argmax off the window: the NCHW kernel scatters through it, so it would write outside dx
    (lambda: K.maxpool2d_backward(np.ones((1, 2, 1, 1), np.float32), np.full((1, 2, 1, 1), -1, np.int8), xp.shape,
                                  layout="NCHW", size=3), ValueError, ["argmax", "outside a 3x3 window"]),
    (lambda: K.maxpool2d_backward(np.ones((1, 2, 1, 1), np.float32), np.full((1, 2, 1, 1), 127, np.int8), xp.shape,
                                  layout="NCHW", size=3), ValueError, ["argmax", "outside a 3x3 window", "0..8"]),
    (lambda: K.maxpool2d_backward(np.ones((1, 2, 1, 1), np.float32), np.zeros((1, 2, 1, 1), np.int8),
                                  (1, 2, 12, 12), layout="NCHW", size=12), TypeError, ["argmax", "int16", "size 12"]),
    (lambda: K.maxpool2d_forward(xp, layout="NCHW", size=2**15), ValueError, ["pool size", "2**15"]),
    # strides: numpy's narrow integers and strides past int64 get the same line as any bad stride
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", stride=10**30), ValueError, ["stride", "2**31"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", stride=2**63), ValueError, ["stride", "2**31"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", stride=np.uint8(0)), ValueError, ["stride", "0"]),
    (lambda: K.conv2d_output_shape((1, 3, -8, 8), w.shape, layout="NCHW", padding="same"), ValueError,
     ["x_shape", "4 positive ints", "-8"]),
    (lambda: K.conv2d_output_shape((2.5, 3, 7, 7), w.shape, layout="NCHW"), ValueError, ["x_shape", "2.5"]),
    (lambda: K.conv2d_output_shape(x4.shape, (0, 3, 3, 4), layout="NCHW"), ValueError, ["w_shape", "(0, 3, 3, 4)"]),
    (lambda: K.conv2d_output_shape(x4.shape, w.shape, layout="NCHW", stride=1.0), ValueError, ["stride", "1.0"]),
    (lambda: K.conv2d_forward(x4, w, layout="NCHW", block="\u096ex16"), ValueError, ["ROWSxLANES", "16"]),
    (lambda: K.aligned_empty((-1, 3)), ValueError, ["negative", "(-1, 3)"]),
], ids=lambda v: None)
def test_bad_buffers_and_scalars_are_named(call, exc, words):
    test_bad_input_is_named(call, exc, words)
    with pytest.raises(exc) as info:
        call()
    assert "\n" not in str(info.value)


def _alias(base, offset, shape):
    """A float32 view of `shape` starting `offset` floats into `base`'s memory."""
    return base.reshape(-1)[offset:offset + int(np.prod(shape))].reshape(shape)


def _overlapping_out_cases():
    """(call, the name the error must give) for every `out=` of every kernel, overlapping each
    array the kernel reads (and the kernel's other outputs)."""
    buf = np.ones(4096, np.float32)
    sq = _alias(buf, 0, (4, 4))
    xc = np.ones((2, 3, 6, 6), np.float32)
    wc = np.ones((3, 3, 3, 3), np.float32)
    dyc = np.ones((2, 3, 6, 6), np.float32)
    pool_x = np.ones((1, 2, 4, 4), np.float32)
    pool_y, pool_arg = K.maxpool2d_forward(pool_x, layout="NCHW")
    yield lambda: K.relu_forward(sq, out=_alias(buf, 2, (4, 4))), "x"
    yield lambda: K.sigmoid_forward(sq, out=_alias(buf, 1, (4, 4))), "x"
    yield lambda: K.relu_backward(sq, x2[:, :4].copy(), out=_alias(buf, 3, (4, 4))), "y"
    yield lambda: K.sigmoid_backward(x2[:, :4].copy(), sq, out=_alias(buf, 3, (4, 4))), "dy"
    yield lambda: K.broadcast_add_forward(sq, _alias(buf, 0, (4,)), layout="NHWC", out=sq), "b"
    yield lambda: K.broadcast_add_forward(sq, np.ones(4, np.float32), layout="NHWC", out=_alias(buf, 4, (4, 4))), "x"
    yield lambda: K.broadcast_add_backward(sq, layout="NCHW", out=sq[1]), "dy"
    yield lambda: K.dense_forward(sq, sq.copy(), np.ones(4, np.float32), out=sq), "x"
    yield lambda: K.dense_forward(sq.copy(), sq, np.ones(4, np.float32), out=sq), "w"
    yield lambda: K.dense_forward(sq.copy(), sq.copy(), sq[0], out=sq), "b"
    big_x, big_w = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)   # the numba path
    yield lambda: K.dense_forward(big_x, big_w, np.ones(64, np.float32), out=big_x), "x"
    yield lambda: K.dense_backward(big_x, big_w, np.ones((64, 64), np.float32), out=(big_x, None, None)), "x"
    yield lambda: K.dense_backward(sq.copy(), sq.copy(), sq, out=(sq, None, None)), "dy"
    yield lambda: K.dense_backward(sq.copy(), sq, sq.copy(), out=(None, sq, None)), "w"
    yield lambda: K.dense_backward(sq.copy(), sq.copy(), sq.copy(), out=(sq, sq, None)), "out[1] (dw)"
    yield lambda: K.dense_backward(sq.copy(), sq.copy(), sq.copy(), out=(None, sq, sq[0])), "out[2] (db)"
    yield lambda: K.dense_backward(sq.copy(), sq.copy(), sq, out=(None, None, sq[0])), "dy"
    yield lambda: K.conv2d_forward(xc, wc, layout="NCHW", padding="same", out=xc), "x"
    xh, dyh = np.ones((2, 6, 6, 3), np.float32), np.ones((2, 6, 6, 3), np.float32)
    yield lambda: K.conv2d_forward(xh, wc, layout="NHWC", padding="same", out=xh), "x"
    yield lambda: K.conv2d_backward(xc, wc, dyc, layout="NCHW", padding="same", out=(xc, None)), "x"
    yield lambda: K.conv2d_backward(xh, wc, dyh, layout="NHWC", padding="same", out=(dyh, None)), "dy"
    yield lambda: K.conv2d_backward(xc, wc, dyc, layout="NCHW", padding="same", out=(None, wc)), "w"
    yield lambda: K.conv2d_backward(xc, wc, dyc, layout="NCHW", padding="same",
                                    out=(None, _alias(xc, 5, wc.shape))), "x"
    yield lambda: K.maxpool2d_forward(pool_x, layout="NCHW", out=_alias(pool_x, 0, pool_y.shape)), "x"
    yield lambda: K.maxpool2d_forward(pool_x, layout="NHWC", out=_alias(pool_x, 7, (1, 1, 2, 4))), "x"
    yield lambda: K.maxpool2d_forward(pool_x, layout="NCHW",
                                      argmax_out=pool_x.reshape(-1).view(np.int8)[:pool_arg.size].reshape(pool_arg.shape)), "x"
    pool_buf = np.ones(64, np.float32)
    yield lambda: K.maxpool2d_backward(_alias(pool_buf, 0, pool_y.shape), pool_arg, pool_x.shape, layout="NCHW",
                                       out=_alias(pool_buf, 4, pool_x.shape)), "dy"
    yield lambda: K.softmax_cross_entropy(sq, sq.copy(), probs_out=sq), "logits"
    yield lambda: K.softmax_cross_entropy(sq.copy(), sq, grad_out=sq), "target"
    yield lambda: K.softmax_cross_entropy(sq.copy(), sq.copy(), probs_out=sq, grad_out=sq), "grad_out"
    p = np.zeros(8, np.float32)
    yield lambda: K.sgd_update(p, p, np.zeros(8, np.float32), lr=0.1), "g"
    yield lambda: K.sgd_update(p, g1, p, lr=0.1), "velocity"
    yield lambda: K.adam_update(p, g1, np.zeros(8, np.float32), g1, lr_t=0.1, beta1=0.9, beta2=0.9, eps=1e-7), "g"
    m = np.zeros(8, np.float32)
    yield lambda: K.adam_update(p, g1, m, m, lr_t=0.1, beta1=0.9, beta2=0.9, eps=1e-7), "v"
    yield lambda: K.rmsprop_update(p, g1, p, lr=0.1, rho=0.9, eps=1e-7), "avg_sq"
    yield lambda: K.adadelta_update(p, g1, m, m, lr=1.0, rho=0.9, eps=1e-7), "avg_step"


@pytest.mark.parametrize("call,name", list(_overlapping_out_cases()), ids=lambda v: None)
def test_out_overlapping_an_input_is_named(call, name):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "overlaps" in message and name in message, message


def test_in_place_where_documented(rng):
    """Element-wise kernels and broadcast_add compute correctly with out= one of their inputs."""
    x, dy, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32), \
        rng.standard_normal(5).astype(np.float32)
    for forward, backward in [(K.relu_forward, K.relu_backward), (K.sigmoid_forward, K.sigmoid_backward)]:
        y = forward(x)
        a = x.copy()
        assert forward(a, out=a) is a
        np.testing.assert_array_equal(a, y)
        expect = backward(y, dy)
        for which in (0, 1):
            args = [y.copy(), dy.copy()]
            np.testing.assert_array_equal(backward(*args, out=args[which]), expect)
    a = x.copy()
    K.broadcast_add_forward(a, b, layout="NHWC", out=a)
    np.testing.assert_array_equal(a, x + b)
