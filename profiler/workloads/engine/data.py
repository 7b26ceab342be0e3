"""Mini-batches over numpy arrays: shuffled per epoch from a seed, gathered into reused buffers."""

import numpy as np

from kernels import aligned_empty

from . import checks


class Batches:
    def __init__(self, x, y, batch_size, *, shuffle=True, seed=0):
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
            raise TypeError("inputs and labels must be numpy arrays")
        if len(x) == 0:
            raise ValueError("the data set is empty (0 samples)")
        if len(x) != len(y):
            raise ValueError(f"inputs have {len(x)} samples but labels have {len(y)}")
        if not isinstance(shuffle, (bool, np.bool_)):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}")
        self.x, self.y = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(y, np.float32)
        self.batch_size, self.shuffle = checks.positive_int("batch_size", batch_size), bool(shuffle)
        seed = checks.seed("seed", seed)
        self.seed = np.random.SeedSequence().entropy if seed is None else seed   # None: fresh, then fixed per epoch
        full = (min(self.batch_size, len(self.x)),)   # a batch never holds more than the data
        self._xb = aligned_empty(full + self.x.shape[1:])   # on a cache line, as the kernels' buffers
        self._yb = aligned_empty(full + self.y.shape[1:])

    def __len__(self):
        """Steps per epoch; the last batch may be partial."""
        return -(-len(self.x) // self.batch_size)

    def epoch(self, epoch):
        """Yield (x, y) batches: views that the next batch may overwrite."""
        n, size = len(self.x), self.batch_size
        if not self.shuffle:
            for start in range(0, n, size):
                yield self.x[start:start + size], self.y[start:start + size]
            return
        order = np.random.default_rng([self.seed, epoch]).permutation(n)
        for start in range(0, n, size):
            idx = order[start:start + size]
            xb, yb = self._xb[:len(idx)], self._yb[:len(idx)]
            np.take(self.x, idx, axis=0, out=xb)
            np.take(self.y, idx, axis=0, out=yb)
            yield xb, yb


def load_npz(path, x_key="x", y_key="y"):
    """(x, y) from an .npz file, with a clear error when a key is missing."""
    with np.load(path) as data:
        missing = [k for k in (x_key, y_key) if k not in data]
        if missing:
            raise KeyError(f"{path} has no array {missing[0]!r}; it holds {sorted(data.files)}")
        return data[x_key], data[y_key]
