"""Flat-array copies compiled into the kernels (conv's layout changes and padding, dense's slabs
and panels): numba helpers, each inlined into its callers."""

from numba import uint64

from ._jit import helper


@helper
def transpose(s, s0, ls, d, d0, ld, rows, cols):
    """d[d0 + j*ld + i] = s[s0 + i*ls + j] for i < rows, j < cols. In 8 x 8 blocks, which LLVM
    turns into vector loads and shuffles: 2-7x faster here than element by element (a layout
    change of cifar10-cnn's 4 MB conv input went from 1.2-4.2 ms to 0.6 ms on one core)."""
    r8, c8 = rows - rows % 8, cols - cols % 8
    for i0 in range(0, r8, 8):
        for j0 in range(0, c8, 8):
            for j in range(8):
                for i in range(8):
                    d[uint64(d0 + (j0 + j) * ld + i0 + i)] = s[uint64(s0 + (i0 + i) * ls + j0 + j)]
    for i in range(rows):   # the ragged edges
        for j in range(c8 if i < r8 else 0, cols):
            d[uint64(d0 + j * ld + i)] = s[uint64(s0 + i * ls + j)]


@helper
def copy(s, s0, d, d0, n):
    """d[d0:d0+n] = s[s0:s0+n] on flat arrays. A loop rather than a slice assignment: numba's
    array-to-array setitem compiles its shape-mismatch message, ~4 s of string code on a cold
    start (half the compile time of a conv in both layouts)."""
    for j in range(n):
        d[uint64(d0 + j)] = s[uint64(s0 + j)]
