"""conv2d forward and backward in NCHW and NHWC: a register-blocked direct convolution in numba.

The first version did im2col in numba and the arithmetic in numpy's BLAS: the conv GEMMs are tall
and skinny (C_out = 32 or 64 columns), where OpenBLAS reached 35-70 GFLOP/s here, and im2col/col2im
moved 9x the input through memory on top (cifar10-cnn's convs ran at 17-52 GFLOP/s, the C_in = 3
layer at 17). Now every kernel is the micro-kernel of _tile.py (a block of P x J outputs held in
registers over a strided reduction: 6 x 16 on AVX2, 8 x 32 on AVX-512, and 6 x 64 for AVX-512's
products whose axis along the lanes is whole blocks of 64: pixel-block forwards, the stride-1
input grad among them, and deep weight grads; for the first layers' NCHW forwards of 32
channels, pixels along the lanes, 4 x 64 on AVX-512 and 4 x 24 on AVX2 where they pad each
image's pixels about as little (_isa.PIXEL_BLOCKS); below "6" is P and "16" J) reading straight
from the (padded) input.

NHWC: a patch row (kw, c) is one contiguous run of KW*C floats, so with t = kw*C + c
- forward:      y[b, oh, ow, n] = sum_kh,t xp[b, oh*s + kh, ow*s*C + t] * w[kh, t, n]
                (blocks: 6 output pixels x 16 output channels)
- weight grad:  dw[kh, t, n]    = sum_b,oh,ow xp[b, oh*s + kh, ow*s*C + t] * dy[b, oh, ow, n]
                (blocks: 6 of t x 16 output channels, summed over bands of ~64 output pixels)
- input grad:   stride 1: the forward on dy padded by K-1-pad with w flipped and C_in, C_out
                swapped (a full correlation: a 9*C_out-deep reduction per block), in either
                layout through the forward's own kernels (_Plan.full_correlation). C_in below a
                quarter of the lanes (first layers): each output pixel's whole patch gradient at
                once (_backward_input_patches, both layouts); with stride > 1 (and NHWC images
                of fewer pixels than lanes), a scatter,
                dxp[b, i, ow*s*C + t] += sum_n dy[b, oh, ow, n] * w[kh, t, n] for oh*s + kh = i,
                row by row (each row owned by one thread: no races), then cropped.
NCHW runs natively. The stride-1 forward of reductions at least 64 deep, with outputs that fill a
block of lanes, copies bands of each image's rows channels-last into a block that stays in cache
(8 x 8 transposes in registers) and runs NHWC's blocks of 6 output pixels x 16 output channels on it
into a channels-last block of its outputs, transposed into y's planes after (_forward_bands; x
packed whole to NHWC and y unpacked after, as strided convs do, took 1.25-1.83x the NHWC forward's
time: those copies go through memory). The others (the first layers' forwards, the input grads of
layers with few input channels) use blocks of output channels x consecutive output pixels over
each image's column-shifted planes (_forward_shifted). The weight grad reads dy in place, in blocks
of 6 output channels x 16 patch elements of a channels-last copy of x, made a band of rows at a
time into scratch of its own (NCHW's transposed in 8 x 8 blocks, _copies.transpose, at 2-3x a
plain copy's time; NHWC's where x needs padding) rather than whole (the first layers' weight grad
transposes dy by bands instead, as their KW*C_in fills few lanes, and runs blocks of KW*C_in
patch elements).
Each weight-grad block sums only over the output pixels whose windows reach x, not its padding;
the pixel-block forwards' blocks (NHWC's, and so the NHWC stride-1 input grads past the first
layers' and the strided forwards; NCHW's bands) skip the kernel rows that read only padding; from
64 deep, the output columns where running them apart takes fewer block steps also skip the kernel
columns that do (_columns_apart). From 64 deep at stride 1, where it costs few block steps, the
NHWC forward reads x itself, never its padding, rather than a zero-padded copy (_reads_in_place:
mnist conv2's and cifar conv2's input grads read dy in place); under 64 deep, a padded NHWC
forward (cifar conv1's) copies x band by band into scratch of its own, as NCHW's bands do
(_forward_bands), rather than whole.
With stride > 1 the forward and input grad go through NHWC copies.

The vector lanes (J) always run over an operand padded to a multiple of J or with J floats of slack
(w, and NHWC dy, copied padded where their channels are no whole blocks of J; x's copies), so no
load runs past an array; partial blocks repeat the last valid row (P) and drop the extra lanes on
store.
"""

import functools
import math

import numba
import numpy as np
from numba import prange, uint64

from . import _isa
from ._checks import check_layout, check_workspace, f32, flag, no_overlap, out_buffer, positive_int, shape4
from ._copies import TRANSPOSE_BLOCK, copy, prefetch_write, transpose
from ._jit import helper, kernel
from ._tile import J, P, block as block_of, lanes_block, machine_chosen, rows_block, tile, tiled
from .workspace import on_a_line


@tiled
def _forward_nhwc(xp, wk, s, data, on_x, inner, rows, y):
    """y (B, OH, OW, N) from NHWC xp and wk (KH, KW*C, Np), Np = N padded to J: xp is either the
    padded input (B, Hp, Wp, C), whose rows data[0]:data[1] and columns data[2]:data[3] hold x
    and the others zero padding, or, with `on_x`, x itself (B, H, W, C) at those rows and columns
    of the padded one (_reads_in_place), whose padding is never read. A block sums only over the
    kernel rows that reach x from some of its output pixels:
    - the output columns inner[0]:inner[1] (_columns_apart: at least those whose windows lie wholly
      on x's columns, all of them under _COLUMN_DEPTH deep; over x itself exactly those) run in
      blocks of P consecutive output pixels of an image, running on from one output row to the
      next (row blocks left P - OW % P rows idle at each row's end: cifar conv4's 13-pixel rows
      used 81% of the rows, mnist conv2's 26-pixel input grad rows 81%), each over the kernel rows
      that reach x from any of its output rows (the input grad of a 'valid' layer, a full
      correlation over dy padded by KH - 1 rows, skips 2 of 15 rows' worth of work on cifar
      conv4);
    - each of the others in blocks of P output rows down its column, over only its kernel columns
      that reach x (cifar conv3's 'same' forward with 6-row blocks: 1 of 15 columns, a third
      shorter; cifar conv4's input grad: 3 of 15 columns, one a third and two two thirds
      shorter).
    Reading x itself, no block spans output rows whose kernel rows that reach x differ (the top
    and bottom rows of a padded input): a run-on block stops at such a row's end, and each such
    row of an outer column is a block of its own (_column_block).
    The run-on blocks of a line (a row's worth) take `rows` kernel rows at a time (_chunk), each
    pass adding onto the outputs of the passes before, so that the weights a pass reads stay in
    L1 across the line's blocks."""
    bsz, hx, wx, c = xp.shape
    kh_, kl, np_ = wk.shape
    _, oh_, ow_, n = y.shape
    kw_ = kl // c
    origin = (data[0] * wx + data[2]) * c if on_x else 0   # x's first float in the padded input's coordinates
    top, bottom = _full_rows(oh_, kh_, s, data) if on_x else (0, oh_)
    xf, wf, yf = xp.reshape(-1), wk.reshape(-1), y.reshape(-1)
    a, e = inner
    width = e - a
    pixels, per_line, lines = _pixel_lines(oh_, width, P)
    down = _blocks_down(top, bottom, oh_, P)   # blocks down each outer column
    steps = lines + (ow_ - width) * down
    for it in prange(bsz * steps):
        b, k = it // steps, it % steps
        if k >= lines:   # a block of output rows down an outer column
            col = (k - lines) // down
            oh, pn = _column_block((k - lines) % down, top, bottom, oh_, P)
            ow = col if col < a else e + col - a
            kh0, kh1 = max(0, data[0] - (oh + pn - 1) * s), min(kh_, data[1] - oh * s)
            kw0, kw1 = max(0, data[2] - ow * s), min(kw_, data[3] - ow * s)
            x0 = (b * hx + oh * s + kh0) * wx * c + (ow * s + kw0) * c - origin
            for n0 in range(0, n, J):
                tile(xf, x0, s * wx * c, pn, (0, wx * c, 1), wf, (kh0 * kl + kw0 * c) * np_ + n0, (0, kl * np_, np_),
                     (1, max(0, kh1 - kh0), max(0, kw1 - kw0) * c), yf, ((b * oh_ + oh) * ow_ + ow) * n + n0, ow_ * n,
                     1, min(J, n - n0), False)
            continue
        q0, end, oh0, ow0 = _pixel_line(k, per_line, pixels, width, P)
        for r in range(0, kh_, rows):   # the line's blocks, `rows` kernel rows of w at a time (_chunk)
            q, oh, ow = q0, oh0, ow0
            while q < end:
                pn, last = _pixel_block(q, end, oh, ow, width, P, top, bottom)
                f0, f1 = max(0, data[0] - last * s), min(kh_, data[1] - oh * s)   # kernel rows that reach x
                r0, r1 = max(r, f0), min(r + rows, f1)
                if r0 < r1 or (r == 0 and f0 >= f1):   # a block that reaches no row of x stores zeros
                    x0 = (b * hx + oh * s + r0) * wx * c + (a + ow) * s * c - origin
                    pixel_rows = (s * c, ow, width, (wx - width) * s * c)   # a row end moves on to the next s rows of x
                    for n0 in range(0, n, J):
                        product = (xf, x0, pixel_rows, pn, (0, wx * c, 1), wf, r0 * kl * np_ + n0, (0, kl * np_, np_),
                                   (1, max(0, r1 - r0), kl), yf, ((b * oh_ + oh) * ow_ + a + ow) * n + n0)
                        if width == ow_:   # y's rows of pixels run on as one: a step per row, no line end to test for
                            tile(*product, n, 1, min(J, n - n0), r0 > f0)   # onto the block's passes before
                        else:
                            tile(*product, (n, ow, width, (ow_ - width) * n), 1, min(J, n - n0), r0 > f0)
                q, oh, ow = _next_pixel(q, pn, oh, ow, width)


