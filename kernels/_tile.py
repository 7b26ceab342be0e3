"""The one arithmetic micro-kernel of conv2d and dense: a P x J block of a matrix product held in
registers while it accumulates over a strided reduction.

P x J = 6 x 16 float32 is twelve 8-wide AVX2 accumulators, the classic Haswell-class sgemm block
(16 vector registers: 12 accumulators, 2 for the B row, 1 for the broadcast A element). numba
compiles it to exactly that (vbroadcastss + 2 vmovups + 12 vfmadd231ps per step) provided LLVM's
SLP vectorizer is on (kernels/_jit.py) and the block lives in a stack alloca, which LLVM promotes
to registers; a numpy array in the loop is a heap object it cannot. It is a separate function (not
inlined at numba IR level): inlined, the serial kernels came out scalar, 10x slower.
"""

from numba import prange, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import helper, kernel

P, J = 6, 16       # output block: 6 rows x 16 float32 lanes = twelve 8-wide AVX2 accumulators
PJ = P * J


@intrinsic
def _block(typingctx):
    """A P*J float32 accumulator on the stack: LLVM promotes it to registers (a heap array is not)."""
    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_value_type(types.float32), size=PJ)
    return types.CPointer(types.float32)(), codegen


@helper
def tile(a, a0, sap, pn, a_steps, b, b0, b_steps, counts, out, o0, sop, soj, jn, accumulate, wrap=(0, 0, 0)):
    """One P x J block of a product, held in registers over the whole reduction:

        out[o0 + p*sop + j*soj] (+)= sum over r < counts of a[a0 + p*sap + r . a_steps] * b[b0 + r . b_steps + j]

    for p < pn, j < jn, with r = (r1, r2, r3) a three-level reduction and a_steps, b_steps its
    strides. Rows p >= pn repeat row pn - 1 (so nothing is read past the data); unsigned indices
    spare numba's negative-index fix-up, which would block vectorisation.

    wrap = (o1, j2, jm) also stores lanes j2 <= j < jm at o1 + p*sop + (j - j2) (soj 1): a block
    of lanes that runs on into the next image row (conv's flattened NCHW rows).
    """
    n1, n2, n3 = counts
    sa1, sa2, sa3 = a_steps
    sb1, sb2, sb3 = b_steps
    acc = _block()
    for q in range(PJ):
        acc[q] = 0.0
    for r1 in range(n1):
        for r2 in range(n2):
            for r3 in range(n3):
                ao = a0 + r1 * sa1 + r2 * sa2 + r3 * sa3
                bo = b0 + r1 * sb1 + r2 * sb2 + r3 * sb3
                for p in range(P):
                    av = a[uint64(ao + min(p, pn - 1) * sap)]
                    for j in range(J):
                        acc[p * J + j] += av * b[uint64(bo + j)]
    if soj == 1:   # separate loop so the common contiguous store stays vectorised
        for p in range(pn):
            for j in range(jn):
                o = uint64(o0 + p * sop + j)
                out[o] = out[o] + acc[p * J + j] if accumulate else acc[p * J + j]
    else:
        for p in range(pn):
            for j in range(jn):
                o = uint64(o0 + p * sop + j * soj)
                out[o] = out[o] + acc[p * J + j] if accumulate else acc[p * J + j]
    o1, j2, jm = wrap
    for p in range(pn):
        for j in range(j2, jm):
            o = uint64(o1 + p * sop + j - j2)
            out[o] = out[o] + acc[p * J + j] if accumulate else acc[p * J + j]


def padded(k):
    """k rounded up to whole J-lane blocks."""
    return -(-k // J) * J


@kernel
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


def panels(workspace, name, b):
    """A (K, N) B operand as (ceil(N/J), K, J) panels, so a block reads one contiguous 64-byte line
    per step (read in place with N = 128, a block's lines are 512 bytes apart and share 8 of L1's
    64 sets)."""
    k, n = b.shape
    out = workspace.take(name, (padded(n) // J, k, J))
    _panels(out.size, b, out)
    return out
