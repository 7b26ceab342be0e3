"""Flat-array copies compiled into the kernels (conv's layout changes and padding, dense's slabs
and panels): numba helpers, each inlined into its callers; the transposes' 8 x 8 register
blocks (_transpose_8, vector IR) and the copies' vector runs (_copy_run); and a prefetch for
write."""

from llvmlite import ir
from numba import types, uint64
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._jit import helper
from ._tile import operands, transposed, vector_at


@intrinsic
def prefetch_write(typingctx, a, i):
    """Ask for the cache line holding a[i] for writing (prefetchw: the line is fetched into L1 and
    owned without the core waiting for it). A hint: it never faults, so i may point past `a`."""
    if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
        raise TypingError("prefetch_write needs an array and an integer index")

    def codegen(context, builder, signature, args):
        (data,), (i_,) = operands(context, builder, signature, args, (0,), (1,))
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        ptr = builder.bitcast(builder.gep(data, [i_]), i8p)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])   # write, keep, data
        return context.get_dummy_value()
    return types.none(a, i), codegen


def _flat_f32(*arrays):
    """Whether each is a contiguous 1-d float32 array: the vector runs are float vectors at
    element offsets."""
    return all(isinstance(a, types.Array) and a.dtype == types.float32 and a.ndim == 1 and a.layout == "C"
               for a in arrays)


@intrinsic
def _transpose_8(typingctx, s, s0, ls, d, d0, ld):
    """d[d0 + j*ld + i] = s[s0 + i*ls + j] for i, j < 8: eight 8-float loads, transposed in
    registers (_tile.transposed), eight 8-float stores. As a loop of scalars LLVM's SLP
    vectorizer made it 1.8-4.2x slower (conv inputs of 15- to 32-pixel rows, AVX-512)."""
    if not _flat_f32(s, d):
        raise TypingError("_transpose_8 needs two contiguous flat float32 arrays")

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        run = ir.VectorType(ir.FloatType(), TRANSPOSE_BLOCK)
        (sdata, ddata), (s0_, ls_, d0_, ld_) = operands(context, builder, signature, args, (0, 3), (1, 2, 4, 5))

        def at(data, start, k, stride):   # the run k strides past start
            return vector_at(builder, data, builder.add(start, builder.mul(ir.Constant(i64, k), stride)), run)

        rows = [builder.load(at(sdata, s0_, i, ls_), align=4) for i in range(TRANSPOSE_BLOCK)]
        for j, value in transposed(builder, rows, TRANSPOSE_BLOCK, TRANSPOSE_BLOCK):
            builder.store(value, at(ddata, d0_, j, ld_), align=4)
        return context.get_dummy_value()
    return types.none(s, s0, ls, d, d0, ld), codegen


TRANSPOSE_BLOCK = 8   # the transposes' register block: 8 x 8 floats


@helper
def transpose(s, s0, ls, d, d0, ld, rows, cols):
    """d[d0 + j*ld + i] = s[s0 + i*ls + j] for i < rows, j < cols (s and d apart). In 8 x 8 blocks
    (_transpose_8), a row's last block overlapping the one before when cols is no multiple of 8
    (it writes those floats again, alike); rows past the last multiple of 8, and all of them when
    cols < 8, element by element."""
    r8 = rows - rows % TRANSPOSE_BLOCK if cols >= TRANSPOSE_BLOCK else 0
    for i0 in range(0, r8, TRANSPOSE_BLOCK):
        for j0 in range(0, cols, TRANSPOSE_BLOCK):
            j = min(j0, cols - TRANSPOSE_BLOCK)
            _transpose_8(s, uint64(s0 + i0 * ls + j), ls, d, uint64(d0 + j * ld + i0), ld)
    for i in range(r8, rows):   # the ragged rows
        for j in range(cols):
            d[uint64(d0 + j * ld + i)] = s[uint64(s0 + i * ls + j)]


@helper
def copy(s, s0, d, d0, n):
    """d[d0:d0+n] = s[s0:s0+n] on flat arrays (s and d apart), in runs of _RUN floats, one vector
    load and store each (_copy_run), the last run overlapping the one before; under _RUN floats
    one by one. LLVM's own loop takes 64 floats a step and copies a shorter run one float at a
    time; with these runs the 'valid' first layers' NCHW forwards, whose shifted planes are
    copied in rows of 6-30 floats, took 0.88-0.94x the time (docs/performance.md, session 28).
    A loop rather than a slice assignment: numba's array-to-array setitem compiles its
    shape-mismatch message, ~4 s of string code on a cold start (half the compile time of a conv
    in both layouts)."""
    if n < _RUN:
        for j in range(n):
            d[uint64(d0 + j)] = s[uint64(s0 + j)]
        return
    for j0 in range(0, n, _RUN):
        j = min(j0, n - _RUN)
        _copy_run(s, uint64(s0 + j), d, uint64(d0 + j))


_RUN = 16   # floats a run: one zmm, two ymm


@intrinsic
def _copy_run(typingctx, s, s0, d, d0):
    """d[d0:d0+_RUN] = s[s0:s0+_RUN]: one vector load and store (a loop of _RUN scalars stays
    scalar: LLVM cannot tell s and d apart)."""
    if not _flat_f32(s, d):
        raise TypingError("_copy_run needs two contiguous flat float32 arrays")

    def codegen(context, builder, signature, args):
        run = ir.VectorType(ir.FloatType(), _RUN)
        (sdata, ddata), (s0_, d0_) = operands(context, builder, signature, args, (0, 2), (1, 3))
        builder.store(builder.load(vector_at(builder, sdata, s0_, run), align=4), vector_at(builder, ddata, d0_, run),
                      align=4)
        return context.get_dummy_value()
    return types.none(s, s0, d, d0), codegen
