"""The one arithmetic micro-kernel of conv2d and dense: a P x J block of a matrix product held in
registers while it accumulates over a strided reduction, and the block shapes it is built for.

P x J = 6 x 16 float32 is twelve 8-wide AVX2 accumulators, the classic Haswell-class sgemm block
(16 vector registers: 12 accumulators, 2 for the B row, 1 for the broadcast A element); on
AVX-512 the default is 8 x 32, sixteen of the 32 zmm registers (kernels/_isa.py). Each reduction
step is P broadcasts and P J-wide FMAs on one J-wide load of B, written as vector IR (_fma_rows)
and compiled to exactly that (vbroadcastss + J/8 or J/16 vmovups + P*J/8 or P*J/16 vfmadd231ps).
LLVM's own vectorisers made that code only for 6 x 16 on AVX2 (with the SLP vectorizer on): other
shapes, and every 32-lane block on AVX-512, came out vectorised across the rows, with gathers and
scatters on the accumulator (30-50x slower). The accumulator lives in a stack alloca, touched at
fixed offsets only, which LLVM keeps in registers from the block's zeroing to its stores (a numpy
array is a heap object it cannot; _copy_block says why fixed offsets).
`tile` is a function of its own for numba, which LLVM inlines into each caller (_inlined): inlined
at numba's IR level instead, the serial kernels came out scalar, 10x slower.

The shape is a compile-time constant of every loop nest that uses it: such nests are `tiled`
(compiled per Block on first use, `_kernel[block](size, ...)`), and the Python side reads the
shape from the Block it was given. Any shape gives the same results; tests run several.
"""


import contextlib

from llvmlite import ir
from numba import prange, types, uint64
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from . import _isa
from ._jit import Kernel, helper


# The block shape and its tile, as tiled loop nests see them: each Block compiles them with its own
# values in place of these (Tiled below), so a nest never runs with the placeholders.
P = J = PJ = tile = None


@intrinsic
def _block(typingctx, size):
    """A `size`-float float32 accumulator on the stack, zeroed: LLVM keeps it in registers over the
    reduction loops (a heap array it cannot)."""
    if not isinstance(size, types.IntegerLiteral):
        raise TypingError("_block needs a constant size")
    n = size.literal_value

    def codegen(context, builder, signature, args):
        acc = cgutils.alloca_once(builder, context.get_value_type(types.float32), size=n)
        acc.align = 64
        cgutils.memset(builder, acc, context.get_constant(types.intp, 4 * n), 0)
        return acc
    return types.CPointer(types.float32)(size), codegen


def _runs(j_):
    """(w, offsets): a row of J lanes as runs of w lanes, w a power of two: J itself where it is
    one, else the largest power of two up to 16 that divides J (J is a multiple of 8). LLVM
    compiled J-wide vectors of other widths into slow code: cifar conv3's forward, 1 thread,
    AVX-512, took 9.5-49 ms with blocks 3 x 24, 4 x 24, 4 x 40, 7 x 40 and 4 x 48, and 2.2-3.4 ms
    as runs. Runs of 16 with a last one of 8 (fewer accumulators: 7 x 40 needs 35 ymm as runs of 8)
    took 0.77-1.34x the time of these on the 24- and 40-lane blocks (docs/performance.md,
    session 24)."""
    w = j_ if j_ & (j_ - 1) == 0 else min(16, j_ & -j_)
    return w, range(0, j_, w)


def vector_at(builder, data, offset, vec):
    """A pointer to the vector type `vec` at data[offset] (LLVM IR; offset an i64 value or an int)."""
    if isinstance(offset, int):
        offset = ir.Constant(ir.IntType(64), offset)
    return builder.bitcast(builder.gep(data, [offset]), vec.as_pointer())


def operands(context, builder, signature, args, arrays, offsets):
    """(data pointers, i64 values) of an intrinsic's array arguments and integer arguments at
    those positions (LLVM IR)."""
    return ([context.make_array(signature.args[k])(context, builder, args[k]).data for k in arrays],
            [context.cast(builder, args[k], signature.args[k], types.int64) for k in offsets])


def _is_row_step(t):
    """Whether a row step's type is an integer s or a (s, col0, width, jump) tuple of them."""
    return isinstance(t, types.Integer) or (isinstance(t, types.BaseTuple) and len(t) == 4
                                            and all(isinstance(e, types.Integer) for e in t))


