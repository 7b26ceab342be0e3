"""Sequential models: build from a per-sample input shape, a layout and a seed; train a step."""

import numpy as np

from kernels import LAYOUTS, aligned_zeros
from kernels.workspace import LINE

from . import checks
from .layers import Activation, Dense, Flatten, Layer, untimed
from .losses import CategoricalCrossentropy

_LINE = LINE // np.dtype(np.float32).itemsize   # floats a cache line


def _one_place_each(layers):
    """ValueError when a layer object stands at two places: it keeps its input and buffers from its
    forward for its backward, which the second place would overwrite (wrong gradients, no error)."""
    places = {}
    for i, layer in enumerate(layers):
        if id(layer) in places:
            raise ValueError(f"the same {layer!r} object is layer {places[id(layer)]} and layer {i}: each place needs a "
                             f"layer object of its own (create another)")
        places[id(layer)] = i


def _sample_shape(shape):
    """The per-sample input shape as a tuple of positive ints, or the one-line error."""
    try:
        dims = tuple(shape)
    except TypeError:
        dims = ()
    if not dims or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ValueError(f"input_shape must be the per-sample shape as positive ints, (C, H, W), (H, W, C) or "
                         f"(features,), got {shape!r}")
    return tuple(int(d) for d in dims)


class Sequential:
    def __init__(self, layers, *, input_shape, layout="NHWC", seed=0):
        """`input_shape` is per sample in `layout` order: (C, H, W), (H, W, C) or (features,)."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be 'NCHW' (channels_first) or 'NHWC' (channels_last), got {layout!r}")
        if not layers:
            raise ValueError("a Sequential model needs at least one layer")
        strays = [layer for layer in layers if not isinstance(layer, Layer)]
        if strays:
            raise TypeError(f"Sequential takes layers (Dense(10), Conv2D(32, 3), ...), got {strays[0]!r}")
        _one_place_each(layers)
        self.layers, self.layout, self.input_shape = list(layers), layout, _sample_shape(input_shape)
        rng = np.random.default_rng(checks.seed("seed", seed))
        shape, row_order = self.input_shape, None
        for layer in self.layers:
            for sub in layer.sublayers():
                sub.layout = layout
            if isinstance(layer, Dense):
                shape = layer.build(shape, layout, rng, row_order=row_order)
            else:
                shape = layer.build(shape, layout, rng)
            # Flatten's order holds for the next Dense through elementwise layers (dropout, activations)
            row_order = layer.canonical_order() if isinstance(layer, Flatten) else row_order if layer.elementwise else None
        self.output_shape = shape
        self.layers[0].input_grad = False
        self._pack()
        self.fused_softmax = self._strip_softmax()
        if not self.layers:
            raise ValueError("a Sequential model needs a layer before its softmax")
        self.loss = CategoricalCrossentropy(from_logits=self.fused_softmax)

    def _pack(self):
        """Move all parameters into one flat buffer and all gradients into another (the layers keep
        views), so the optimizer updates the whole model in one fused call per step. Each starts on
        a cache line, as the kernels' own buffers do (kernels.aligned_zeros); the floats between
        them are zero in both buffers, and the optimizers' updates keep them so."""
        owners = [(layer, name) for layer in self.layers for name in layer.param_names]
        offsets, total = [], 0
        for layer, name in owners:
            offsets.append(total)
            total += -(-getattr(layer, name).size // _LINE) * _LINE
        self.flat_params, self.flat_grads = aligned_zeros((total,)), aligned_zeros((total,))
        for (layer, name), offset in zip(owners, offsets):
            p = getattr(layer, name)
            view = self.flat_params[offset:offset + p.size].reshape(p.shape)
            view[...] = p
            setattr(layer, name, view)
            setattr(layer, "d" + name, self.flat_grads[offset:offset + p.size].reshape(p.shape))

    def _strip_softmax(self):
        """A trailing softmax is fused into the loss (and applied by predict); nowhere else is it valid."""
        def is_softmax(layer):
            return isinstance(layer, Activation) and layer.kind == "softmax"
        for layer in self.layers[:-1]:
            if any(is_softmax(sub) for sub in layer.sublayers()):
                raise ValueError(f"softmax is supported only as the model's last activation, found in {layer!r}")
        last = self.layers[-1]
        if is_softmax(last):
            self.layers.pop()
            return True
        if is_softmax(getattr(last, "activation", None)):
            last.activation = None
            return True
        return False

    def instrument(self, op=untimed):
        """Route every kernel call of every layer through `op(name, layout=...)` (or time nothing)."""
        for layer in self.layers:
            for sub in layer.sublayers():
                sub.instrument(op)

    def _check_input(self, x):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            got = (f"an array of {x.dtype}" if isinstance(x, np.ndarray)
                   else f"a {type(x).__name__} scalar" if np.isscalar(x) else type(x).__name__)
            raise TypeError(f"inputs must be a float32 numpy array, got {got}")
        if x.shape[1:] != self.input_shape:
            raise ValueError(f"inputs have per-sample shape {x.shape[1:]}, but the model was built for "
                             f"{self.input_shape} ({self.layout})")

    def forward(self, x, training=False):
        """Outputs; logits when training a softmax model (the loss applies the softmax)."""
        self._check_input(x)
        for layer in self.layers:
            x = layer.forward(x, training)
        return x

    def train_step(self, x, y):
        """Forward, loss, backward. Returns (loss, number of correct predictions); grads are set."""
        outputs = self.forward(x, training=True)
        with self.layers[-1].timed("softmax_cross_entropy"):
            loss, probs, dy = self.loss(outputs, y)
        correct = int((probs.argmax(axis=1) == y.argmax(axis=1)).sum())
        for layer in reversed(self.layers):
            dy = layer.backward(dy)
        return loss, correct

    def warm_up(self, x, y):
        """One forward (inference mode: no dropout draws) and backward, no update: compiled kernels
        load and buffers are sized, so the objects that creates exist before training starts."""
        outputs = self.forward(x, training=False)
        _, _, dy = self.loss(outputs, y)
        for layer in reversed(self.layers):
            dy = layer.backward(dy)

    def predict(self, x):
        out = np.array(self.forward(x, training=False))
        if self.fused_softmax:
            out -= out.max(axis=1, keepdims=True)
            np.exp(out, out=out)
            out /= out.sum(axis=1, keepdims=True)
        return out
