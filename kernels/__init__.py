"""numba kernels for a small CNN, float32, in NCHW (channels_first) and NHWC (channels_last).

Pure functions on numpy arrays; they know nothing of the engine or the profiler. Every kernel
checks its arguments before any compiled code runs (see _checks for the dtype policy) and takes
optional `out=` buffers so a training step need not allocate.
"""

from ._checks import LAYOUTS
from .activations import relu_backward, relu_forward, sigmoid_backward, sigmoid_forward
from .bias import broadcast_add_backward, broadcast_add_forward
from .conv import conv2d_backward, conv2d_forward, conv2d_output_shape
from .workspace import Workspace
from .dense import dense_backward, dense_forward
from .loss import softmax_cross_entropy
from .optim import adadelta_update, adam_update, rmsprop_update, sgd_update
from .pool import maxpool2d_backward, maxpool2d_forward

__all__ = [
    "LAYOUTS", "Workspace",
    "broadcast_add_backward", "broadcast_add_forward",
    "conv2d_backward", "conv2d_forward", "conv2d_output_shape",
    "dense_backward", "dense_forward",
    "maxpool2d_backward", "maxpool2d_forward",
    "relu_backward", "relu_forward", "sigmoid_backward", "sigmoid_forward",
    "softmax_cross_entropy",
    "adadelta_update", "adam_update", "rmsprop_update", "sgd_update",
]