def _row_offsets(context, builder, step_type, step):
    """p (an i64 value) -> the offset of row p for a row step: p*s for an integer s; for
    (s, col0, width, jump), rows at positions col0, col0 + 1, ... of lines `width` long, p*s plus
    `jump` once past the line's end (at most one line end per block). Each row's offset is
    computed apart, not as a chain through the rows (which a block's first loads would wait on)."""
    i64 = ir.IntType(64)
    if isinstance(step_type, types.Integer):
        s = context.cast(builder, step, step_type, types.int64)
        return lambda p: builder.mul(p, s)
    s, col, width, jump = [context.cast(builder, builder.extract_value(step, i), step_type[i], types.int64)
                           for i in range(4)]

    def at(p):
        end = builder.icmp_signed(">=", builder.add(col, p), width)
        return builder.add(builder.mul(p, s), builder.select(end, jump, ir.Constant(i64, 0)))
    return at


@intrinsic
def _row_at(typingctx, step, p):
    """The offset of row p for a row step (_row_offsets), in numba code."""
    if not (_is_row_step(step) and isinstance(p, types.Integer)):
        raise TypingError("_row_at needs a row step and an integer")

    def codegen(context, builder, signature, args):
        return _row_offsets(context, builder, signature.args[0], args[0])(
            context.cast(builder, args[1], signature.args[1], types.int64))
    return types.int64(step, p), codegen


@intrinsic
def _unit_rows(typingctx, step):
    """Whether a row step puts the rows one float apart: an integer 1 (lines never do here)."""
    if not _is_row_step(step):
        raise TypingError("_unit_rows needs a row step")

    def codegen(context, builder, signature, args):
        if isinstance(signature.args[0], types.BaseTuple):
            return ir.Constant(ir.IntType(1), 0)
        return builder.icmp_signed("==", context.cast(builder, args[0], signature.args[0], types.int64),
                                   ir.Constant(ir.IntType(64), 1))
    return types.boolean(step), codegen


@intrinsic
def _fma_rows(typingctx, acc, a, ao, sap, pn, b, bo, rows, lanes):
    """acc[p*J:(p+1)*J] += a[ao + row(min(p, pn-1))] * b[bo:bo+J] for p < P, written as P
    broadcasts and P*J/w vector FMAs w lanes wide on J/w loads of b (_runs: w = J when J is a power
    of two). row(p) = p*sap for an integer sap, or with sap = (s, col0, width, jump) positions
    col0, col0 + 1, ... of lines `width` long (_row_offsets; col0 + pn <= 2*width): a block of
    output pixels running on from one image row to the next, with no rows left idle at the end of
    a line. Emitted as vector IR rather than left to LLVM's vectorisers: on AVX-512 they vectorised
    blocks of 32 lanes across the rows instead, with gathers and scatters on the accumulator
    (30-50x slower).

    Each row's start, a + row(min(p, pn-1)), passes through an empty inline asm that LLVM cannot
    see through (readnone, so it is hoisted out of the reduction loop): the rows are then P scalar
    pointers. Without it the SLP vectorizer sometimes kept the P row addresses as one vector of
    indices, added to at every step and taken apart lane by lane (vmovq, vpextrq, vextracti32x4:
    ~15 extra uops per step on the ports the FMAs use), and the blocks ran at half speed (conv's
    weight grad on AVX-512, 8 x 32: 1.8-2x slower on cifar10-cnn's and mnist-cnn's layers)."""
    if not (isinstance(rows, types.IntegerLiteral) and isinstance(lanes, types.IntegerLiteral)):
        raise TypingError("_fma_rows needs constant rows and lanes")
    if not _is_row_step(sap):
        raise TypingError("_fma_rows needs sap as an integer or (s, col0, width, jump)")
    p_, j_ = rows.literal_value, lanes.literal_value

    def codegen(context, builder, signature, args):
        accp, sapv = args[0], args[3]
        i64, f32 = ir.IntType(64), ir.FloatType()
        w, offsets = _runs(j_)
        vec = ir.VectorType(f32, w)
        (adata, bdata), (ao64, pn64, bo64) = operands(context, builder, signature, args, (1, 5), (2, 4, 6))
        row_at = _row_offsets(context, builder, signature.args[3], sapv)
        brows = [builder.load(vector_at(builder, bdata, builder.add(bo64, ir.Constant(i64, o)), vec), align=4)
                 for o in offsets]
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{w}f32")
        last = builder.sub(pn64, ir.Constant(i64, 1))
        zero_mask = ir.Constant(ir.VectorType(ir.IntType(32), w), [0] * w)
        opaque = ir.FunctionType(adata.type, [adata.type])   # the row barrier (see above)
        for p in range(p_):
            pc = ir.Constant(i64, p)
            pm = builder.select(builder.icmp_signed("<", pc, pn64), pc, last)
            row = builder.asm(opaque, "", "=r,0", [builder.gep(adata, [row_at(pm)])], False)
            row.attributes.add("readnone")
            aval = builder.load(builder.gep(row, [ao64]), align=4)
            splat = builder.shuffle_vector(builder.insert_element(ir.Constant(vec, ir.Undefined), aval,
                                                                  ir.Constant(ir.IntType(32), 0)),
                                           ir.Constant(vec, ir.Undefined), zero_mask)
            for o, brow in zip(offsets, brows):
                slot = vector_at(builder, accp, p * j_ + o, vec)
                builder.store(builder.call(fma, [splat, brow, builder.load(slot, align=4)]), slot, align=4)
        return context.get_dummy_value()
    return types.none(acc, a, ao, sap, pn, b, bo, rows, lanes), codegen


