"""Layers: each owns its parameters, gradients and buffers, and calls one kernel per op.

A layer records every kernel call in `self.timed(name)`: a timer resolved once from the op factory
the model sets (`op(name, layout=...)`: a profiling Session's op timer, or a shared no-op) and then
reused, so timing costs two clock reads per call, not a lookup by name. Buffers come
from a per-layer Workspace, so after the first step of a given batch size nothing is allocated.
Shapes are per sample (no batch axis) and in the model's layout.
"""

import contextlib

import numpy as np

import kernels as K

from .checks import fraction, positive_int


_UNTIMED = contextlib.nullcontext()


def untimed(name, **tags):
    return _UNTIMED


def glorot_uniform(rng, shape, fan_in, fan_out):
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


class Layer:
    param_names = ()  # attributes holding parameters; the gradient of `w` is `dw`
    input_grad = True  # cleared by the model on its first layer (nobody reads that gradient; Conv2D skips it)
    elementwise = False  # each output element is a function of the input element at its index alone

    def __init__(self):
        self.layout = "NHWC"
        self.instrument(untimed)
        self.ws = K.Workspace()

    def build(self, in_shape, layout, rng):
        """Check the per-sample input shape, create parameters, return the output shape.
        (The model has set self.layout before it calls build.)"""
        return in_shape

    def instrument(self, op):
        self.op, self._timers = op, {}

    def timed(self, name):
        timer = self._timers.get(name)
        if timer is None:
            timer = self._timers[name] = self.op(name, layout=self.layout)
        return timer

    def sublayers(self):
        activation = getattr(self, "activation", None)
        return (self, activation) if activation else (self,)

    def __repr__(self):
        return type(self).__name__


class Activation(Layer):
    kinds = {"relu": (K.relu_forward, K.relu_backward), "sigmoid": (K.sigmoid_forward, K.sigmoid_backward)}
    elementwise = True   # softmax too: it is only ever the last layer

    def __init__(self, kind, in_place=False):
        """relu or sigmoid; softmax only as a model's last activation, where the loss fuses it.
        `in_place`: the forward overwrites its input and the backward its dy (for a layer's own
        activation, whose input is that layer's output buffer): two 4 MB passes of cifar10-cnn's
        first layers instead of three."""
        super().__init__()
        if kind not in self.kinds and kind != "softmax":
            raise ValueError(f"unknown activation {kind!r}; choose one of relu, sigmoid, softmax")
        self.kind, self.in_place = kind, in_place
        self.forward_op, self.backward_op = f"{kind}_forward", f"{kind}_backward"

    def forward(self, x, training):
        with self.timed(self.forward_op):
            out = x if self.in_place else self.ws.take("y", x.shape)
            self.y = self.kinds[self.kind][0](x, out=out)
        return self.y

    def backward(self, dy):
        with self.timed(self.backward_op):
            out = dy if self.in_place else self.ws.take("dx", dy.shape)
            return self.kinds[self.kind][1](self.y, dy, out=out)

    def __repr__(self):
        return f"Activation({self.kind!r})"


def ReLU():
    return Activation("relu")


def Sigmoid():
    return Activation("sigmoid")


def Softmax():
    return Activation("softmax")


class Dense(Layer):
    param_names = ("w", "b")

    def __init__(self, units, activation=None):
        super().__init__()
        self.units = positive_int("Dense units", units)
        self.activation = Activation(activation, in_place=True) if activation else None

    def build(self, in_shape, layout, rng, row_order=None):
        if len(in_shape) != 1:
            raise ValueError(f"Dense expects flat (features,) inputs, got per-sample shape {in_shape}; "
                             f"add a Flatten layer before it")
        fan_in = in_shape[0]
        w = glorot_uniform(rng, (fan_in, self.units), fan_in, self.units)
        self.w = np.ascontiguousarray(w[row_order]) if row_order is not None else w
        self.b = np.zeros(self.units, np.float32)
        self.dw, self.db = np.zeros_like(self.w), np.zeros_like(self.b)
        return (self.units,)

    def forward(self, x, training):
        self.x = x
        with self.timed("dense_forward"):
            y = K.dense_forward(x, self.w, self.b, out=self.ws.take("y", (x.shape[0], self.units)), workspace=self.ws)
        return self.activation.forward(y, training) if self.activation else y

    def backward(self, dy):
        if self.activation:
            dy = self.activation.backward(dy)
        with self.timed("dense_backward"):
            dx = self.ws.take("dx", self.x.shape)
            K.dense_backward(self.x, self.w, dy, out=(dx, self.dw, self.db), workspace=self.ws)
        return dx

    def __repr__(self):
        return f"Dense({self.units}{', ' + self.activation.kind if self.activation else ''})"


