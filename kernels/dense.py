"""dense (fully connected) forward and backward: the register-blocked micro-kernel of _tile.py,
plus the numba bias kernels.

The GEMMs used to go to numpy's BLAS. In a training step they sit between numba's parallel
kernels, and OpenBLAS's idle threads spin for a while after every call: on 2 cores they took the
cores from numba's workers and cifar10-cnn ran no faster on 2 threads than on 1 (121 vs 126 ms
per step; 73 with OpenBLAS single-threaded). In numba, all kernels share one thread pool.

Each product is C = A @ B with A and C read and written through strides (so w.T and y.T need no
copies) and B packed into J-column panels in the caller's workspace or read in place. The
forward reads w in place when its outputs are whole blocks (_reads_w_in_place), else packs w (x
for batches up to 32, computing y.T = w.T @ x.T). The backward forms both grads together a slab
of inputs at a time (_backward_slabs): dx.T = w @ dy.T, w read in place against dy.T's panels,
and dw = x.T @ dy against dy's. The bias uses broadcast_add on (N, C), the kernel the conv
layers use.
"""

import numba
import numpy as np
from numba import prange

from ._checks import check_workspace, f32, no_overlap, out_buffer
from ._copies import copy, transpose
from ._jit import kernel
from ._tile import J, P, block as block_of, lanes_block, panels, rows_block, tile, tiled
from .bias import broadcast_add_backward, broadcast_add_forward

_KB = 256       # reduction block
# The reduction block of the forward that reads w in place: w's 32-lane columns are 512 bytes
# (mnist's 128 outputs) to 2 KB apart, in a few L1 sets, and a 64-step block of them is re-read
# by every row block of the band. The product alone at 1 thread, 64 steps against 256 (row blocks
# walked outside the panels), in three processes: mnist-cnn's 128x9216->128 1.04-1.07x and
# cifar10-cnn's 32x2304->512 1.05-1.09x as fast (32 and 48 slower, 96 and 128 within the noise
# of 256; panels outside row blocks, 64 against 128: mnist 1.04-1.10x, cifar within the noise).
# With 6 x 64's 64-lane runs (a 64-step block 16 KB), 96, 128 and 256 steps ran 0.89-1.12 of 64's
# time in two runs of both shapes and thread counts (the Zen 4), no steadier than 64: 64 stays
_KB_IN_PLACE = 64
_BAND_BLOCKS = 8   # row blocks per parallel iteration
_IN_PLACE_BLOCKS = 32   # at most these in a band of the forward reading w in place (_in_place_bands)
_BLAS_MAX = 65536 * 4   # OpenBLAS runs GEMMs of fewer multiply-adds on the calling thread alone
# Up to this batch the forward packs x rather than w: packing w copies K*N floats for M*K*N
# multiply-adds, most of a batch-32 product's time (32x2304 @ 2304x512: 1.9 -> 1.4 ms; at 64 rows
# reading w in place was 1.1x slower than packing it)
_SMALL_BATCH = 32
# The backward forms both grads a slab of inputs at a time (_backward_slabs). Two products, the
# earlier way, stored each whole block of dx.T = w @ dy.T transposed (_tile's _store_cols: a run of
# P floats per batch row), the rows 36 KB apart for mnist's 9216 inputs (one L1 set), and read x.T
# with the same stride for dw = x.T @ dy. On the shapes that took them (a batch under a quarter of
# the outputs), slabs took 0.90-0.91x the time at 1 thread and 0.86-0.88x at 2 on cifar10-cnn's
# 32x2304->512, 0.77-0.99x on batches of 8-64 against 128-4096 outputs (the Intel Xeon, 8 x 32;
# emulated AVX2's 4 x 16 on cifar's 0.97-1.00x: docs/performance.md, session 34). At most
# _SLAB_BLOCKS J-lane blocks of inputs make a slab: x's and dx's rows are copied in runs of 2 KB,
# long enough for the hardware prefetchers (at 1 thread, mnist-cnn's 128x9216->128 backward
# against PyTorch, medians in five processes: 0.62-0.89 with 16 blocks, 0.60-0.81 with 8,
# 0.51-0.74 with one; 0.55-0.77 packing w.T for dx = dy @ w.T). The blocks split evenly into as
# many slabs as a multiple of the threads (_parts): at 2 threads 512 inputs make two slabs of 256,
# not one that leaves a thread idle (the slab kernel on 32x512->4096 1.8x as fast, on
# 1024x512->512 2.2x; session 34).
_SLAB_BLOCKS = 16
# x's rows copied into a slab's J-wide copies this many at a time, block by block: row by row, a
# row's J-float pieces went to copies 16 KB apart (mnist's batch of 128), all in one L1 set; in
# groups of 8 each copy takes a 1 KB run. The copy alone 0.74-0.77x the time (mnist-cnn's x, 1 thread);
# the whole backward 0.950x (twice) at 1 thread and 0.984x at 2, emulated AVX2 0.962x and 0.984x,
# cifar10-cnn's and 64x4096->1024 0.99-1.02x (docs/performance.md, session 35). dx's copy out of
# the slabs, grouped alike, gained nothing on top (0.98-1.00x): its stores go to dx in 2 KB runs
# either way.
_COPY_ROWS = 8