@intrinsic
def _store_rows(typingctx, acc, out, o0, sop, pn, accumulate, rows, lanes):
    """out[o0 + row(p) : +J] (+)= acc[p*J : (p+1)*J] for p < pn, each row stored as _fma_rows loads
    b, in runs of w lanes (_runs: one J-wide vector when J is a power of two; with J-wide stores
    of 24 and 48 lanes mnist conv1's NCHW forward took 2.2-3.1x NHWC's time on emulated AVX2, as
    runs 1.05-1.55x: session 27), row(p) as _fma_rows' (sop an integer, or lines). As a loop, LLVM
    made each row's store a call to memcpy (the length being a variable), which cost more than the
    arithmetic on short reductions (mnist conv1's 9-step blocks). `accumulate` picks one of two
    sequences of stores, so a block that only stores never loads its outputs (a select between
    the sum and the block loaded them whenever `accumulate` was not a constant)."""
    if not (isinstance(rows, types.IntegerLiteral) and isinstance(lanes, types.IntegerLiteral)
            and _is_row_step(sop)):
        raise TypingError("_store_rows needs a row step and constant rows and lanes")
    p_, j_ = rows.literal_value, lanes.literal_value

    def codegen(context, builder, signature, args):
        accp, sopv, accum = args[0], args[3], args[5]
        i64 = ir.IntType(64)
        w, offsets = _runs(j_)
        vec = ir.VectorType(ir.FloatType(), w)
        (odata,), (o0_, pn_) = operands(context, builder, signature, args, (1,), (2, 4))
        row_at = _row_offsets(context, builder, signature.args[3], sopv)

        def stores(add):
            for p in range(p_):
                pc = ir.Constant(i64, p)
                with builder.if_then(builder.icmp_signed("<", pc, pn_)):
                    row = builder.add(o0_, row_at(pc))
                    for o in offsets:
                        value = builder.load(vector_at(builder, accp, p * j_ + o, vec), align=4)
                        optr = vector_at(builder, odata, builder.add(row, ir.Constant(i64, o)), vec)
                        builder.store(builder.fadd(builder.load(optr, align=4), value) if add else value, optr, align=4)
        with builder.if_else(context.cast(builder, accum, signature.args[5], types.boolean)) as (adding, storing):
            with adding:
                stores(True)
            with storing:
                stores(False)
        return context.get_dummy_value()
    return types.none(acc, out, o0, sop, pn, accumulate, rows, lanes), codegen