class Conv2D(Layer):
    """conv2d, then the bias as a separate broadcast_add (as Keras-MXNet did), then the activation."""

    param_names = ("w", "b")

    def __init__(self, filters, kernel_size, *, padding="valid", stride=1, activation=None):
        super().__init__()
        self.filters = positive_int("Conv2D filters", filters)
        size = (kernel_size, kernel_size) if np.isscalar(kernel_size) else kernel_size
        if not isinstance(size, (tuple, list, np.ndarray)) or len(size) != 2:
            raise ValueError(f"Conv2D kernel_size must be an int or (height, width), got {kernel_size!r}")
        self.kernel_size = tuple(positive_int("Conv2D kernel_size", k) for k in size)
        self.padding, self.stride = padding, positive_int("Conv2D stride", stride)
        self.activation = Activation(activation, in_place=True) if activation else None

    def build(self, in_shape, layout, rng):
        if len(in_shape) != 3:
            raise ValueError(f"Conv2D expects (C, H, W) or (H, W, C) samples, got per-sample shape {in_shape}")
        kh, kw = self.kernel_size
        cin = in_shape[0] if layout == "NCHW" else in_shape[2]
        self.w = glorot_uniform(rng, (kh, kw, cin, self.filters), kh * kw * cin, kh * kw * self.filters)
        self.b = np.zeros(self.filters, np.float32)
        self.dw, self.db = np.zeros_like(self.w), np.zeros_like(self.b)
        self.out_shape = K.conv2d_output_shape((1,) + tuple(in_shape), self.w.shape, layout=layout,
                                               stride=self.stride, padding=self.padding)[1:]
        return self.out_shape

    def _conv_args(self):
        return dict(layout=self.layout, stride=self.stride, padding=self.padding, workspace=self.ws)

    def forward(self, x, training):
        self.x = x
        with self.timed("conv2d_forward"):
            y = K.conv2d_forward(x, self.w, out=self.ws.take("y", (x.shape[0],) + self.out_shape),
                                 **self._conv_args())
        with self.timed("broadcast_add_forward"):
            K.broadcast_add_forward(y, self.b, layout=self.layout, out=y)
        return self.activation.forward(y, training) if self.activation else y

    def backward(self, dy):
        if self.activation:
            dy = self.activation.backward(dy)
        with self.timed("broadcast_add_backward"):
            K.broadcast_add_backward(dy, layout=self.layout, out=self.db)
        with self.timed("conv2d_backward"):
            dx = self.ws.take("dx", self.x.shape) if self.input_grad else None
            K.conv2d_backward(self.x, self.w, dy, out=(dx, self.dw), need_dx=self.input_grad, **self._conv_args())
        return dx

    def __repr__(self):
        return f"Conv2D({self.filters}, {self.kernel_size}, {self.padding})"


class MaxPool2D(Layer):
    def __init__(self, size=2):
        super().__init__()
        self.size = positive_int("MaxPool2D size", size)

    def build(self, in_shape, layout, rng):
        if len(in_shape) != 3:
            raise ValueError(f"MaxPool2D expects image samples, got per-sample shape {in_shape}")
        c, h, w = in_shape if layout == "NCHW" else (in_shape[2], in_shape[0], in_shape[1])
        if h < self.size or w < self.size:
            raise ValueError(f"MaxPool2D({self.size}) on {h}x{w} images: the window is larger than the image")
        oh, ow = h // self.size, w // self.size
        self.out_shape = (c, oh, ow) if layout == "NCHW" else (oh, ow, c)
        return self.out_shape

    def forward(self, x, training):
        self.x_shape = x.shape
        n = x.shape[0]
        with self.timed("maxpool2d_forward"):
            y, self.arg = K.maxpool2d_forward(x, layout=self.layout, size=self.size,
                                              out=self.ws.take("y", (n,) + self.out_shape),
                                              argmax_out=self.ws.take("argmax", (n,) + self.out_shape,
                                                                      K.maxpool2d_argmax_dtype(self.size)))
        return y

    def backward(self, dy):
        with self.timed("maxpool2d_backward"):
            return K.maxpool2d_backward(dy, self.arg, self.x_shape, layout=self.layout, size=self.size,
                                        out=self.ws.take("dx", self.x_shape))


class Flatten(Layer):
    """A free reshape in both layouts. The next Dense layer's rows are stored in this layout's
    order (Sequential, through elementwise layers between), so NCHW and NHWC models compute the
    same function."""

    def forward(self, x, training):
        self.x_shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy):
        return dy.reshape(self.x_shape)

    def build(self, in_shape, layout, rng):
        self.in_shape = tuple(in_shape)
        return (int(np.prod(in_shape)),)

    def canonical_order(self):
        """For each flat position in this layout, the (C, H, W)-order feature it holds."""
        if self.layout == "NCHW" or len(self.in_shape) != 3:
            return None
        h, w, c = self.in_shape
        return np.arange(h * w * c).reshape(c, h, w).transpose(1, 2, 0).ravel()


class Dropout(Layer):
    """Inverted dropout. Each training forward draws a 64-bit seed from the layer's generator; the
    mask is a function of that seed and the element's index (kernels.dropout), so the backward
    computes it again rather than keeping it."""

    elementwise = True

    def __init__(self, rate):
        super().__init__()
        self.rate = fraction("Dropout rate", rate)

    def build(self, in_shape, layout, rng):
        self.rng = np.random.default_rng(rng.integers(2**63))
        return in_shape

    def forward(self, x, training):
        self.active = training and self.rate > 0
        if not self.active:
            return x
        with self.timed("dropout_forward"):
            self.seed = int(self.rng.bit_generator.random_raw())
            return K.dropout_forward(x, rate=self.rate, seed=self.seed, out=self.ws.take("y", x.shape))

    def backward(self, dy):
        if not self.active:
            return dy
        with self.timed("dropout_backward"):
            return K.dropout_backward(dy, rate=self.rate, seed=self.seed, out=self.ws.take("dx", dy.shape))

    def __repr__(self):
        return f"Dropout({self.rate})"
