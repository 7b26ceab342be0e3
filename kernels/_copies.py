"""Flat-array copies compiled into the kernels (conv's layout changes and padding, dense's slabs
and panels): numba helpers, each inlined into its callers; and a prefetch for write."""

from llvmlite import ir
from numba import types, uint64
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._jit import helper


@intrinsic
def prefetch_write(typingctx, a, i):
    """Ask for the cache line holding a[i] for writing (prefetchw: the line is fetched into L1 and
    owned without the core waiting for it). A hint: it never faults, so i may point past `a`."""
    if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
        raise TypingError("prefetch_write needs an array and an integer index")

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        ptr = builder.bitcast(builder.gep(data, [context.cast(builder, args[1], signature.args[1], types.int64)]), i8p)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])   # write, keep, data
        return context.get_dummy_value()
    return types.none(a, i), codegen


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