@helper
def _full_rows(oh_, kh_, s, data):
    """(top, bottom): the output rows top:bottom are those whose every kernel row reaches x's rows
    data[0]:data[1] of the padded input; the rows above and below reach fewer, each its own."""
    top = min(oh_, (data[0] + s - 1) // s)
    return top, max(top, min(oh_, (data[1] - kh_) // s + 1))


@helper
def _blocks_down(top, bottom, oh_, p):
    """The blocks of an outer column's oh_ rows (_column_block)."""
    return top + (bottom - top + p - 1) // p + oh_ - bottom


@helper
def _column_block(k, top, bottom, oh_, p):
    """(first row, rows) of an outer column's block k: the rows above `top` and from `bottom` on
    one a block, the rows between in blocks of p."""
    if k < top:
        return k, 1
    mid = (bottom - top + p - 1) // p   # blocks of the rows between
    if k < top + mid:
        oh = top + (k - top) * p
        return oh, min(p, bottom - oh)
    return bottom + k - top - mid, 1


# the reduction depth from which the NHWC forward skips padding columns: the outer columns' blocks
# save a kernel column's share of their depth or more, but the run-on blocks' stores then test for
# line ends, ~40 integer operations a block (mnist conv1's forward, 9 deep: 1.11-1.17x the time
# with those stores; docs/performance.md, session 26)
_COLUMN_DEPTH = 64


def _inner(k_, o_, d0, d1, s, p):
    """(lo, hi): the outputs o < o_ (columns, stride s) whose windows of k_ lie wholly on x's
    columns d0:d1 of the padded input; all of them when fewer than p would (a block's worth:
    shorter runs would leave the blocks short)."""
    lo = min(o_, -(-d0 // s))   # ceil(d0 / s)
    hi = max(lo, min(o_, (d1 - k_) // s + 1))
    return (lo, hi) if hi - lo >= p else (0, o_)


@helper
def _pixel_lines(oh_, ow_, p):
    """(pixels, per_line, lines) for walking an image's output pixels in blocks of p consecutive
    ones: a row's worth of blocks (per_line) per parallel iteration, `lines` of them per image."""
    pixels = oh_ * ow_
    per_line = (ow_ + p - 1) // p
    return pixels, per_line, ((pixels + p - 1) // p + per_line - 1) // per_line


@helper
def _pixel_line(line, per_line, pixels, ow_, p):
    """(first pixel, end, its row, its column) of an image's line."""
    q0 = line * per_line * p
    return q0, min(pixels, q0 + per_line * p), q0 // ow_, q0 % ow_


@helper
def _pixel_block(q0, end, oh, ow, ow_, p, top, bottom):
    """(pixels in the block at q0 (row oh, column ow), the row of its last pixel): at most p, and at
    most one row end per block (rows under p wide), none unless both rows are among top:bottom."""
    pn = min(p, end - q0, 2 * ow_ - ow)
    if ow + pn <= ow_:
        return pn, oh
    if oh < top or oh + 1 >= bottom:
        return ow_ - ow, oh
    return pn, oh + 1


@helper
def _next_pixel(q0, pn, oh, ow, ow_):
    """(q0, row, column) of the pixel after a block of pn: moved on without dividing."""
    ow += pn
    return (q0 + pn, oh + 1, ow - ow_) if ow >= ow_ else (q0 + pn, oh, ow)


@helper
def _bchw(shape, nchw):
    """(batch, channels, rows, columns) of an NCHW or NHWC array's shape."""
    return (shape[0], shape[1], shape[2], shape[3]) if nchw else (shape[0], shape[3], shape[1], shape[2])


@helper
def _on_a_line(n):
    """n float32 of scratch starting on a 64-byte line, as the workspaces' buffers do: numba's
    np.empty and np.zeros align them to 32 bytes only (AVX's), 0 or 32 past a line by where malloc
    finds room, and a J-float load or store then straddles two lines. The scratch the blocks load
    or store J floats at a time is on a line: the weight grads' copies of x (_backward_weight,
    _backward_weight_shallow), the forward bands' copies of x and blocks of outputs
    (_forward_bands), the shifted planes (_forward_shifted: cifar conv1's NCHW forward took
    0.47-0.58 ms a call at 1 thread by the process, 0.46-0.51 on a line), the first layers' dy
    bands and NHWC patch gradients; not the NCHW patch gradients, whose rows are image planes
    apart (mnist conv1's 676 floats: no faster on a line; docs/performance.md, session 37). The
    caller's w, read so in place, must start on a line too (on_a_line), else it is copied; dy is
    read in place wherever it starts, a copy of it costing more (_Plan.dyp)."""
    raw = np.empty(n + 15, np.float32)
    return raw[(16 - raw.ctypes.data // 4 % 16) % 16:][:n]


@helper
def _padded_rows(xs, nchw, b, r0, r1, pt, pl, h, w, c, hp, wp, xb):
    """xb[:(r1 - r0)*wp*c] = the padded rows r0:r1 of image b of x (flat xs, NCHW (B, C, H, W) or
    NHWC (B, H, W, C)), padded to hp x wp, channels-last: x's row ih at padded row pt + ih, its
    columns from pl, and zeros elsewhere. NCHW's by 8 x 8 transposes (_copies.transpose), 8
    channels down all the rows, so each plane is read in one run (_forward_bands says why); NHWC's
    a row at a time, as it is."""
    if pt > 0 or pl > 0 or wp > w or hp > h:   # any padding row or column, bottom and right too
        xb[:(r1 - r0) * wp * c] = 0.0
    cols = min(w, wp - pl)   # x's columns that some window reads
    lo, hi = max(r0, pt), min(r1, pt + h)
    if nchw:
        for c0 in range(0, c, TRANSPOSE_BLOCK):
            for r in range(lo, hi):
                transpose(xs, ((b * c + c0) * h + r - pt) * w, h * w, xb, ((r - r0) * wp + pl) * c + c0, c,
                          min(TRANSPOSE_BLOCK, c - c0), cols)
    else:
        for r in range(lo, hi):
            copy(xs, (b * h + r - pt) * w * c, xb, ((r - r0) * wp + pl) * c, cols * c)


@helper
def _x_itself(nchw, pt, pl, h, w, hp, wp):
    """Whether x is exactly its padded input, NHWC (B, hp, wp, C): then the weight grads read x
    itself, else a copy of its rows (_x_rows)."""
    return not nchw and pt == 0 and pl == 0 and (h, w) == (hp, wp)


@helper
def _x_rows(xs, nchw, b, r0, r1, pt, pl, h, w, c, hp, wp, xb):
    """(array, offset of image b's padded row 0 in it) holding the padded rows r0:r1 of x: x
    itself where it is its padded input (_x_itself), else xb with those rows copied into it
    (_padded_rows)."""
    if _x_itself(nchw, pt, pl, h, w, hp, wp):
        return xs, b * hp * wp * c
    _padded_rows(xs, nchw, b, r0, r1, pt, pl, h, w, c, hp, wp, xb)
    return xb, -r0 * wp * c


@tiled
def _forward_bands(x, nchw, pt, pl, wk, bands, inner, y):
    """Stride 1: y (B, N, OH, OW) from NCHW x (B, C, H, W), zero-padded at (pt, pl), and wk
    (KH, KW*C, Np), for reductions at least _PIXEL_DEPTH deep; with `nchw` False, y (B, OH, OW, N)
    from NHWC x (B, H, W, C), padded, under _COLUMN_DEPTH deep (below). Each iteration takes one
    of an image's `bands` bands of output rows (split evenly) and copies their input rows
    channels-last into a block of its own (_padded_rows: 8 x 8 transposes in registers, the band
    sized to stay in cache), 8 channels down all the band's rows, so that each plane is read in
    one run. A row of all channels at a time writes each row of the copy whole while it is in L1
    but reads every plane at once: the Intel Xeon's forwards took 0.96-1.01x the time that way,
    the AMD Zen 4's 1.02-1.09x, and its NCHW backwards 1.03-1.09x (docs/performance.md, sessions
    33 and 39). x comes from memory at each band, with no arithmetic to hide it. It runs _forward_nhwc's blocks on that
    copy into a channels-last block of the band's outputs (whole J-lane stores: Np is whole blocks
    of lanes, the lanes past N dropped after), then transposed into y's planes (8 x 8 again): the
    output columns inner[0]:inner[1] in blocks of P consecutive output pixels running on over row
    ends, each other column in blocks of P output rows down it over its kernel columns that reach
    x (_columns_apart). Against the former kernel, which ran every column on and stored each
    block transposed straight into y's planes: the seed models' input grads took 0.95-1.01x its
    time and their forwards 0.95-1.03x (AVX-512, 1 and 2 threads; the 1.03 is cifar conv2's
    'valid' forward, whose 8 x 32 blocks it stored as exact 8-float runs). Running the padding
    columns apart with those transposed stores took 0.99-1.07x its time: no row of a column's
    block is contiguous in y, so its stores went one float at a time (docs/performance.md,
    session 30). Broadcasting the pixels from x's planes instead (one plane per reduction step,
    10 floats of each line used by a block) took 1.15-1.53x the NHWC forward's time on the seed
    models' 32/64-channel layers (session 22).
    NHWC x's rows are copied as they are and the blocks store straight into y. The padded NHWC
    forward packed all of x into a workspace buffer first (_forward_nhwc over _Plan.x_nhwc), whose
    writes, and the blocks' reads of it, went through memory once y's stores had pushed it out of
    L2: cifar conv1's forward (27 deep) by bands took 0.91-0.95x the time at 1 thread and
    0.89-0.91x at 2 (AVX-512; emulated AVX2 0.93, 0.91), cifar10-cnn's NHWC training step 0.99x.
    Deeper ones keep _forward_nhwc, which reads x in place or runs its blocks in passes of kernel
    rows: cifar conv3's forward by bands without passes, 1.04-1.06x (docs/performance.md, session
    36)."""
    bsz, c, h, w = _bchw(x.shape, nchw)
    _, n, oh_, ow_ = _bchw(y.shape, nchw)
    kh_, kl, np_ = wk.shape
    kw_ = kl // c
    wp = ow_ + kw_ - 1   # the padded rows' width
    a, e = inner
    width = e - a
    pixels = oh_ * ow_
    xf, wf, yf = x.reshape(-1), wk.reshape(-1), y.reshape(-1)
    for it in prange(bsz * bands):
        b, k = it // bands, it % bands
        oh0, oh1 = k * oh_ // bands, (k + 1) * oh_ // bands
        xb = _on_a_line((oh1 - oh0 + kh_ - 1) * wp * c)   # padded rows oh0 .. oh1 + KH - 2
        _padded_rows(xf, nchw, b, oh0, oh1 + kh_ - 1, pt, pl, h, w, c, oh_ + kh_ - 1, wp, xb)
        # the band's outputs: a channels-last block of them (NCHW), or y itself
        yb = _on_a_line((oh1 - oh0) * ow_ * np_ if nchw else 0)
        yo, ys, y00 = (yb, np_, 0) if nchw else (yf, n, (b * oh_ + oh0) * ow_ * n)
        q0, oh, ow = 0, oh0, 0
        while q0 < (oh1 - oh0) * width:
            pn, last = _pixel_block(q0, (oh1 - oh0) * width, oh, ow, width, P, 0, oh_)
            kh0, kh1 = max(0, pt - last), min(kh_, pt + h - oh)   # kernel rows that reach x's rows
            x0 = ((oh - oh0 + kh0) * wp + a + ow) * c
            y0 = y00 + ((oh - oh0) * ow_ + a + ow) * ys
            for n0 in range(0, n, J):
                product = (xb, x0, (c, ow, width, (wp - width) * c), pn, (0, wp * c, 1),
                           wf, kh0 * kl * np_ + n0, (0, kl * np_, np_), (1, max(0, kh1 - kh0), kl), yo, y0 + n0)
                if width == ow_:   # the output rows run on as one
                    tile(*product, ys, 1, min(J, ys - n0), False)
                else:
                    tile(*product, (ys, ow, width, (ow_ - width) * ys), 1, min(J, ys - n0), False)
            q0, oh, ow = _next_pixel(q0, pn, oh, ow, width)
        for m in range(ow_ - width):   # the outer columns
            col = m if m < a else e + m - a
            kw0, kw1 = max(0, pl - col), min(kw_, pl + w - col)   # kernel columns that reach x's columns
            for top in range(oh0, oh1, P):
                pn = min(P, oh1 - top)
                kh0, kh1 = max(0, pt - (top + pn - 1)), min(kh_, pt + h - top)
                x0 = ((top - oh0 + kh0) * wp + col + kw0) * c
                for n0 in range(0, n, J):
                    tile(xb, x0, wp * c, pn, (0, wp * c, 1), wf, (kh0 * kl + kw0 * c) * np_ + n0, (0, kl * np_, np_),
                         (1, max(0, kh1 - kh0), max(0, kw1 - kw0) * c), yo, y00 + ((top - oh0) * ow_ + col) * ys + n0,
                         ow_ * ys, 1, min(J, ys - n0), False)
        if nchw:
            transpose(yb, 0, np_, yf, b * n * pixels + oh0 * ow_, pixels, (oh1 - oh0) * ow_, n)


def _bands(plan, blk):
    """Bands of output rows per image for _forward_bands with blk's blocks: enough that each band's
    channels-last copy of x and, for NCHW, block of outputs (C_out padded to blk's lanes) stay
    within _BAND_BYTES, and that a small batch still gives every thread work."""
    x_row, y_row = plan.wp * plan.c * 4, plan.ow * blk.padded(plan.cout) * 4 if plan.nchw else 0
    rows = max(1, (_BAND_BYTES - (plan.kh - 1) * x_row) // (x_row + y_row))
    per_image = -(-4 * numba.get_num_threads() // plan.n)   # bands per image for ~4 per thread
    return min(plan.oh, max(-(-plan.oh // rows), per_image))


# A band's copy of x and block of outputs: the seed models' images whole (mnist conv2's input grad
# 280 KiB), within Zen 3's 512 KB L2 beside the weights. Against bands of 64 KB of x alone (2-4
# an image), their input grads took 0.93-0.99x the time at 1 thread and 0.95-1.03x at 2, cifar
# conv2's and mnist conv2's forwards 0.96-0.98x (AVX-512; docs/performance.md, session 31): fewer
# halo rows copied twice, fewer blocks cut short at a band's end.
_BAND_BYTES = 320 << 10
# The padded rows of x the first layers' weight grad copies at a time (_backward_weight_shallow,
# _slabs): within half of a 32 KB L1, beside a band of dy. cifar10-cnn's first layer's images are
# one slab (34 rows of 408 bytes).
_SLAB_BYTES = 16 << 10


def _slabs(plan):
    """(band, slab) for _backward_weight_shallow: dy's bands of output rows (~64 output pixels),
    and the output rows whose padded rows of x it copies at a time, whole bands (at least one)
    within _SLAB_BYTES."""
    band = max(1, 64 // plan.ow)
    rows = (_SLAB_BYTES // (plan.wp * plan.c * 4) - plan.kh) // plan.stride + 1
    return band, max(band, rows // band * band)


# The weights the NHWC forward's run-on pixel blocks read in one pass over a line of them (_chunk),
# where the whole kernel's are more than L1 holds: half of a 48 KB L1. The whole kernel's weights
# streamed from L2 with every block (mnist conv2's 72 KB) took the micro-kernel from ~190 GFLOP/s
# to ~170 on the Intel Xeon (1 thread, AVX-512, 6 x 64); a kernel row a pass, mnist conv2's forward
# took 0.91-0.98x the time at 1 and 2 threads, and 0.90-0.96x with AVX2's blocks (emulated), its
# backward 0.93-1.04x, cifar conv3's forward and backward 0.97-1.02x (docs/performance.md, session
# 32). Passes of half a row (cifar conv4's 48 KB rows) took 0.95-1.04x; of 12 and 8 KB on mnist
# conv2, 1.03 and 1.09x. Not measured with a 32 KB L1 (the Zen 3 and Zen 4), where 24 KB leaves
# little room for x's and y's lines: there the blocks keep the whole kernel, as before.
_CHUNK_BYTES = 24 << 10


def _chunk(plan, np_, l1=None):
    """Kernel rows per pass of _forward_nhwc's run-on pixel blocks over a line of them (np_ lanes of
    weights a step): as many as fit _CHUNK_BYTES; all of them where the kernel's weights fit the
    L1 data cache (`l1` bytes, by default the host's), where L1 is under twice _CHUNK_BYTES or
    unknown, or where one row's weights are more than _CHUNK_BYTES. Each pass adds onto the
    outputs of the passes before."""
    row, l1 = plan.kl * np_ * 4, (_isa.isa_info()["l1d"] if l1 is None else l1) or 0
    if l1 < 2 * _CHUNK_BYTES or plan.kh * row <= l1 or row > _CHUNK_BYTES:
        return plan.kh
    return _CHUNK_BYTES // row


def _columns_apart(plan, bands, p):
    """(a, e): the output columns the pixel-block forwards (_forward_bands, and _forward_nhwc as
    one band an image) run in blocks of p consecutive pixels, running on over row ends; each other
    column runs apart, in blocks of p rows down it over its kernel columns that reach x. Of the
    splits between all columns run on and only those whose windows lie wholly on x (_inner), the
    one with the fewest block steps (_block_steps), ties to the most run on, then to the left ones
    run on; under _COLUMN_DEPTH deep, all run on. A padding column's blocks of p rows can leave
    rows idle, and a run-on block that reaches a padding row runs the kernel rows its other rows
    need: cifar conv4's input grad (15 x 15 from 13 x 13, padded by 2) takes 276 steps with its
    four padding columns apart, 270 with the inner left one run on, 297 all on, and its kernel
    took 1.014-1.041x and 1.089-1.116x the time of the 270 (AVX-512 and emulated AVX2, 1 and 2
    threads; docs/performance.md, session 31)."""
    if plan.kh * plan.kl < _COLUMN_DEPTH:
        return 0, plan.ow
    return _split(p, bands, plan.oh, plan.ow, plan.kh, plan.kw, plan.stride, plan.data)


@functools.lru_cache(maxsize=256)
def _split(p, bands, oh_, ow_, kh, kw, s, data):
    """_columns_apart's choice for a geometry (cached: a layer's calls share it)."""
    lo, hi = _inner(kw, ow_, data[2], data[3], s, p)
    splits = [(a, e) for a in range(lo + 1) for e in range(hi, ow_ + 1)]
    return min(splits, key=lambda ae: (_block_steps(p, bands, oh_, ow_, kh, kw, s, data, *ae), ae[0] - ae[1], ae[0]))


def _block_steps(p, bands, oh_, ow_, kh, kw, s, data, a, e):
    """The block steps of an image (a step: one kernel row by one kernel column of a block's
    reduction) with the output columns a:e run on in blocks of p pixels (a:e at least p wide, as
    _inner makes it) and the others apart, band by band: each block runs the kernel rows that reach
    x from any of its output rows, and all kernel columns run on or those of its column apart."""
    d0, d1, c0, c1 = data
    reach = _outer_reach(kw, ow_, s, c0, c1, a, e)
    width, steps = e - a, 0
    for k in range(bands):
        oh0, oh1 = k * oh_ // bands, (k + 1) * oh_ // bands
        q = np.arange(0, (oh1 - oh0) * width, p)   # the run-on blocks' first pixels
        steps += kw * _reach(kh, s, d0, d1, oh0 + q // width, oh0 + (np.minimum(q + p, (oh1 - oh0) * width) - 1) // width).sum()
        top = np.arange(oh0, oh1, p)   # the outer columns' blocks' first rows
        steps += reach * _reach(kh, s, d0, d1, top, np.minimum(top + p, oh1) - 1).sum()
    return int(steps)


def _reach(k_, s, d0, d1, first, last):
    """The kernel rows (or columns) of k_ that reach x's d0:d1 of the padded input from some of
    the output rows (or columns) first..last, stride s (numbers or arrays)."""
    return np.maximum(0, np.minimum(k_, d1 - first * s) - np.maximum(0, d0 - last * s))


def _outer_reach(kw, ow_, s, c0, c1, a, e):
    """The kernel columns that reach x's columns c0:c1, summed over the output columns apart
    (all but a:e)."""
    return sum(int(_reach(kw, s, c0, c1, o, o)) for o in [*range(a), *range(e, ow_)])


# reduction depth from which the stride-1 NCHW forward runs _forward_bands (pixel blocks, with
# any block shape) when its outputs fill a block of lanes. Shallower ones (the first layers, depth
# 9 and 27) run _forward_shifted: there pixel blocks spent more on their transposed stores than
# their full lanes saved. So do products with fewer outputs than lanes (the input grads of layers
# with C_in under the lanes), whose pixel blocks leave lanes idle: shifted planes' blocks took
# 0.83-0.91x the time of the former plane loop at C_in 8 and 16 on AVX-512, bands 1.5-2.5x
_PIXEL_DEPTH = 64


@tiled
def _forward_shifted(x, pt, pl, wr, groups, y):
    """Stride 1: y (B, N, OH, OW) from NCHW x (B, C, H, W), zero-padded at (pt, pl), and w as
    _row_panels. Each image's x is first copied into KW*C shifted planes of OW columns, plane
    (kw, c) holding the padded channel c's columns kw:kw + OW, so output pixel q = oh*OW + ow
    reads position q + kh*OW of every plane: blocks are P output channels x J consecutive output
    pixels, contiguous in both x's planes and y, with no lanes on padding columns and whole-lane
    vector stores (row blocks of mnist conv1's 26-pixel rows stored 26 of 32 lanes one float at a
    time). Every block shape: with AVX2's 6 x 16 (emulated on the AVX-512 host, 1 thread) it took
    0.49x the row blocks' time on mnist conv1 and 0.78x on cifar conv1. An image of at least J
    pixels has its last block overlap the one before, so every block stores whole vectors (the
    overlap's outputs are computed twice alike); an image under J pixels is one partial block,
    stored element by element. Each block first prefetches the output lines its rows store two
    blocks on (_prefetch_rows). Each of the `groups` (contiguous runs of images, as many as the
    threads) zeroes its planes once, for all its images: every image's copies write the same
    floats (_shift_plane), so the padding stays zero (cifar conv1 0.97-0.99x the time of zeroing
    them per image; session 37)."""
    bsz, c, h, w = x.shape
    _, kh_, kw_, _, _ = wr.shape
    _, n, oh_, ow_ = y.shape
    pixels, kl = oh_ * ow_, kw_ * c
    slot = (oh_ + kh_ - 1) * ow_ + J   # J floats of slack: an image under J pixels has lanes past the rows
    xf, wf, yf = x.reshape(-1), wr.reshape(-1), y.reshape(-1)
    for g in prange(groups):
        planes = _on_a_line(kl * slot)
        planes[:] = 0.0
        for b in range(g * bsz // groups, (g + 1) * bsz // groups):
            for kw in range(kw_):
                for ci in range(c):
                    _shift_plane(xf, (b * c + ci) * h * w, h, w, pt, kw - pl, oh_ + kh_ - 1, ow_, planes,
                                 (kw * c + ci) * slot)
            for n0 in range(0, n, P):
                for q in range(0, pixels, J):
                    q0 = max(0, min(q, pixels - J))   # the last block overlaps the one before: whole-vector stores
                    y0 = (b * n + n0) * pixels + q0
                    _prefetch_rows(yf, y0, min(P, n - n0), pixels, J)
                    tile(wf, n0 * kh_ * kl, 1, min(P, n - n0), (0, kl * P, P), planes, q0, (0, ow_, slot), (1, kh_, kl),
                         yf, y0, pixels, 1, min(J, pixels - q0), False)


@helper
def _shift_plane(xf, x0, h, w, pt, d, rows, ow_, planes, p0):
    """Plane p0 of `rows` rows of ow_ columns, zero wherever this writes nothing, gets the channel
    at x0 (h x w) from row pt, shifted d columns: planes[p0 + (ih + pt)*ow_ + j] = x[ih, j + d]
    where 0 <= j + d < w. When rows are as wide as x's ('same' padding) that is one run of the
    whole channel, whose floats that wrapped round a row end are then zeroed (row by row, in
    `copy`'s vector runs, took 1.03x the time on 8 x 8 and 12 x 12 images; docs/performance.md,
    session 28). It writes the same floats whatever x holds, so a plane serves image after image
    (_forward_shifted)."""
    j0, j1 = max(0, -d), min(ow_, w - d)   # plane columns inside x
    if ow_ == w and pt + h <= rows:
        k0, k1 = max(0, -d), h * w - max(0, d)
        copy(xf, x0 + k0 + d, planes, p0 + pt * ow_ + k0, k1 - k0)
        if j1 - j0 < ow_:
            for ih in range(h):
                for j in range(j0):
                    planes[uint64(p0 + (ih + pt) * ow_ + j)] = 0.0
                for j in range(j1, ow_):
                    planes[uint64(p0 + (ih + pt) * ow_ + j)] = 0.0
        return
    for ih in range(max(0, -pt), min(h, rows - pt)):
        copy(xf, x0 + ih * w + j0 + d, planes, p0 + (ih + pt) * ow_ + j0, j1 - j0)


@helper
def _prefetch_rows(yf, o, pn, stride, lanes):
    """Prefetch for writing the lines that rows p < pn of a block of `lanes` NCHW output positions
    (rows `stride` apart, the block at o) will store _AHEAD blocks on. A block's P output planes are P
    store streams, which the hardware prefetchers follow poorly when the planes are not whole pages
    (mnist conv1's, 2704 B apart: NCHW/NHWC forward 1.15-1.28 without, 0.79-1.06 with, 1 thread)."""
    for p in range(pn):
        for k in range(0, lanes, 16):   # a 64-byte line per 16 floats
            prefetch_write(yf, o + p * stride + _AHEAD * lanes + k)


_AHEAD = 2


@tiled
def _backward_weight(x, x_shape, data, dy, nchw, s, parts, dw):
    """dw (KH, KW*C, N) = sum over pixels of patch x dy, from x as given (NCHW or NHWC) padded to
    x_shape (B, Hp, Wp, C), whose rows data[0]:data[1] and columns data[2]:data[3] are x and the
    rest zero padding, and dy in the layout's own order (NHWC dy with channels padded to J).
    Summed over bands of output pixels, each band's x and dy kept in cache while its blocks
    accumulate into the part: ~64 pixels in NHWC, ~1024 in NCHW (measured best for each on
    cifar10-cnn's and mnist-cnn's layers: NCHW's longer bands are 8-15% faster at 1 thread; in
    NHWC they were 3-9% slower on three layers of four). Images are split into len(parts)
    groups, each summed into its own part in parallel, then added. Each block sums only over the
    output pixels whose windows put some of its patch elements on x rather than on the padding
    (_spans): on 'same' layers the others add zeros (cifar conv3: 1 output row of 15 for kernel
    rows 0 and 2, 1 column of 15 for the blocks within kernel column 0 or 2).

    The vector lanes need a contiguous operand: NHWC blocks are 6 patch elements x 16 output
    channels (lanes along dy's channels, parts (KH, KW*C, Np)); NCHW blocks are 6 output channels
    (planes of dy, read in place) x 16 patch elements (lanes along x's channels-last copy, parts
    (KH, N, KW*C padded), added up transposed). Transposing x rather than dy for NCHW: first
    layers' x is 10-27x smaller, and no layer's is much larger.

    x (NCHW, or NHWC) is copied a band at a time into scratch of each group's own, on a cache line
    (_on_a_line), channels-last and zero-padded to x_shape's rows and columns (_x_rows); NHWC x
    that needs no padding is read where it is. Against a copy of all of x made before the kernel,
    which wrote it to memory and read it back: the seed models' NCHW weight grads took
    0.92-0.98x the time at 1 thread and 0.92-0.96x at 2, cifar conv3's NHWC one ('same')
    0.96-1.00x and 0.96x (AVX-512; emulated AVX2 0.94x on mnist conv2's NCHW). From numba's own
    allocation, 0 or 32 bytes past a line, NCHW's took 0.99-1.08x the time: its J-float loads of
    the copy straddled two lines (docs/performance.md, session 36)."""
    _, hp, wp, c = x_shape
    bsz, n, oh_, ow_ = _bchw(dy.shape, nchw)
    _, _, h, w = _bchw(x.shape, nchw)
    groups, kh_, _, _ = parts.shape
    kl, lanes = dw.shape[1], parts.shape[3]
    band = max(1, (1024 if nchw else 64) // ow_)
    rows_on = _spans(kh_, 1, 1, oh_, data[0], data[1], s)   # by kernel row
    cols_on = _spans(kl, J if nchw else P, c, ow_, data[2], data[3], s)   # by block of patch elements
    pt, pl = data[0], data[2]
    copied = 0 if _x_itself(nchw, pt, pl, h, w, hp, wp) else ((min(oh_, band) - 1) * s + kh_) * wp * c
    xs, df = x.reshape(-1), dy.reshape(-1)
    for g in prange(groups):
        part = parts[g].reshape(-1)
        part[:] = 0.0
        xb = _on_a_line(copied + J)   # a band's padded rows; J floats of slack: NCHW's lanes read past them
        xb[copied:] = 0.0
        for b in range(g * bsz // groups, (g + 1) * bsz // groups):
            for oh0 in range(0, oh_, band):
                xf, x00 = _x_rows(xs, nchw, b, oh0 * s, (min(oh_, oh0 + band) - 1) * s + kh_, pt, pl, h, w, c, hp, wp,
                                  xb)
                for kh in range(kh_):
                    oh1, oh2 = _within(rows_on[kh, 0], rows_on[kh, 1], oh0, min(oh_, oh0 + band))
                    x0 = x00 + (oh1 * s + kh) * wp * c
                    if nchw:
                        for n0 in range(0, n, P):
                            for i in range(cols_on.shape[0]):
                                t0, ow1, ow2 = i * J, cols_on[i, 0], cols_on[i, 1]
                                tile(df, ((b * n + n0) * oh_ + oh1) * ow_ + ow1, oh_ * ow_, min(P, n - n0),
                                     (0, ow_, 1), xf, x0 + ow1 * s * c + t0, (0, s * wp * c, s * c),
                                     (1, oh2 - oh1, ow2 - ow1), part, (kh * n + n0) * lanes + t0, lanes, 1, J, True)
                    else:
                        for i in range(cols_on.shape[0]):
                            t0, ow1, ow2 = i * P, cols_on[i, 0], cols_on[i, 1]
                            for n0 in range(0, n, J):
                                tile(xf, x0 + ow1 * s * c + t0, 1, min(P, kl - t0), (0, s * wp * c, s * c),
                                     df, ((b * oh_ + oh1) * ow_ + ow1) * n + n0, (0, ow_ * n, n),
                                     (1, oh2 - oh1, ow2 - ow1), part, (kh * kl + t0) * lanes + n0, lanes, 1, J, True)
    _sum_parts(parts, nchw, dw)


@helper
def _span(k0, k1, o_, d0, d1, s):
    """(lo, hi): the outputs o < o_ (rows or columns, stride s) from the first to the last whose
    window reads x's rows or columns d0:d1 of the padded input at some kernel offset k0 <= k <= k1
    (o*s + k in [d0, d1)). Empty (lo = hi) when there are none."""
    lo = min(o_, max(0, -((k1 - d0) // s)))   # ceil((d0 - k1) / s)
    return lo, max(lo, min(o_, (d1 - 1 - k0) // s + 1))


@helper
def _spans(k_, step, per, o_, d0, d1, s):
    """_span of each block of `step` elements 0, step, ... < k_, `per` elements to a kernel
    offset (KW*C patch elements, C to a column), once a call: computed per block, the integer
    divisions took about what skipping saved on the first layers' short blocks (session 25)."""
    spans = np.empty(((k_ + step - 1) // step, 2), np.int64)
    for i in range(spans.shape[0]):
        spans[i, 0], spans[i, 1] = _span(i * step // per, (min(k_, (i + 1) * step) - 1) // per, o_, d0, d1, s)
    return spans


@helper
def _within(lo, hi, o0, o1):
    """lo:hi clipped to o0:o1, empty at o0 or o1 when they do not meet."""
    lo = min(o1, max(o0, lo))
    return lo, max(lo, min(o1, hi))


@tiled
def _backward_weight_shallow(x, x_shape, data, dy, nchw, run_on, s, band, slab, parts, dw):
    """The first layers' weight grad (_shallow): _backward_weight's NHWC blocks (P patch elements
    x J output channels, parts (KH, KW*C, Np)), with NCHW's dy transposed a band at a time into a
    channels-last scratch block (8 x 8 blocks, in cache) rather than lanes along KW*C (mnist
    conv1: 3 of 32 lanes), and, run_on, blocks of patch elements e = kh*KW*C + t running on over
    kernel rows (with _shallow_block's P = KW*C, one kernel row a block). Each block sums over the
    output pixels whose windows put some of its patch elements on x, as in _backward_weight. A
    kernel apart from _backward_weight, so that one's compiled loops, the deeper layers', stay as
    they were measured.
    x (NCHW, or NHWC) is copied a slab of output rows at a time (_SLAB_BYTES of its padded rows,
    whole bands of dy's rows) into scratch of each group's own, as _backward_weight copies its
    bands (_x_rows); NHWC x that needs no padding is read where it is. A copy of all of x, made
    before the kernel (x_nhwc), wrote to memory and was read back from it: cifar conv1's weight
    grad by slabs took 0.97-1.00x the time at 1 thread and 0.89-0.95x at 2 (AVX-512; emulated
    AVX2 0.96-0.99x, 0.93-0.94x), mnist conv1's NCHW one 0.98-0.99x and 0.93-1.02x
    (docs/performance.md, session 36)."""
    _, hp, wp, c = x_shape
    bsz, n, oh_, ow_ = _bchw(dy.shape, nchw)
    _, _, h, w = _bchw(x.shape, nchw)
    groups, kh_, kl, lanes = parts.shape
    pt, pl = data[0], data[2]
    copied = 0 if _x_itself(nchw, pt, pl, h, w, hp, wp) else ((min(oh_, slab) - 1) * s + kh_) * wp * c
    xs = x.reshape(-1)
    # each block of patch elements e0 .. e0 + pn - 1 (from kernel row kh, element t0): e0, pn, kh,
    # t0, and the output rows and columns it sums over (_span of the kernel rows, and of the
    # columns, its elements reach)
    count = (kh_ * kl + P - 1) // P if run_on else kh_ * ((kl + P - 1) // P)
    blocks = np.empty((count, 8), np.int64)
    e0 = 0
    for i in range(count):
        kh, t0 = e0 // kl, e0 % kl
        pn = min(P, kh_ * kl - e0) if run_on else min(P, kl - t0)
        kh1 = (e0 + pn - 1) // kl
        kw0, kw1 = (t0 // c, (t0 + pn - 1) // c) if kh1 == kh else (0, (kl - 1) // c)
        blocks[i, 0], blocks[i, 1], blocks[i, 2], blocks[i, 3] = e0, pn, kh, t0
        blocks[i, 4], blocks[i, 5] = _span(kh, kh1, oh_, data[0], data[1], s)
        blocks[i, 6], blocks[i, 7] = _span(kw0, kw1, ow_, data[2], data[3], s)
        e0 += pn
    df = dy.reshape(-1)
    for g in prange(groups):
        part = parts[g].reshape(-1)
        part[:] = 0.0
        dyt = _on_a_line(band * ow_ * lanes if nchw else 0)   # a band of dy, channels-last
        dyt[:] = 0.0
        xb = _on_a_line(copied)   # a slab of x's padded rows, channels-last
        for b in range(g * bsz // groups, (g + 1) * bsz // groups):
            for s0 in range(0, oh_, slab):
                xf, x00 = _x_rows(xs, nchw, b, s0 * s, (min(oh_, s0 + slab) - 1) * s + kh_, pt, pl, h, w, c, hp, wp, xb)
                for oh0 in range(s0, min(oh_, s0 + slab), band):
                    rows = min(band, oh_ - oh0)
                    d, d0, dn = df, (b * oh_ + oh0) * ow_ * n, n
                    if nchw:
                        transpose(df, (b * n * oh_ + oh0) * ow_, oh_ * ow_, dyt, 0, lanes, n, rows * ow_)
                        d, d0, dn = dyt, 0, lanes
                    for i in range(count):
                        e0, pn, kh, t0 = blocks[i, 0], blocks[i, 1], blocks[i, 2], blocks[i, 3]
                        oh1, oh2 = _within(blocks[i, 4], blocks[i, 5], oh0, oh0 + rows)
                        ow1, ow2 = blocks[i, 6], blocks[i, 7]
                        x0 = x00 + (oh1 * s + kh) * wp * c + ow1 * s * c + t0
                        y0 = d0 + ((oh1 - oh0) * ow_ + ow1) * dn
                        for n0 in range(0, n, J):
                            tile(xf, x0, (1, t0, kl, wp * c - kl), pn, (0, s * wp * c, s * c), d, y0 + n0,
                                 (0, ow_ * dn, dn), (1, oh2 - oh1, ow2 - ow1), part, e0 * lanes + n0, lanes, 1, J, True)
    _sum_parts(parts, False, dw)


def _shallow(blk, kl):
    """Whether KW*C_in (kl) is at most 16, or half of a wider block's lanes (the first layers: 3
    and 9), where the weight grad runs _backward_weight_shallow: NCHW's with dy transposed by
    bands (mnist conv1's 1.7x faster at 1 thread, 32 lanes), and blocks of patch elements
    running on over kernel rows when kl >= P (cifar conv1's 1.2-1.3x faster; on the 32/64-channel
    layers that form measured no faster in session 5). 16-lane blocks took it in session 25:
    emulated AVX2, their weight grads ran in 0.37-0.87x the time (docs/performance.md)."""
    return 2 * kl <= max(32, blk.lanes)


# the most floats a shallow weight-grad block holds in accumulators, by the machine block's lanes:
# 28 of AVX-512's 32 registers (32 lanes: 512-bit vectors), 12 of AVX2's 16 (16 lanes)
_SHALLOW_FLOATS = {32: 28 * 16, 16: 12 * 8}
# Runs of images a thread for the first layers' weight grad (parts and scratch of their own each):
# at 2 threads, two runs each against one, the weight grad alone of cifar conv1 and mnist conv1
# took 0.86-0.98x the time (1.01 once), numba's scheduler evening out a thread that starts late;
# the deep weight grads' parts are larger to sum, and two runs a thread took them 1.00-1.09x
# (docs/performance.md, session 37)
_SHALLOW_RUNS = 2


def _shallow_block(block, blk, kl):
    """The first layers' weight-grad block: one kernel row of patch elements (KW*C_in rows) by
    blk's lanes, so no row of a block idles (the machine's 8 x 32 used 3 of its 8 rows on mnist
    conv1, ran cifar conv1's 27 as 8 + 8 + 8 + 3): with no block asked for or set by
    PROFILER_KERNEL_BLOCK, and while the rows fit in registers (_SHALLOW_FLOATS: cifar conv1's 9
    rows on AVX2 do not, and run on in 6 x 16). mnist conv1's weight grad took 0.45x the time in
    3 x 32, cifar conv1's 0.83x in 9 x 32 (1 thread, AVX-512; docs/performance.md, session 25)."""
    if not machine_chosen(block) or kl * blk.lanes > _SHALLOW_FLOATS.get(blk.lanes, 0):
        return blk
    return block_of((kl, blk.lanes))


@helper
def _sum_parts(parts, transposed, dw):
    """dw (KH, KW*C, N) = the sum of the per-group parts: (KH, KW*C, N padded) or, transposed,
    (KH, N, KW*C padded)."""
    groups, kh_, kl, n = parts.shape[0], dw.shape[0], dw.shape[1], dw.shape[2]
    for kh in range(kh_):
        for t in range(kl):
            for j in range(n):
                total = 0.0
                for g in range(groups):
                    total += parts[g, kh, j, t] if transposed else parts[g, kh, t, j]
                dw[kh, t, j] = total


@tiled
def _backward_input_nhwc(dyp, wt, s, n, rows, dxp):
    """Rows rows[0]:rows[1] of the padded input grad dxp (B, Hp, Wp, C), from dyp (B, OH, OW, Np)
    and wt (KH, N, Lp) = w transposed, L = KW*C padded to J. Each row is owned by one iteration."""
    bsz, _, wp, c = dxp.shape
    _, oh_, ow_, np_ = dyp.shape
    kh_, _, lp = wt.shape
    kl = wp * c - (ow_ - 1) * s * c            # KW*C: Wp = (OW - 1)*s + KW
    i0, i1 = rows
    nrows = i1 - i0
    df, wf = dyp.reshape(-1), wt.reshape(-1)
    for r in prange(bsz * nrows):
        b, i = r // nrows, i0 + r % nrows
        row = dxp[b, i].reshape(-1)
        row[:] = 0.0
        for kh in range(max(0, i - (oh_ - 1) * s), min(kh_, i + 1)):
            if (i - kh) % s:
                continue
            oh = (i - kh) // s
            for t0 in range(0, kl, J):
                for ow0 in range(0, ow_, P):
                    tile(df, ((b * oh_ + oh) * ow_ + ow0) * np_, np_, min(P, ow_ - ow0), (0, 0, 1),
                         wf, kh * n * lp + t0, (0, 0, lp), (1, 1, n),
                         row, ow0 * s * c + t0, s * c, 1, min(J, kl - t0), True)


@tiled
def _backward_input_patches(dy, nchw, wt, kernel, pads, dx):
    """Stride 1, the first layers' input grad (C_in under a quarter of the lanes): every output
    pixel's whole patch gradient (its KH*KW*C_in values) computed at once, then added into dx
    where the patch sits. The full correlation's blocks run over C_in (mnist conv1: 1 of 8 rows
    used) and the scatter's lanes over KW*C_in (3 or 9 of 16 or 32); the patch fills 9 or 27
    (1 thread, AVX-512's 8 x 32: mnist conv1's backward 0.33x the time in NCHW, 0.66x in NHWC,
    cifar conv1's 0.50-0.57x and 0.68-0.70x; emulated AVX2's 6 x 16, the same four: 0.48x, 0.80x,
    0.85x and 0.90x).
    NCHW: zt (patch element, output pixel) = wt (KH*KW*C, N) @ dy's planes, blocks of P patch
    elements x J consecutive output pixels (dy read in place, whole-lane stores: the last block of
    an image starts J before its end, so no lane reads past dy), an image at a time; each patch
    element's rows are then added into its channel of dx as runs along the rows.
    NHWC: z (output pixel, patch element) = dy @ wt (N, KH*KW*C padded to J), blocks of P output
    pixels x J patch elements, an output row at a time; each pixel's KW*C runs (one per kernel row)
    are then added into dx's rows."""
    kh_, kw_ = kernel
    pt, pl = pads
    bsz = dy.shape[0]
    df, wf, dxf = dy.reshape(-1), wt.reshape(-1), dx.reshape(-1)
    _, n, oh_, ow_ = _bchw(dy.shape, nchw)
    _, c, h, w = _bchw(dx.shape, nchw)
    pixels, lr, lp = oh_ * ow_, kh_ * kw_ * c, wt.shape[1]
    for b in prange(bsz):
        dxf[b * h * w * c:(b + 1) * h * w * c] = 0.0
        if nchw:
            zt = np.empty(lr * pixels, np.float32)
            for e0 in range(0, lr, P):
                for q in range(0, pixels, J):
                    q0 = min(q, pixels - J)
                    tile(wf, e0 * n, n, min(P, lr - e0), (0, 0, 1), df, b * n * pixels + q0, (0, 0, pixels), (1, 1, n),
                         zt, e0 * pixels + q0, pixels, 1, J, False)
            for e in range(lr):
                kh, kw, ci = e // (kw_ * c), e // c % kw_, e % c
                o0, o1 = max(0, pl - kw), min(ow_, w + pl - kw)   # output columns whose patch column is in x
                for oh in range(max(0, pt - kh), min(oh_, h + pt - kh)):
                    _add(zt, e * pixels + oh * ow_ + o0,
                         dxf, ((b * c + ci) * h + oh + kh - pt) * w + o0 + kw - pl, o1 - o0)
            continue
        z = _on_a_line(ow_ * lp)
        for oh in range(oh_):
            for ow0 in range(0, ow_, P):
                for t0 in range(0, lp, J):
                    tile(df, ((b * oh_ + oh) * ow_ + ow0) * n, n, min(P, ow_ - ow0), (0, 0, 1), wf, t0, (0, 0, lp),
                         (1, 1, n), z, ow0 * lp + t0, lp, 1, J, False)
            for kh in range(max(0, pt - oh), min(kh_, h + pt - oh)):
                for ow in range(ow_):
                    k0, k1 = max(0, pl - ow), min(kw_, w + pl - ow)   # kernel columns inside x
                    _add(z, ow * lp + (kh * kw_ + k0) * c, dxf, ((b * h + oh + kh - pt) * w + ow + k0 - pl) * c,
                         (k1 - k0) * c)


@helper
def _add(s, s0, d, d0, n):
    """d[d0:d0+n] += s[s0:s0+n] on flat arrays."""
    for j in range(n):
        d[uint64(d0 + j)] += s[uint64(s0 + j)]


@kernel
def _pack(src, nchw, pt, pl, dst):
    """dst (B, Hp, Wp, Cp) = src (NCHW or NHWC) placed at row pt, column pl; zero elsewhere
    (padding rows, columns and channels)."""
    _, hp, wp, cp = dst.shape
    if nchw:
        _, c, sh, sw = src.shape
    else:
        _, sh, sw, c = src.shape
    h, w = min(sh, hp - pt), min(sw, wp - pl)   # 'valid' with stride may never read the last rows
    sf, df = src.reshape(-1), dst.reshape(-1)
    for b in prange(dst.shape[0]):
        d = dst[b]
        d[:] = 0.0
        for ih in range(h):
            if nchw:   # a (C, W) block of channel rows -> (W, C)
                transpose(sf, (b * c * sh + ih) * sw, sh * sw, df, ((b * hp + pt + ih) * wp + pl) * cp, cp, c, w)
            elif cp == c:   # the row's pixels are one run in both
                copy(sf, (b * sh + ih) * sw * c, df, ((b * hp + pt + ih) * wp + pl) * c, w * c)
            else:
                for iw in range(w):
                    copy(sf, ((b * sh + ih) * sw + iw) * c, df, ((b * hp + pt + ih) * wp + pl + iw) * cp, c)


@kernel
def _unpack(src, pt, pl, nchw, h, w, dst):
    """dst[..., :h, :w] (NCHW or NHWC) = src[:, pt:pt+h, pl:pl+w, :C]: the inverse of _pack."""
    _, hs, ws, cs = src.shape
    if nchw:
        _, c, dh, dw_ = dst.shape
    else:
        _, dh, dw_, c = dst.shape
    sf, df = src.reshape(-1), dst.reshape(-1)
    for b in prange(dst.shape[0]):
        for ih in range(h):
            if nchw:   # a (W, C) block of pixels -> (C, W)
                transpose(sf, ((b * hs + pt + ih) * ws + pl) * cs, cs, df, (b * c * dh + ih) * dw_, dh * dw_, w, c)
            elif cs == c:
                copy(sf, ((b * hs + pt + ih) * ws + pl) * c, df, (b * dh + ih) * dw_ * c, w * c)
            else:
                for iw in range(w):
                    copy(sf, ((b * hs + pt + ih) * ws + pl + iw) * cs, df, ((b * dh + ih) * dw_ + iw) * c, c)


def _few_inputs(c, blk):
    """Whether C_in fills under a quarter of the block's lanes (the first layers: C_in 1 and 3).
    Their stride-1 input grads go by whole patch gradients (_backward_input_patches), whose 9 or
    27 patch elements fill a block: the full correlation would run 1 or 3 output channels along its
    rows, the scatter KW*C_in (3 or 9) along its lanes. Images of fewer pixels than lanes, which
    the patches' NCHW blocks cannot take, go by the full correlation (NCHW) or the scatter (NHWC)."""
    return 4 * c < blk.lanes


def _shapes(x_shape, w_shape, layout, stride, padding):
    """Check the geometry (stride checked by positive_int); return (n, c, h, w, kh, kw, cout, oh, ow,
    pad_top, pad_left)."""
    check_layout(layout)
    if padding not in ("valid", "same"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ValueError(f"x must be 4-D ({layout}) and w 4-D (KH, KW, C_in, C_out), got {x_shape} and {w_shape}")
    n, c, h, wd = x_shape if layout == "NCHW" else (x_shape[0], x_shape[3], x_shape[1], x_shape[2])
    kh, kw, cin, cout = w_shape
    if cin != c:
        raise ValueError(f"w {tuple(w_shape)} (KH, KW, C_in, C_out) expects {cin} input channels, "
                         f"but x {tuple(x_shape)} in {layout} has {c}")
    if padding == "valid":
        if kh > h or kw > wd:
            raise ValueError(f"kernel {kh}x{kw} is larger than the input {h}x{wd} "
                             f"(x {tuple(x_shape)}, {layout}) with padding 'valid'")
        return n, c, h, wd, kh, kw, cout, (h - kh) // stride + 1, (wd - kw) // stride + 1, 0, 0
    oh, ow = math.ceil(h / stride), math.ceil(wd / stride)
    pt = max((oh - 1) * stride + kh - h, 0) // 2
    pl = max((ow - 1) * stride + kw - wd, 0) // 2
    return n, c, h, wd, kh, kw, cout, oh, ow, pt, pl


def _lanes(blk, ws, name, a):
    """`a` with its last axis padded with zeros to whole J-lane blocks: itself if it already is and
    starts on a cache line (on_a_line), else a copy in the workspace."""
    n = a.shape[-1]
    if n % blk.lanes == 0 and a.flags.c_contiguous and on_a_line(a):
        return a
    buf = ws.take(name, a.shape[:-1] + (blk.padded(n),))
    buf[..., n:] = 0.0
    buf[..., :n] = a
    return buf


def _row_panels(blk, ws, name, w):
    """w (KH, KW, C, N) as (ceil(N/P), KH, KW, C, P) panels, zero past N, for _forward_shifted."""
    kh, kw, c, n = w.shape
    p = blk.rows
    groups, whole = -(-n // p), n // p
    buf = ws.take(name, (groups, kh, kw, c, p))
    # the whole panels in one copy: a copy a panel took 8 us of Python a call on cifar10-cnn's first layer, 2 now
    buf[:whole] = w[..., :whole * p].reshape(kh, kw, c, whole, p).transpose(3, 0, 1, 2, 4)
    if whole < groups:
        buf[whole, ..., :n - whole * p] = w[..., whole * p:]
        buf[whole, ..., n - whole * p:] = 0.0
    return buf


class _Plan:
    """One conv call: checked arrays, geometry, and the packed operands the kernels read."""

    # the workspace buffer x_nhwc packs into (the forwards that neither read x in place nor copy
    # it by bands). The input grad's full correlation packs dy into a buffer of its own: each pack
    # splits its buffer over the threads by images, and an image is C_in floats a pixel in one and
    # C_out in the other, so one shared buffer moved much of itself between the cores' caches
    # (2 threads, when the weight grad still packed x: each pack 0.25 ms against 0.04-0.05 on
    # cifar conv3's NHWC backward, docs/performance.md)
    padded = "conv2d.xp"

    def __init__(self, x, w, layout, stride, padding, workspace, blk):
        self.x, self.w = f32("x", x, 4), f32("w", w, 4)
        self.blk = block_of(blk)
        self.nchw, self.stride = layout == "NCHW", positive_int("stride", stride, 31)
        self._geometry(*_shapes(self.x.shape, self.w.shape, layout, self.stride, padding))
        self.ws = check_workspace(workspace)

    def _geometry(self, n, c, h, wd, kh, kw, cout, oh, ow, pt, pl):
        self.n, self.c, self.h, self.wd, self.kh, self.kw, self.cout, self.oh, self.ow, self.pt, self.pl = (
            n, c, h, wd, kh, kw, cout, oh, ow, pt, pl)
        self.hp = (oh - 1) * self.stride + kh   # exactly the rows and columns the windows read
        self.wp = (ow - 1) * self.stride + kw
        self.kl = kw * c

    def full_correlation(self, dy):
        """The stride-1 input grad as a forward: dy zero-padded by K-1-pad on each side,
        correlated with w flipped and C_in, C_out swapped (a KH*KW*C_out-deep reduction)."""
        q = object.__new__(_Plan)
        q.x, q.w = dy, self.w[::-1, ::-1].transpose(0, 1, 3, 2)
        q.blk, q.nchw, q.stride, q.ws, q.padded = self.blk, self.nchw, 1, self.ws, "conv2d.dy_full"
        q._geometry(self.n, self.cout, self.oh, self.ow, self.kh, self.kw, self.c, self.h, self.wd,
                    self.kh - 1 - self.pt, self.kw - 1 - self.pl)
        return q

    @property
    def y_shape(self):
        n, cout, oh, ow = self.n, self.cout, self.oh, self.ow
        return (n, cout, oh, ow) if self.nchw else (n, oh, ow, cout)

    def macs(self):
        return self.n * self.oh * self.ow * self.cout * self.kh * self.kl

    def groups(self, per_thread=1):
        """Runs of the batch's images for the kernels that keep scratch of their own a run:
        `per_thread` a thread, at most one an image."""
        return max(1, min(self.n, per_thread * numba.get_num_threads()))

    def nhwc(self, a, shape, pt, pl, name):
        """`a` as an NHWC array of `shape` with `a` at (pt, pl): `a` itself if it already is one."""
        if not self.nchw and a.shape == shape:
            return a
        buf = self.ws.take(name, shape)
        _pack(buf.size, a, self.nchw, pt, pl, buf)
        return buf

    @property
    def data(self):
        """x's rows and columns in the padded input: (top, bottom, left, right), ends exclusive."""
        return self.pt, self.pt + self.h, self.pl, self.pl + self.wd

    @property
    def xp_shape(self):
        """The padded input's shape as NHWC: exactly the rows and columns the windows read."""
        return (self.n, self.hp, self.wp, self.c)

    def x_nhwc(self):
        """The padded input as NHWC (a transposed copy for NCHW)."""
        return self.nhwc(self.x, self.xp_shape, self.pt, self.pl, self.padded)

    def dyp(self, dy, blk):
        """dy as NHWC with whole blocks of blk's lanes of channels (the weight grad's B operand),
        itself wherever it starts: off a line its loads straddle two lines, but that cost the
        weight grads 1.01-1.11x the time and a copy onto a line 1.12-2.12x (docs/performance.md,
        session 37)."""
        return self.nhwc(dy, (self.n, self.oh, self.ow, blk.padded(self.cout)), 0, 0, "conv2d.dyp")


def _weight_grad(plan, dy, block, dw):
    """dw for the plan's x and dy. The first layers' (_shallow) run _shallow_block; the others
    the wide block when its lanes' axis is whole blocks of it: C_out in NHWC, KW*C_in in NCHW
    (6 x 64 against 8 x 32 on the Zen 4: NHWC's 64-channel layers 1.04-1.17x faster, NCHW's
    KW*C_in of 192 1.02-1.05x; of 96, one and a half blocks, 0.75-0.85x), or the half block
    where it pads that axis less (_tile.lanes_block)."""
    kh, kl, cout, nchw = plan.kh, plan.kl, plan.cout, plan.nchw
    shallow = _shallow(plan.blk, kl)
    blk = _shallow_block(block, plan.blk, kl) if shallow else lanes_block(block, kl if nchw else cout)
    groups = plan.groups(_SHALLOW_RUNS if shallow else 1)
    dyl = dy if nchw else plan.dyp(dy, blk)
    part_shape = (cout, blk.padded(kl)) if nchw and not shallow else (kl, blk.padded(cout))
    parts = plan.ws.take("conv2d.dw_parts", (groups, kh) + part_shape)
    if shallow:   # run on over kernel rows when a block's patch elements pass at most one row end
        _backward_weight_shallow[blk](plan.macs(), plan.x, plan.xp_shape, plan.data, dyl, nchw, kl >= blk.rows,
                                      plan.stride, *_slabs(plan), parts, dw.reshape(kh, kl, cout))
    else:
        _backward_weight[blk](plan.macs(), plan.x, plan.xp_shape, plan.data, dyl, nchw, plan.stride, parts,
                              dw.reshape(kh, kl, cout))


def conv2d_output_shape(x_shape, w_shape, *, layout, stride=1, padding="valid"):
    """Shape of conv2d_forward's result, without computing it."""
    check_layout(layout)
    x_shape = shape4("x_shape", x_shape, f"the 4-D shape of x ({layout})")
    w_shape = shape4("w_shape", w_shape, "the 4-D shape of w (KH, KW, C_in, C_out)")
    stride = positive_int("stride", stride, 31)
    n, _, _, _, _, _, cout, oh, ow, _, _ = _shapes(x_shape, w_shape, layout, stride, padding)
    return (n, cout, oh, ow) if layout == "NCHW" else (n, oh, ow, cout)


def conv2d_forward(x, w, *, layout, stride=1, padding="valid", out=None, workspace=None, block=None):
    """Cross-correlation of x with w, no bias (add it with broadcast_add_forward).

    `workspace` (a kernels.Workspace kept by the caller) holds the scratch between calls;
    without one, each call allocates its own. `block` ("RxL") picks the micro-kernel's block
    shape; the default is the machine's, kernels.BLOCK, or its wide block when C_out fills that
    block's lanes (kernels.isa_info()["wide"]), or its half block where C_out pads to at least a
    tenth fewer lanes in it (kernels.isa_info()["half"]), or, for NCHW forwards with output
    channels along the rows (the first layers), the machine's pixel block
    (kernels.isa_info()["pixels"]) where each image's pixels fill its lanes about as well, with
    fewer rows when that pads them less (_tile.rows_block).
    """
    plan = _Plan(x, w, layout, stride, padding, workspace, block)
    y = out_buffer(out, plan.y_shape)
    no_overlap("out", y, {"x": plan.x, "w": plan.w})
    return _forward(plan, block, y)


def _forward(plan, block, y):
    """y = the plan's x, zero-padded at (pt, pl), cross-correlated with its w: the forward, and
    the stride-1 input grad (_Plan.full_correlation)."""
    if plan.nchw and plan.stride == 1 and (plan.kh * plan.kl < _PIXEL_DEPTH or plan.cout < plan.blk.lanes):
        # output channels along the rows, each image's pixels along the lanes
        blk = rows_block(block, plan.cout, plan.oh * plan.ow)
        _forward_shifted[blk](plan.macs(), plan.x, plan.pt, plan.pl, _row_panels(blk, plan.ws, "conv2d.wr", plan.w),
                              plan.groups(), y)
        return y
    blk = lanes_block(block, plan.cout)   # pixel blocks, output channels along the lanes
    wk = _lanes(blk, plan.ws, "conv2d.wk", plan.w).reshape(plan.kh, plan.kl, -1)   # (KH, KW*C, Np)
    if plan.stride == 1 and (plan.nchw or (plan.x.shape != plan.xp_shape and plan.kh * plan.kl < _COLUMN_DEPTH)):
        bands = _bands(plan, blk)
        _forward_bands[blk](plan.macs(), plan.x, plan.nchw, plan.pt, plan.pl, wk, bands,
                            _columns_apart(plan, bands, blk.rows), y)
        return y
    yh = plan.ws.take("conv2d.y", (plan.n, plan.oh, plan.ow, plan.cout)) if plan.nchw else y
    xp, on_x, inner = _nhwc_input(plan, blk)
    _forward_nhwc[blk](plan.macs(), xp, wk, plan.stride, plan.data, on_x, inner, _chunk(plan, wk.shape[2]), yh)
    if plan.nchw:   # strided NCHW goes through NHWC copies: rows of strided pixels are not vectors
        _unpack(y.size, yh, 0, 0, True, plan.oh, plan.ow, y)
    return y


def _nhwc_input(plan, blk):
    """(xp, on_x, inner) for _forward_nhwc: x itself (_reads_in_place, on_x) with the output
    columns whose windows lie wholly on x run on, or the padded copy of x with _columns_apart's
    split."""
    if _reads_in_place(plan, blk):
        return plan.x, True, _on_x(plan.kw, plan.ow, plan.data)
    return plan.x_nhwc(), False, _columns_apart(plan, 1, blk.rows)


def _reads_in_place(plan, blk):
    """Whether _forward_nhwc reads NHWC x where it is, never its padding, rather than a padded
    copy: at stride 1 from _COLUMN_DEPTH deep (where the outer columns run apart), where that
    pays (_in_place_pays)."""
    return (not plan.nchw and plan.stride == 1 and plan.kh * plan.kl >= _COLUMN_DEPTH
            and plan.x.shape != plan.xp_shape and _in_place_pays(blk.rows, plan.oh, plan.ow, plan.kh, plan.kw, plan.data))


def _on_x(kw, ow_, data):
    """The stride-1 output columns whose windows lie wholly on x's columns (_inner, however few)."""
    return _inner(kw, ow_, data[2], data[3], 1, 0)


@functools.lru_cache(maxsize=256)
def _in_place_pays(p, oh_, ow_, kh, kw, data):
    """Whether the stride-1 walk over x itself (_in_place_steps) runs its columns whose windows
    lie wholly on x in whole blocks of p (or all of them run on), and takes at most
    _IN_PLACE_STEPS times the block steps of the padded copy's walk with _split's columns."""
    lo, hi = _on_x(kw, ow_, data)
    if hi - lo < p and hi - lo < ow_:
        return False
    copy_steps = _block_steps(p, 1, oh_, ow_, kh, kw, 1, data, *_split(p, 1, oh_, ow_, kh, kw, 1, data))
    return _in_place_steps(p, oh_, ow_, kh, kw, data) <= _IN_PLACE_STEPS * copy_steps


# Reading x in place against the padded copy: the NHWC input grads (full correlations over dy
# padded by 2) of mnist conv2 and cifar conv2, whose in-place walks take 5.4% and 4.1% more block
# steps, took 0.82-0.87x and 0.86-0.97x the time at 1 and 2 threads (AVX-512), 0.88-0.91x and
# 0.94-1.01x with AVX2's blocks (emulated); cifar conv3's 'same' forward (8.7% more) 0.98-1.02x,
# cifar conv3's and conv4's input grads (11.7% and 15.6% more) 0.99-1.05x and 1.04-1.10x
# (docs/performance.md, session 33)
_IN_PLACE_STEPS = 1.06


def _in_place_steps(p, oh_, ow_, kh, kw, data):
    """The block steps of an image (_block_steps) of _forward_nhwc's stride-1 walk over x itself:
    the columns whose windows lie wholly on x run on in blocks that stop at the ends of the rows
    outside _full_rows, the others apart in _column_block's blocks."""
    d0, d1, c0, c1 = data
    a, e = _on_x(kw, ow_, data)
    top, bottom = _full_rows.py_func(oh_, kh, 1, data)
    pixels, per_line, lines = _pixel_lines.py_func(oh_, e - a, p)
    steps = 0
    for line in range(lines):
        q, end, oh, ow = _pixel_line.py_func(line, per_line, pixels, e - a, p)
        while q < end:
            pn, last = _pixel_block.py_func(q, end, oh, ow, e - a, p, top, bottom)
            steps += kw * int(_reach(kh, 1, d0, d1, oh, last))
            q, oh, ow = _next_pixel.py_func(q, pn, oh, ow, e - a)
    reach = _outer_reach(kw, ow_, 1, c0, c1, a, e)
    for k in range(_blocks_down.py_func(top, bottom, oh_, p)):
        oh, pn = _column_block.py_func(k, top, bottom, oh_, p)
        steps += reach * int(_reach(kh, 1, d0, d1, oh, oh + pn - 1))
    return steps


def conv2d_backward(x, w, dy, *, layout, stride=1, padding="valid", out=None, workspace=None, need_dx=True,
                    block=None):
    """(dx, dw) for y = conv2d_forward(x, w); `out` is an optional (dx, dw) pair of buffers.

    need_dx=False skips the input gradient (a network's first layer has no use for it) and
    returns (None, dw). `block` ("RxL") picks the block shape; the default is kernels.BLOCK, or
    the wide block where the axis along the lanes is whole blocks of it, or the half block where
    it pads that axis to at least a tenth fewer lanes (_tile.lanes_block): C_in for the stride-1
    input grad (a forward with C_in outputs), C_out (NHWC) or KW*C_in (NCHW) for the weight grad
    of layers past the first; the stride-1 NCHW input grad of C_in under a block of lanes picks
    its rows as the forward does (_tile.rows_block), unless C_in is under a quarter of them
    (_few_inputs: whole patch gradients).

    With 'same' padding the weight grad skips most products of dy with the zero padding, so a NaN
    or inf in dy reaches dw's taps through x but may miss taps that meet it only through the
    padding (PyTorch's reaches every tap: 0 * NaN is NaN); dx, like y, propagates them as PyTorch's.
    """
    plan = _Plan(x, w, layout, stride, padding, workspace, block)
    blk = plan.blk
    need_dx = flag("need_dx", need_dx)
    dy = f32("dy", dy, 4)
    if dy.shape != plan.y_shape:
        raise ValueError(f"dy has shape {dy.shape}, but conv2d of x {plan.x.shape} with w {plan.w.shape} "
                         f"({layout}, stride {stride}, {padding}) gives {plan.y_shape}")
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != 2):
        raise TypeError(f"out must be a (dx, dw) pair of arrays (dx may be None) or None, got {type(out).__name__}"
                        + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    dx_out, dw_out = out if out is not None else (None, None)
    dw = out_buffer(dw_out, plan.w.shape, "out[1] (dw)")
    inputs = {"x": plan.x, "w": plan.w, "dy": dy}
    no_overlap("out[1] (dw)", dw, inputs)
    if need_dx:
        dx = out_buffer(dx_out, plan.x.shape, "out[0] (dx)")
        no_overlap("out[0] (dx)", dx, inputs | {"out[1] (dw)": dw})
    _weight_grad(plan, dy, block, dw)
    if not need_dx:
        return None, dw
    kh, kw, kl, cout = plan.kh, plan.kw, plan.kl, plan.cout
    if stride == 1 and _few_inputs(plan.c, blk) and plan.oh * plan.ow >= blk.lanes:
        # NCHW's blocks need an image of at least J output pixels (a block never starts before its first)
        wt = plan.w.reshape(-1, cout)   # (KH*KW*C, N)
        wt = wt if plan.nchw else _lanes(blk, plan.ws, "conv2d.wt", wt.T)
        _backward_input_patches[blk](plan.macs(), dy, plan.nchw, wt, (kh, kw), (plan.pt, plan.pl), dx)
        return dx, dw
    if stride == 1 and (plan.nchw or not _few_inputs(plan.c, blk)):
        # a full correlation through the forward's kernels: a deep reduction instead of the scatter's short one
        return _forward(plan.full_correlation(dy), block, dx), dw
    dyp = plan.dyp(dy, blk)
    wt = _lanes(blk, plan.ws, "conv2d.wt", plan.w.reshape(kh, kl, cout).transpose(0, 2, 1))   # (KH, N, Lp)
    direct = not plan.nchw and plan.xp_shape == dx.shape
    dxp = dx if direct else plan.ws.take("conv2d.dxp", plan.xp_shape)
    rows = (plan.pt, min(plan.hp, plan.pt + plan.h))   # padding rows are never read back
    _backward_input_nhwc[blk](plan.macs(), dyp, wt, stride, cout, rows, dxp)
    if not direct:
        if plan.hp < plan.pt + plan.h or plan.wp < plan.pl + plan.wd:   # rows/columns no window reached
            dx[:] = 0.0
        # crop (and for NCHW transpose) the padded input grad into dx; unread rows/columns stay 0
        h, w = min(plan.h, plan.hp - plan.pt), min(plan.wd, plan.wp - plan.pl)
        _unpack(dx.size, dxp, plan.pt, plan.pl, plan.nchw, h, w, dx)
    return dx, dw
