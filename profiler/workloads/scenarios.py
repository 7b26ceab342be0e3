"""The built-in workloads: the two bug reports' models, on data generated here (no downloads).

mlp          the Axon report: 9000x2 inputs iota/9000 - 0.5 shuffled, 2 one-hot classes,
             batch 250 (36 steps/epoch), Dense(100, sigmoid) -> Dense(2, softmax), Adam.
             labels="random" is the report's data (nothing to learn); "learnable" makes accuracy mean
             something (class = x0 + x1 > 1).
mnist-cnn    Keras' mnist_cnn, Adadelta, batch 128, 28x28x1.
cifar10-cnn  Keras' cifar10_cnn, RMSprop(1e-4), batch 32, 32x32x3.
Image data: one smooth random template per class plus noise, so a CNN learns it in a few epochs.
"""

from dataclasses import dataclass

import numpy as np

from .names import SCENARIO_NAMES
from .engine import Batches, Conv2D, Dense, Dropout, Flatten, MaxPool2D, Sequential, optimizers


@dataclass
class Scenario:
    model: Sequential
    data: Batches
    optimizer: object
    x: np.ndarray
    y: np.ndarray


def one_hot(labels, classes):
    return np.eye(classes, dtype=np.float32)[labels]


def mlp_data(samples=9000, labels="random", seed=0):
    rng = np.random.default_rng(seed)
    x = (np.arange(samples * 2, dtype=np.float32).reshape(samples, 2) / samples - 0.5)
    x = x[rng.permutation(samples)]
    if labels == "random":
        classes = rng.integers(0, 2, samples)
    elif labels == "learnable":
        classes = (x.sum(axis=1) > 1.0).astype(int)
    else:
        raise ValueError(f"labels must be 'random' or 'learnable', got {labels!r}")
    return x, one_hot(classes, 2)


def image_data(samples, channels, size, classes=10, layout="NHWC", seed=0, noise=0.6):
    """Learnable images: a smooth random template per class, scaled, shifted by a pixel, plus noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((classes, channels, size // 4 + 1, size // 4 + 1))
    templates = coarse.repeat(4, axis=2).repeat(4, axis=3)[:, :, :size, :size]
    labels = rng.integers(0, classes, samples)
    shift = rng.integers(-1, 2, (samples, 2))
    x = np.empty((samples, channels, size, size), np.float32)
    for i, (c, (dy, dx)) in enumerate(zip(labels, shift)):
        x[i] = np.roll(templates[c], (dy, dx), axis=(1, 2))
    x *= rng.uniform(0.7, 1.3, (samples, 1, 1, 1)).astype(np.float32)
    x += noise * rng.standard_normal(x.shape).astype(np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return x, one_hot(labels, classes)


def mlp(*, layout="NHWC", samples=9000, labels="random", seed=0, batch_size=250, **_):
    x, y = mlp_data(samples, labels, seed)
    model = Sequential([Dense(100, activation="sigmoid"), Dense(2, activation="softmax")],
                       input_shape=(2,), layout=layout, seed=seed)
    return Scenario(model, Batches(x, y, batch_size, seed=seed), optimizers.Adam(), x, y)


def _image_shape(layout, channels, size):
    return (channels, size, size) if layout == "NCHW" else (size, size, channels)


def mnist_cnn(*, layout="NHWC", samples=1024, seed=0, batch_size=128, dropout=True, **_):
    x, y = image_data(samples, 1, 28, layout=layout, seed=seed)
    d = 1.0 if dropout else 0.0
    model = Sequential([
        Conv2D(32, 3, activation="relu"), Conv2D(64, 3, activation="relu"), MaxPool2D(2), Dropout(0.25 * d),
        Flatten(), Dense(128, activation="relu"), Dropout(0.5 * d), Dense(10, activation="softmax"),
    ], input_shape=_image_shape(layout, 1, 28), layout=layout, seed=seed)
    return Scenario(model, Batches(x, y, batch_size, seed=seed), optimizers.Adadelta(), x, y)


def cifar10_cnn(*, layout="NHWC", samples=1024, seed=0, batch_size=32, dropout=True, **_):
    x, y = image_data(samples, 3, 32, layout=layout, seed=seed)
    d = 1.0 if dropout else 0.0
    model = Sequential([
        Conv2D(32, 3, padding="same", activation="relu"), Conv2D(32, 3, activation="relu"),
        MaxPool2D(2), Dropout(0.25 * d),
        Conv2D(64, 3, padding="same", activation="relu"), Conv2D(64, 3, activation="relu"),
        MaxPool2D(2), Dropout(0.25 * d),
        Flatten(), Dense(512, activation="relu"), Dropout(0.5 * d), Dense(10, activation="softmax"),
    ], input_shape=_image_shape(layout, 3, 32), layout=layout, seed=seed)
    return Scenario(model, Batches(x, y, batch_size, seed=seed), optimizers.RMSprop(lr=1e-4), x, y)


SCENARIOS = dict(zip(SCENARIO_NAMES, (mlp, mnist_cnn, cifar10_cnn)))


def build(name, **options):
    """A fresh Scenario by name; options: layout, samples, seed, batch_size, labels (mlp), dropout."""
    try:
        factory = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}") from None
    return factory(**options)
