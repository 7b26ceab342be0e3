"""numba kernels for a small CNN, float32, in NCHW (channels_first) and NHWC (channels_last).

Pure functions on numpy arrays; they know nothing of the engine or the profiler. Every kernel
checks its arguments before any compiled code runs (see _checks for the dtype policy) and takes
optional `out=` buffers so a training step need not allocate. The arrays the kernels allocate, and
a `Workspace`'s buffers, start on a 64-byte cache line; `kernels.aligned_empty` and
`aligned_zeros` make such arrays for a caller's own buffers.

`import kernels` is cheap: each kernel's module (and numba) is imported on first access.
`kernels.isa_info()` reports the host's vector ISA and the micro-kernel block shape without
importing numba; `kernels.BLOCK` is the block shape ("RxL") the kernels use by default; conv2d's
pixel-block forwards (its stride-1 input grad among them), its weight grads past the first
layers' and dense's forward use `isa_info()["wide"]` instead (AVX-512's 6 x 64) when the axis
along their lanes is whole blocks of it (dense's forward: unless its batch pads to at least a
tenth more rows in it, as 32 rows do), and `isa_info()["half"]` (AVX-512's 8 x 16) where that
axis pads to at least a tenth fewer lanes in it (e.g. 48, 80, 112 channels); NCHW forwards with
output channels along the rows (first layers) and dense's backward by slabs use a block of fewer
rows when that pads them less (AVX2's 4 x 16 for a block's 16 inputs), the forwards starting
from `isa_info()["pixels"]`, a block of more lanes, where each image's pixels fill its lanes
about as well (32 channels as 4 x 64 on AVX-512, 4 x 24 on AVX2). `isa_info()["l1d"]`, the host's
L1 data cache, decides where the NHWC forward runs its blocks in passes of kernel rows.
"""

import importlib

from ._isa import isa_info

_MODULES = {
    "LAYOUTS": "_checks", "Workspace": "workspace", "aligned_empty": "workspace", "aligned_zeros": "workspace",
    "relu_backward": "activations", "relu_forward": "activations",
    "sigmoid_backward": "activations", "sigmoid_forward": "activations",
    "broadcast_add_backward": "bias", "broadcast_add_forward": "bias",
    "conv2d_backward": "conv", "conv2d_forward": "conv", "conv2d_output_shape": "conv",
    "dense_backward": "dense", "dense_forward": "dense",
    "softmax_cross_entropy": "loss",
    "adadelta_update": "optim", "adam_update": "optim", "rmsprop_update": "optim", "sgd_update": "optim",
    "maxpool2d_argmax_dtype": "pool", "maxpool2d_backward": "pool", "maxpool2d_forward": "pool",
    "dropout_backward": "dropout", "dropout_forward": "dropout",
}

__all__ = sorted(_MODULES) + ["BLOCK", "isa_info"]


def __getattr__(name):
    if name == "BLOCK":
        importlib.import_module("._jit", __name__)   # settles the vector width, hence the block
        return isa_info()["block"]
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