@tiled
def _matmul(a, sam, sak, b, sbn, sbk, k_, m_, n, c, scm, scn, group):
    """C = A @ B for A[m, k] = a[m*sam + k*sak], B[k, n] = b[n*sbn + k*sbk] and C[m, n] =
    c[m*scm + n*scn] (M x K x N): strides, so transposed operands and results need no copies; B's
    J-column blocks must be contiguous J-float runs (panels: sbn = K, sbk = J).

    Each parallel iteration is a band of rows x a group of `group` columns, walked row block by
    row block, so successive blocks write adjacent lines of C (column blocks first, the earlier
    order, left each block's six 64-byte stores 12 KB from the last: the K = 32 weight grad of
    cifar10-cnn's dense layer, then a product, ran 1.7x slower)."""
    groups = (n + group - 1) // group
    band = _BAND_BLOCKS * P
    for it in prange((m_ + band - 1) // band * groups):
        m0, g0 = it // groups * band, it % groups * group
        for k0 in range(0, k_, _KB):
            kn = min(_KB, k_ - k0)
            for r0 in range(m0, min(m_, m0 + band), P):
                for n0 in range(g0, min(n, g0 + group), J):
                    tile(a, r0 * sam + k0 * sak, sam, min(P, m_ - r0), (0, 0, sak), b, n0 * sbn + k0 * sbk, (0, 0, sbk),
                         (1, 1, kn), c, r0 * scm + n0 * scn, scm, scn, min(J, n - n0), k0 > 0)


@tiled
def _forward_in_place(x, w, y, bands, group):
    """y = x @ w with w's rows read in place as B (_reads_w_in_place): like _matmul, each parallel
    iteration is a band of rows x a group of columns (x's row blocks split evenly into `bands`),
    but walked a reduction block of _KB_IN_PLACE steps at a time panel by panel, so each panel's
    block of w (64 rows of J floats) is read by the band's row blocks while it is in L1, and w is
    read once per band."""
    n, i_ = x.shape
    o = w.shape[1]
    xf, wf, yf = x.reshape(-1), w.reshape(-1), y.reshape(-1)
    blocks = (n + P - 1) // P
    groups = (o + group - 1) // group
    for it in prange(bands * groups):
        k, g0 = it // groups, it % groups * group
        m0, m1 = k * blocks // bands * P, min(n, (k + 1) * blocks // bands * P)
        for k0 in range(0, i_, _KB_IN_PLACE):
            kn = min(_KB_IN_PLACE, i_ - k0)
            for n0 in range(g0, min(o, g0 + group), J):
                for r0 in range(m0, m1, P):
                    tile(xf, r0 * i_ + k0, i_, min(P, n - r0), (0, 0, 1), wf, k0 * o + n0, (0, 0, o), (1, 1, kn),
                         yf, r0 * o + n0, o, 1, J, k0 > 0)


@tiled
def _backward_slabs(x, w, dyp, dytp, dx, dw, scratch, slabs):
    """dx = dy @ w.T and dw = x.T @ dy, a slab of inputs at a time (the J-lane blocks of inputs
    split evenly into `slabs`), each chunk of slabs with its own `scratch` row (two halves, each
    the widest slab over the batch): the slab's columns of x are copied out of x's rows (runs of
    up to 2 KB) into J-wide copies (N x J each, 16 KB for mnist's batch of 128), _COPY_ROWS rows at
    a time block by block, and dx's columns are formed in the same layout and copied out to dx's
    rows, row by row. So x is read once, dx written once, and no tile reads or writes lines a
    whole row of x apart (36 KB for mnist's 9216 inputs: one L1 set), which a weight grad reading
    x.T in place did. Each block of J inputs takes dx.T = w @ dy.T, w's rows read in place against
    dy.T's panels `dytp` and each block stored transposed (_tile's _store_cols), and dw = x.T @ dy
    from x's copies against dy's panels `dyp`: w and dw are read and written once, in order."""
    n, i_ = x.shape
    o = w.shape[1]
    blocks = (i_ + J - 1) // J
    half = scratch.shape[1] // 2
    xf, wf, dxf, dwf = x.reshape(-1), w.reshape(-1), dx.reshape(-1), dw.reshape(-1)
    chunks = scratch.shape[0]
    for t in prange(chunks):
        xs, dxs = scratch[t, :half], scratch[t, half:]
        for s in range(t * slabs // chunks, (t + 1) * slabs // chunks):
            s0 = s * blocks // slabs * J
            sw = min(i_, (s + 1) * blocks // slabs * J) - s0
            for k0 in range(0, n, _COPY_ROWS):   # xs[b, k, :] = x[k, s0 + b*J : s0 + (b+1)*J]
                for j in range(0, sw, J):
                    for k in range(k0, min(n, k0 + _COPY_ROWS)):
                        copy(xf, k * i_ + s0 + j, xs, j * n + k * J, min(J, sw - j))
            for j in range(0, sw, J):   # the slab's blocks of J inputs
                i0, jn = s0 + j, min(J, sw - j)
                for n0 in range(0, n, J):   # dxs[b].T = w[i0:i0+jn] @ dy.T, a panel of dy.T over the block's rows
                    for r0 in range(0, jn, P):
                        tile(wf, (i0 + r0) * o, o, min(P, jn - r0), (0, 0, 1), dytp, n0 * o, (0, 0, J), (1, 1, o),
                             dxs, j * n + n0 * J + r0, 1, J, min(J, n - n0), False)
                for n0 in range(0, o, J):   # dw[i0:i0+jn] = xs[b].T @ dy, a panel of dy over the block's rows
                    for r0 in range(0, jn, P):
                        tile(xs, j * n + r0, 1, min(P, jn - r0), (0, 0, J), dyp, n0 * n, (0, 0, J), (1, 1, n),
                             dwf, (i0 + r0) * o + n0, o, 1, min(J, o - n0), False)
            for k in range(n):   # dx[k, s0 + b*J : s0 + (b+1)*J] = dxs[b, k, :]
                for j in range(0, sw, J):
                    copy(dxs, j * n + k * J, dxf, k * i_ + s0 + j, min(J, sw - j))


@kernel
def _panels_t(src, dst):
    """dst[g, k, j] = src[g*J + j, k] (the panels of src.T, J = dst.shape[2]), zero past src's
    rows: each panel is one transpose of J contiguous rows of src."""
    groups, k_, j_ = dst.shape
    rows_ = src.shape[0]
    s, d = src.reshape(-1), dst.reshape(-1)
    for g in prange(groups):
        rows = min(j_, rows_ - g * j_)
        transpose(s, g * j_ * k_, k_, d, g * k_ * j_, j_, rows, k_)
        for k in range(k_):
            for j in range(rows, j_):
                d[g * k_ * j_ + k * j_ + j] = 0.0


def _packed(blk, ws, name, b):
    """b (K, N) as (ceil(N/J), K, J) panels; b may be the transpose of a C-ordered array."""
    if b.flags.c_contiguous:
        return panels(blk, ws, name, b)
    out = ws.take(name, (blk.padded(b.shape[1]) // blk.lanes, b.shape[0], blk.lanes))
    _panels_t(out.size, b.T, out)
    return out


def _reads_w_in_place(blk, w):
    """Whether the forward reads w's rows as B where they are, each step one J-float run of a row:
    when the outputs are whole blocks (a ragged last block would read past w's end). At 1 thread,
    against the packings, with 8 x 32 blocks: cifar10-cnn's 32x2304->512 1.23-1.28 (x packed) and
    1.12 (w packed) -> 0.78-0.85 ms (PyTorch 0.52), mnist-cnn's 128x9216->128 0.96-1.16x as fast
    as with w packed (five runs); with AVX2's 6 x 16 (emulated on an AVX-512 host) 0.85-0.95 and
    0.88-0.94 of the packings' time. Wherever w starts: off a 64-byte line each of its loads
    straddles two lines (1.14-1.25x the time at 1 and 2 threads), but a copy of w onto a line
    took 1.15-2.23x and the packings 1.22-2.80x (docs/performance.md, session 37)."""
    return w.shape[1] % blk.lanes == 0


def _in_place_bands(blk, n):
    """Bands of the forward that reads w in place: the batch's row blocks split evenly into bands
    of at most _IN_PLACE_BLOCKS, as many as a multiple of the threads (at most one a row block),
    so that each thread takes the same share of bands, each over all the outputs
    (_in_place_group); a band reads w once from memory. At 1 thread, mnist-cnn's batch of 128
    (22 blocks of 6 rows) is one band: its whole forward took 0.965x the time of two bands of 11
    (AVX-512's 6 x 64) and 0.967x (AVX2's 6 x 16, emulated), twice each (the Intel Xeon,
    docs/performance.md, session 33); a batch of 256 in two bands of 22 rather than three,
    0.99-1.01x. mnist-cnn's forward product at 2 threads, in two bands of 11 row blocks (6 x 16
    and 6 x 64), took 0.89-0.99x the time of three bands of up to 8 over half the outputs each
    (six iterations), in six processes; the whole forward 0.935-1.006x on AVX-512 and 0.83-1.11x
    on emulated AVX2 (its 2-thread noise), six processes each (session 31)."""
    return _parts(-(-n // blk.rows), _IN_PLACE_BLOCKS)


def _parts(blocks, most):
    """Parts to split `blocks` into for the threads: a multiple of the threads' count (at most one
    part a block), each of at most `most` blocks once split evenly, so that each thread takes the
    same share."""
    threads = numba.get_num_threads()
    return min(blocks, threads * -(-blocks // (threads * most)))


def _in_place_group(blk, n, o, bands):
    """Columns per parallel iteration of the forward that reads w in place: all of them when the
    bands are at least one a thread, else _group's."""
    return blk.padded(o) if bands >= numba.get_num_threads() else _group(blk, n, o)


def _group(blk, m, n):
    """Columns per parallel iteration: all of them unless the bands of rows are too few to give
    each of several threads two iterations (a batch of 32 is one band). One thread takes all
    columns at once, so A is read once: cifar10-cnn's 32x2304->512 forward product 1.02-1.07x as
    fast as in two groups (1 thread, three processes)."""
    threads = numba.get_num_threads()
    if threads == 1:
        return blk.padded(n)
    bands = -(-m // (_BAND_BLOCKS * blk.rows))
    groups = max(1, min(-(-n // blk.lanes), -(-2 * threads // bands)))
    return blk.padded(-(-n // groups))


def _flat(a):
    """A C- or F-ordered matrix as (flat view, row stride, column stride) in elements, no copy."""
    if a.flags.c_contiguous:
        return a.reshape(-1), a.shape[1], 1
    return a.T.reshape(-1), 1, a.shape[0]


def _product(blk, ws, name, a, b, out):
    """out = a @ b, where a, b and out may be transposes of contiguous arrays; b is packed into the
    workspace buffer `name`. Products below OpenBLAS's own single-thread threshold go to numpy (its
    threads stay asleep, and numba's packing and dispatch would cost more than the product: the
    mlp's 250x2 @ 2x100)."""
    m, k = a.shape
    if m * k * b.shape[1] < _BLAS_MAX:
        return np.matmul(a, b, out=out)
    af, sam, sak = _flat(a)
    of, scm, scn = _flat(out)
    n = b.shape[1]
    bf = _packed(blk, ws, name, b).reshape(-1)
    _matmul[blk](m * k * n, af, sam, sak, bf, k, blk.lanes, k, m, n, of, scm, scn, _group(blk, m, n))
    return out


def _check(x, w):
    x, w = f32("x", x, 2), f32("w", w, 2)
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"x {x.shape} has {x.shape[1]} features but w {w.shape} (I, O) expects {w.shape[0]}")
    return x, w


def dense_forward(x, w, b, *, out=None, workspace=None, block=None):
    """y = x @ w + b, with x (N, I), w (I, O), b (O,). `workspace` (a kernels.Workspace kept by
    the caller) holds the packed operands between calls; `block` ("RxL") picks the micro-kernel's
    block shape (default: the machine's, kernels.BLOCK, or its wide block when O fills that
    block's lanes, kernels.isa_info()["wide"], unless the batch N pads to at least a tenth more
    rows in it, or its half block where O pads to at least a tenth fewer lanes in it,
    kernels.isa_info()["half"])."""
    x, w = _check(x, w)
    b = f32("b", b, 1)
    if b.shape[0] != w.shape[1]:
        raise ValueError(f"b {b.shape} must have one entry per output of w {w.shape}")
    ws, blk = check_workspace(workspace), lanes_block(block, w.shape[1], x.shape[0])
    y = out_buffer(out, (x.shape[0], w.shape[1]))
    no_overlap("out", y, {"x": x, "w": w, "b": b})
    n, i, o = x.shape[0], x.shape[1], w.shape[1]
    if n * i * o < _BLAS_MAX:   # as in _product
        np.matmul(x, w, out=y)
    elif _reads_w_in_place(blk, w):
        bands = _in_place_bands(blk, n)
        _forward_in_place[blk](n * i * o, x, w, y, bands, _in_place_group(blk, n, o, bands))
    elif n <= _SMALL_BATCH:   # y.T = w.T @ x.T: packs the small x, reads w in place
        _product(blk, ws, "dense.x", w.T, x.T, y.T)
    else:
        _product(blk, ws, "dense.w", x, w, y)
    return broadcast_add_forward(y, b, layout="NHWC", out=y)


def dense_backward(x, w, dy, *, out=None, workspace=None, block=None):
    """(dx, dw, db) for y = dense_forward(x, w, b); `out` is an optional (dx, dw, db) triple,
    `block` ("RxL") the block shape, by default kernels.BLOCK (the backward runs no wide or half
    block; by slabs, its blocks take fewer rows where that pads the J inputs of a block less:
    _tile.rows_block)."""
    x, w = _check(x, w)
    dy = f32("dy", dy, 2)
    if dy.shape != (x.shape[0], w.shape[1]):
        raise ValueError(f"dy has shape {dy.shape}, expected {(x.shape[0], w.shape[1])} for x {x.shape}, w {w.shape}")
    ws, blk = check_workspace(workspace), block_of(block)
    dx_out, dw_out, db_out = _triple(out)
    dx = out_buffer(dx_out, x.shape, "out[0] (dx)")
    dw = out_buffer(dw_out, w.shape, "out[1] (dw)")
    db = out_buffer(db_out, (w.shape[1],), "out[2] (db)")
    inputs = {"x": x, "w": w, "dy": dy}
    no_overlap("out[0] (dx)", dx, inputs | {"out[1] (dw)": dw, "out[2] (db)": db})
    no_overlap("out[1] (dw)", dw, inputs | {"out[2] (db)": db})
    no_overlap("out[2] (db)", db, inputs)
    n, i, o = x.shape[0], x.shape[1], w.shape[1]
    if n * i * o < _BLAS_MAX:   # as in _product
        np.matmul(dy, w.T, out=dx)
        np.matmul(x.T, dy, out=dw)
    else:
        blocks = -(-i // blk.lanes)
        slabs = _parts(blocks, _SLAB_BLOCKS)
        chunks = min(slabs, 2 * numba.get_num_threads())   # two chunks per thread, for the balance
        widest = -(-blocks // slabs) * blk.lanes
        rows = rows_block(block, blk.lanes)   # its blocks' rows run over J inputs: AVX2's 16 as 4 x 16, not 6 + 6 + 4
        _backward_slabs[rows](n * i * o, x, w, panels(blk, ws, "dense.dy", dy), _packed(blk, ws, "dense.dyT", dy.T),
                              dx, dw, ws.take("dense.slabs", (chunks, 2 * widest * n)), slabs)
    broadcast_add_backward(dy, layout="NHWC", out=db)
    return dx, dw, db


def _triple(out):
    if out is None:
        return None, None, None
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"out must be a (dx, dw, db) triple of arrays or None, got {type(out).__name__}"
                        + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return out