@intrinsic
def _inlined(typingctx):
    """Marks the function it is called in `alwaysinline` for LLVM: the block function is then
    compiled into each loop nest that calls it, after numba has typed and lowered both (numba's own
    inlining, of the untyped IR, makes the serial kernels scalar, 10x slower). A call passes ~48
    arguments a block (three arrays' fields, the offsets and strides), mostly through the stack,
    and recomputes the P row pointers: on the first layers' 9- and 27-step reductions that is a
    large part of a block (docs/performance.md)."""
    def codegen(context, builder, signature, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def _copy_block(typingctx, acc, dst, rows, lanes):
    """dst[:P*J] = acc[:P*J], vector moves at fixed offsets (in _runs' runs). acc is touched only at
    fixed offsets (here, _block, _fma_rows, _store_rows, _store_cols), so LLVM keeps it in
    registers from the block's start to its stores: a loop indexing it (zeroing it, or the partial
    blocks' element stores) makes LLVM store the whole block to the stack after every reduction
    (16 zmm stores on AVX-512's 8 x 32)."""
    if not (isinstance(rows, types.IntegerLiteral) and isinstance(lanes, types.IntegerLiteral)):
        raise TypingError("_copy_block needs constant rows and lanes")
    p_, j_ = rows.literal_value, lanes.literal_value

    def codegen(context, builder, signature, args):
        src, dst = args[:2]
        w, offsets = _runs(j_)
        vec = ir.VectorType(ir.FloatType(), w)
        for p in range(p_):
            for o in offsets:
                value = builder.load(vector_at(builder, src, p * j_ + o, vec), align=4)
                builder.store(value, vector_at(builder, dst, p * j_ + o, vec), align=4)
        return context.get_dummy_value()
    return types.none(acc, dst, rows, lanes), codegen


def _transpose_plan(rows, lanes):
    """How `transposed` turns `rows` vectors of `lanes` floats into runs of `rows` floats, one per
    lane: the rows padded to a power of two R (and the lanes to a multiple of R), then log2(R)
    rounds of interleaving pairs of vectors, 1, 2, 4, ... floats at a time (the steps of an
    in-register transpose). Returns (rounds, runs): each round a list of (first, second, mask)
    shuffles, the vectors numbered as they are made (the rows first); runs as (vector, offset, lane)
    for each lane's run of R floats, rows past `rows` in its last places."""
    r = 1 << max(0, (rows - 1).bit_length())
    width = -(-lanes // r) * r
    labels = [[(p, j) for j in range(width)] for p in range(r)]
    live, rounds = list(range(r)), []
    g = 1
    while g < r:
        def key(v):   # (first row of its runs of g rows, the lane of each run)
            return labels[v][0][0], [labels[v][t][1] for t in range(0, width, g)]
        shuffles, nxt = [], []
        for a in live:
            first, lanes_a = key(a)
            if first % (2 * g):
                continue
            b = next(v for v in live if key(v) == (first + g, lanes_a))
            merged = [m for t in range(0, width, g)
                      for m in list(range(t, t + g)) + list(range(width + t, width + t + g))]
            for half in (merged[:width], merged[width:]):
                shuffles.append((a, b, half))
                labels.append([(labels[a] + labels[b])[m] for m in half])
                nxt.append(len(labels) - 1)
        live = nxt
        rounds.append(shuffles)
        g *= 2
    runs = []
    for v in live:
        for off in range(0, width, r):
            run = labels[v][off:off + r]
            assert [p for p, _ in run] == list(range(r)) and len({j for _, j in run}) == 1
            if run[0][1] < lanes:
                runs.append((v, off, run[0][1]))
    assert sorted(j for _, _, j in runs) == list(range(lanes))
    return rounds, runs


def transposed(builder, rows, p_, j_):
    """[(j, run)]: the P vectors `rows` (each of J floats) as J runs of P floats, run j holding
    element j of every row, by _transpose_plan's shuffles (LLVM IR, in registers)."""
    rounds, runs = _transpose_plan(p_, j_)
    r = 1 << max(0, (p_ - 1).bit_length())
    width = -(-j_ // r) * r
    i32 = ir.IntType(32)
    vec = ir.VectorType(ir.FloatType(), width)
    vectors = []
    for p in range(r):
        row = rows[p] if p < p_ else ir.Constant(vec, ir.Undefined)
        if p < p_ and width > j_:
            row = builder.shuffle_vector(row, ir.Constant(row.type, ir.Undefined),
                                         ir.Constant(ir.VectorType(i32, width), [min(j, j_ - 1) for j in range(width)]))
        vectors.append(row)
    for shuffles in rounds:
        for a, b, mask in shuffles:
            vectors.append(builder.shuffle_vector(vectors[a], vectors[b], ir.Constant(ir.VectorType(i32, width), mask)))
    return [(j, builder.shuffle_vector(vectors[v], ir.Constant(vec, ir.Undefined),
                                       ir.Constant(ir.VectorType(i32, p_), list(range(off, off + p_)))))
            for v, off, j in runs]


@intrinsic
def _store_cols(typingctx, acc, out, o0, soj, accumulate, rows, lanes):
    """out[o0 + j*soj : +P] (+)= (acc[j], acc[J + j], ..., acc[(P-1)*J + j]) for j < J: a whole
    block stored transposed, one P-float vector store per lane (a result whose rows are its
    columns: dx.T in dense's backward), the block transposed in registers (`transposed`) instead
    of P*J scalar stores."""
    if not (isinstance(rows, types.IntegerLiteral) and isinstance(lanes, types.IntegerLiteral)):
        raise TypingError("_store_cols needs constant rows and lanes")
    p_, j_ = rows.literal_value, lanes.literal_value

    def codegen(context, builder, signature, args):
        accp, accum = args[0], args[4]
        i64 = ir.IntType(64)
        row_t, run_t = ir.VectorType(ir.FloatType(), j_), ir.VectorType(ir.FloatType(), p_)
        (odata,), (o0_, soj_) = operands(context, builder, signature, args, (1,), (2, 3))
        add = context.cast(builder, accum, signature.args[4], types.boolean)
        rows_ = [builder.load(vector_at(builder, accp, p * j_, row_t), align=4) for p in range(p_)]
        for j, value in transposed(builder, rows_, p_, j_):
            optr = vector_at(builder, odata, builder.add(o0_, builder.mul(ir.Constant(i64, j), soj_)), run_t)
            total = builder.fadd(builder.load(optr, align=4), value)
            builder.store(builder.select(add, total, value), optr, align=4)
        return context.get_dummy_value()
    return types.none(acc, out, o0, soj, accumulate, rows, lanes), codegen


def _tile(a, a0, sap, pn, a_steps, b, b0, b_steps, counts, out, o0, sop, soj, jn, accumulate):
    """One P x J block of a product, held in registers over the whole reduction:

        out[o0 + row(sop, p) + j*soj] (+)= sum over r < counts of
                                           a[a0 + row(sap, p) + r . a_steps] * b[b0 + r . b_steps + j]

    for p < pn, j < jn, with r = (r1, r2, r3) a three-level reduction and a_steps, b_steps its
    strides; row(s, p) = p*s, or with s = (s, col0, width, jump) rows that run on over a line end
    (_row_offsets). Rows p >= pn repeat row pn - 1 (so nothing is read past the data); unsigned
    indices spare numba's negative-index fix-up, which would block vectorisation.
    """
    _inlined()
    n1, n2, n3 = counts
    sa1, sa2, sa3 = a_steps
    sb1, sb2, sb3 = b_steps
    acc = _block(PJ)
    for r1 in range(n1):
        for r2 in range(n2):
            for r3 in range(n3):
                ao = a0 + r1 * sa1 + r2 * sa2 + r3 * sa3
                bo = b0 + r1 * sb1 + r2 * sb2 + r3 * sb3
                _fma_rows(acc, a, ao, sap, pn, b, bo, P, J)
    if soj == 1 and jn == J:
        _store_rows(acc, out, o0, sop, pn, accumulate, P, J)
    elif _unit_rows(sop) and pn == P and jn == J:   # a whole block whose rows are the result's columns
        _store_cols(acc, out, o0, soj, accumulate, P, J)
    else:   # a partial block, element by element from a copy (acc itself is read at fixed places only)
        part = _block(PJ)   # its zeroing, overwritten at once, LLVM drops
        _copy_block(acc, part, P, J)
        if soj == 1:   # separate loop so the contiguous store stays vectorised
            for p in range(pn):
                for j in range(jn):
                    o = uint64(o0 + _row_at(sop, p) + j)
                    out[o] = out[o] + part[p * J + j] if accumulate else part[p * J + j]
        else:
            for p in range(pn):
                for j in range(jn):
                    o = uint64(o0 + _row_at(sop, p) + j * soj)
                    out[o] = out[o] + part[p * J + j] if accumulate else part[p * J + j]


class Block:
    """A micro-kernel block shape: P rows x J float32 lanes, with its compiled tile."""

    def __init__(self, rows, lanes):
        self.rows, self.lanes = rows, lanes
        self.name = f"{rows}x{lanes}"
        self.tile = helper(_tile, {"P": rows, "J": lanes, "PJ": rows * lanes})
        self.env = {"P": rows, "J": lanes, "tile": self.tile}

    def padded(self, k):
        """k rounded up to whole J-lane blocks."""
        return -(-k // self.lanes) * self.lanes

    def __repr__(self):
        return f"Block({self.name})"


_BLOCKS = {}   # by shape: one Block (and one compiled tile) each
_NAMED = {}    # by the text that named it: every kernel call names its block, parsed once


def block(spec=None):
    """The Block for `spec` ("RxL", (R, L), a Block, or None: the machine's, kernels.BLOCK)."""
    if isinstance(spec, Block):
        return spec
    if spec is None:
        spec = _isa.isa_info()["block"]
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        spec = f"{spec[0]}x{spec[1]}"
    elif not isinstance(spec, str):
        raise TypeError(f"block must be 'RxL', (rows, lanes), a kernels block or None, got {type(spec).__name__}")
    found = _NAMED.get(spec)
    if found is None:
        shape = _isa.parse_block(spec, "block")
        if shape not in _BLOCKS:
            _BLOCKS[shape] = Block(*shape)
        found = _NAMED[spec] = _BLOCKS[shape]
    return found


def _machine_block(kind):
    """The machine's block of that kind (isa_info()'s "wide", "pixels" or "half"), or None."""
    name = _isa.isa_info()[kind]
    return name and block(name)


def lanes_block(spec, n, rows=None):
    """The Block of a product with n columns along its lanes: block(spec); with no block asked for
    nor set by PROFILER_KERNEL_BLOCK, the machine's wide block (kernels/_isa.py) when n is whole
    blocks of its lanes, unless the product's `rows` (when given) pad to at least a tenth more
    rows in it than in the machine's block (dense's forward on a batch of 32: 36 rows in 6 x 64
    against 32 in 8 x 32, whose 11% fewer multiply-adds took 0.92-0.96x the time at 2 threads and
    0.99-1.04x at 1; docs/performance.md, session 37), or its half block where that pads n to at
    least a tenth fewer lanes than the machine's block (AVX-512's 8 x 16 for 1-16, 33-48, 65-80,
    97-112 and 129-144, e.g. 48, 80 and 112 channels: 8 x 32's last block of each row held 16 of
    its lanes, stored one float at a time; docs/performance.md, session 28)."""
    blk = block(spec)
    if not machine_chosen(spec):
        return blk
    wide, half = _machine_block("wide"), _machine_block("half")
    if wide and n % wide.lanes == 0 and not (rows and 10 * _rows_padded(blk, rows) <= 9 * _rows_padded(wide, rows)):
        return wide
    return half if half and 10 * half.padded(n) <= 9 * blk.padded(n) else blk


def _rows_padded(blk, rows):
    """`rows` padded to whole blocks of blk's rows."""
    return -(-rows // blk.rows) * blk.rows


def machine_chosen(spec):
    """Whether the block is the machine's own, for a product to reshape to its sizes: none asked
    for, and none set by PROFILER_KERNEL_BLOCK (a block the user names runs as named)."""
    return spec is None and _isa.isa_info()["block_source"] != "env"


def rows_block(spec, n, along=None):
    """The Block of a product with n rows (output channels, or inputs, along a block's rows) and,
    when given, `along` positions along its lanes (each image's pixels): block(spec); with `spec`
    None and the block not set by PROFILER_KERNEL_BLOCK, the machine's block, or its pixel block
    (kernels/_isa.py) where that pads `along` to whole blocks of its lanes at most a 64th further
    (for fewer positions than its lanes, one partial block stored element by element, only where
    it pads them less), with as few as two thirds of its rows where that pads the n rows at least
    a tenth less (the fewest padded rows; ties keep the most rows). Fewer rows hold fewer
    accumulators, so each costs a little more: AVX2's 6 x 16 runs 32 rows as eight 4 x 16 blocks
    rather than six with the last a third full (mnist conv1's and cifar conv1's NCHW forward,
    0.89-0.95x the time; dense's backward by slabs, 16 rows, 0.86-0.94x; emulated AVX2), but keeps
    6 x 16 for 64 (NCHW weight grads of 64 channels in 4 x 16: 1.05-1.09x the time). AVX-512's 8 x 32 runs 10, 12
    and 20 channels as 6 x 32 and 7 x 32, 0.79-0.90x the time (docs/performance.md, session 22).
    The pixel blocks run 32 channels as 4 x 64 (AVX-512: the first layers' NCHW forwards in
    0.91-0.95x 8 x 32's time) and 4 x 24 (emulated AVX2: mnist conv1's 676 pixels, 696 lanes
    against 688, 0.91-0.92x 4 x 16's time; cifar conv1's 0.97-1.01x). Where they pad the pixels
    further they lost: 900 pixels in 4 x 64 (960 against 928), 1.02-1.04x; 784 (832 against 800),
    up to 1.06x (docs/performance.md, session 27). On images of 36-54 pixels, 64 lanes either way,
    8 x 32's two overlapping whole blocks took 0.81-0.92x 4 x 64's time; on 20 pixels AVX2's one
    partial block of 24 lanes 0.87-0.92x 4 x 16's two of 16 (session 28)."""
    blk = block(spec)
    if not machine_chosen(spec):
        return blk
    pixels = along is not None and _machine_block("pixels")
    if pixels:
        pad, base = pixels.padded(along), blk.padded(along)
        if pad < base or (along >= pixels.lanes and 64 * pad <= 65 * base):
            blk = pixels
    padded = {p: -(-n // p) * p for p in range(blk.rows, -(-2 * blk.rows // 3) - 1, -1)}
    fewest = min(padded, key=padded.get)   # dicts keep order: ties go to the most rows
    return block((fewest, blk.lanes)) if 10 * padded[fewest] <= 9 * padded[blk.rows] else blk


_DISPATCHED = None   # while blocks_used() records: the names of the blocks loop nests ran with


@contextlib.contextmanager
def blocks_used():
    """Records the blocks that tiled loop nests run with inside the `with`: yields the set of
    their names ("8x32"), filled as they run. A product may refine the machine's block (the wide
    block, rows_block, conv's _shallow_block), so benchmarks name each row's blocks from this."""
    global _DISPATCHED
    _DISPATCHED = names = set()
    try:
        yield names
    finally:
        _DISPATCHED = None


class Tiled:
    """A loop nest that uses the block shape (globals P, J and tile): one Kernel per Block,
    created on first use."""

    def __init__(self, fn):
        self.fn, self.__name__, self._kernels = fn, fn.__name__, {}

    def __getitem__(self, blk):
        if _DISPATCHED is not None:
            _DISPATCHED.add(blk.name)
        k = self._kernels.get(blk.name)
        if k is None:
            k = self._kernels[blk.name] = Kernel(self.fn, blk.env, blk.name)
        return k


def tiled(fn):
    return Tiled(fn)


@tiled
def _panels(src, dst):
    """dst[g, k, j] = src[k, g*J + j], zero past src's columns."""
    groups, k_, _ = dst.shape
    n = src.shape[1]
    full = n // J
    for k in prange(k_):
        row = src[k]
        for g in range(full):   # whole 64-byte runs: vector copies
            for j in range(J):
                dst[g, k, j] = row[g * J + j]
        for g in range(full, groups):
            for j in range(J):
                dst[g, k, j] = row[g * J + j] if g * J + j < n else 0.0


def panels(blk, workspace, name, b):
    """A (K, N) B operand as (ceil(N/J), K, J) panels, so a block reads one contiguous J-float run
    per step (read in place with N = 128, a block's lines are 512 bytes apart and share 8 of L1's
    64 sets)."""
    k, n = b.shape
    out = workspace.take(name, (blk.padded(n) // blk.lanes, k, blk.lanes))
    _panels[blk](out.size, b, out)
    return out
