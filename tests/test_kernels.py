"""Every kernel, layout and direction against PyTorch CPU, against finite differences of a
float64 numpy reference, and NCHW against NHWC."""

import itertools
import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import kernels as K
from kernels._isa import parse_block
from tests import reference as ref
from tests.conftest import f32

LAYOUTS = ["NCHW", "NHWC"]
RTOL, ATOL = 1e-4, 1e-4
# the micro-kernel's block shapes: AVX2's and AVX-512's defaults, AVX-512's wide block, and an odd
# one (rows not a divisor of the channel counts, lanes not a power of two); any shape runs on any ISA
BLOCKS = ["6x16", "8x32", "6x64", "5x24"]


def close(ours, theirs, scale=1.0):
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL * max(1.0, scale))


def maybe_strided(a, strided):
    """`a` itself, or a non-contiguous view with the same values."""
    if not strided:
        return a
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


@st.composite
def conv_cases(draw):
    n, c, cout = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    padding = draw(st.sampled_from(["valid", "same"]))
    kh = draw(st.integers(1, h if padding == "valid" else 5))
    kw = draw(st.integers(1, w if padding == "valid" else 5))
    return n, c, h, w, kh, kw, cout, draw(st.integers(1, 2)), padding, draw(st.booleans()), draw(st.integers(0, 2**31))


def torch_conv(x_nchw, w, stride, padding):
    xt = torch.tensor(x_nchw, requires_grad=True)
    wt = torch.tensor(w.transpose(3, 2, 0, 1).copy(), requires_grad=True)
    xp = xt
    if padding == "same":
        ph = ref.same_pads(x_nchw.shape[2], w.shape[0], stride)
        pw = ref.same_pads(x_nchw.shape[3], w.shape[1], stride)
        xp = F.pad(xt, pw + ph)
    return xt, wt, F.conv2d(xp, wt, stride=stride)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("layout", LAYOUTS)
@given(case=conv_cases())
def test_conv2d_matches_torch(layout, block, case):
    n, c, h, w_, kh, kw, cout, stride, padding, strided, seed = case
    rng = np.random.default_rng(seed)
    x, w = f32(rng, n, c, h, w_), f32(rng, kh, kw, c, cout)
    xt, wt, yt = torch_conv(x, w, stride, padding)
    dy = f32(rng, *yt.shape)
    yt.backward(torch.tensor(dy))
    xl = maybe_strided(ref.to_layout(x, layout), strided)
    y = K.conv2d_forward(xl, w, layout=layout, stride=stride, padding=padding, block=block)
    assert y.shape == K.conv2d_output_shape(xl.shape, w.shape, layout=layout, stride=stride, padding=padding)
    dx, dw = K.conv2d_backward(xl, w, ref.to_layout(dy, layout), layout=layout, stride=stride, padding=padding,
                               block=block)
    close(ref.to_nchw(y, layout), yt.detach().numpy(), scale=kh * kw * c)
    close(ref.to_nchw(dx, layout), xt.grad.numpy(), scale=kh * kw * cout)
    close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=n * y.size / max(cout, 1))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("stride,padding", [(1, "valid"), (2, "same"), (2, "valid"), (1, "same")])
def test_conv2d_backward_finite_differences(layout, stride, padding, rng):
    x, w = ref.to_layout(f32(rng, 2, 3, 7, 6), layout), f32(rng, 3, 2, 3, 4)
    y = K.conv2d_forward(x, w, layout=layout, stride=stride, padding=padding)
    dy = f32(rng, *y.shape)
    dx, dw = K.conv2d_backward(x, w, dy, layout=layout, stride=stride, padding=padding)
    for _ in range(3):
        vx, vw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
        fx = ref.directional_fd(lambda a: (ref.conv2d(a, w, layout, stride, padding) * dy).sum(), x, vx)
        fw = ref.directional_fd(lambda a: (ref.conv2d(x, a, layout, stride, padding) * dy).sum(), w, vw)
        assert np.isclose((dx * vx).sum(), fx, rtol=1e-3, atol=1e-3)
        assert np.isclose((dw * vw).sum(), fw, rtol=1e-3, atol=1e-3)


def test_conv2d_layouts_agree_on_a_real_shape(rng):
    x, w = f32(rng, 8, 16, 14, 14), f32(rng, 3, 3, 16, 8)
    dy = f32(rng, 8, 8, 14, 14)
    y1 = K.conv2d_forward(x, w, layout="NCHW", padding="same")
    y2 = K.conv2d_forward(ref.to_layout(x, "NHWC"), w, layout="NHWC", padding="same")
    close(y1, ref.to_nchw(y2, "NHWC"))
    dx1, dw1 = K.conv2d_backward(x, w, dy, layout="NCHW", padding="same")
    dx2, dw2 = K.conv2d_backward(ref.to_layout(x, "NHWC"), w, ref.to_layout(dy, "NHWC"), layout="NHWC", padding="same")
    close(dx1, ref.to_nchw(dx2, "NHWC"))
    close(dw1, dw2, scale=100)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_nchw_forward_on_both_sides_of_the_pixel_block_depth(padding, block, rng):
    """The stride-1 NCHW forward runs blocks of pixels x output channels on channels-last bands of
    x from a reduction depth of 64 (3x3x8 here), and below it (3x3x7) blocks along each image's
    shifted planes; both copy per band or image, so the workspace holds no copy of x; with every
    block shape: against PyTorch, with output rows (28) that end inside a block and C_out (35)
    past one block of lanes."""
    for c in (7, 8):
        x, w = f32(rng, 2, c, 30, 30), f32(rng, 3, 3, c, 35)
        ws = K.Workspace()
        y = K.conv2d_forward(x, w, layout="NCHW", padding=padding, workspace=ws, block=block)
        close(y, torch_conv(x, w, 1, padding)[2].detach().numpy(), scale=9 * c)
        assert ws.nbytes < x.nbytes, (c, padding, ws.nbytes, x.nbytes)


def test_layout_transposes_of_every_edge(rng):
    """_copies.transpose (conv's layout copies): every rows x cols up to 17 (8 x 8 register blocks,
    a row's last block overlapping the one before, ragged rows and narrow ones element by
    element), from and into strided rows at offsets, the floats around the destination untouched."""
    from kernels._copies import transpose
    for rows in range(1, 18):
        for cols in range(1, 18):
            ls, ld = cols + 3, rows + 2
            src = f32(rng, 5 + rows * ls)
            dst = np.full(7 + cols * ld, -1.0, np.float32)
            transpose(src, 5, ls, dst, 7, ld, rows, cols)
            want = np.full_like(dst, -1.0)
            block = want[7:].reshape(cols, ld)
            block[:, :rows] = src[5:].reshape(rows, ls)[:, :cols].T
            np.testing.assert_array_equal(dst, want, err_msg=f"{rows} x {cols}")


def test_copies_of_every_length(rng):
    """_copies.copy: every length up to 70 (one float at a time under a run of 16, whole runs, the
    last run overlapping the one before) at offsets, the floats around the destination untouched."""
    from kernels._copies import copy
    for n in range(71):
        src = f32(rng, 5 + n + 3)
        dst = np.full(7 + n + 4, -1.0, np.float32)
        copy(src, 5, dst, 7, n)
        want = np.full_like(dst, -1.0)
        want[7:7 + n] = src[5:5 + n]
        np.testing.assert_array_equal(dst, want, err_msg=f"{n} floats")


@pytest.mark.parametrize("band_bytes", [1, 700, 20000, 1 << 30])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("block", BLOCKS)
def test_forward_bands_of_every_height(block, padding, band_bytes, monkeypatch, rng, dirty_malloc):
    """The stride-1 forwards by bands of output rows (_forward_bands): one row each; 1-4 rows,
    unequal where they do not divide the image's rows (20000 bytes for NCHW, 700 for NHWC's 9 rows
    of 108 bytes: bands of 3); one band per image (a batch of 9: enough images for the threads).
    - NCHW's deep forwards: kernels 3x3, 2x4 and 2x1 ('same' pads the bottom, and with 2x4 the
      right, more than the top and left; 2x1 pads only the bottom), and 12 channels of 6 columns
      (transposed ragged: no 8 x 8 block fits across) and of 10 (8 x 8 blocks for 8 channels, the
      other 4 ragged).
    - NHWC's shallow padded ones (under _COLUMN_DEPTH deep: 'same' only, 'valid' reads x itself),
      C_in 3 and 2 of 7 and 6 columns.
    67 output channels, past a block of lanes for every block shape (fewer run _forward_shifted
    in NCHW), stored as partial lanes straight into NHWC's y; against PyTorch. Each band's
    scratch comes back dirty (dirty_malloc), so padding the kernel leaves unzeroed shows."""
    from kernels import conv
    monkeypatch.setattr(conv, "_BAND_BYTES", band_bytes)
    for layout, c, h, w_, kernel in (("NCHW", 32, 9, 11, (3, 3)), ("NCHW", 32, 9, 11, (2, 4)),
                                     ("NCHW", 32, 9, 11, (2, 1)), ("NCHW", 12, 5, 6, (3, 3)),
                                     ("NCHW", 12, 5, 10, (3, 3)), ("NHWC", 3, 9, 7, (3, 3)),
                                     ("NHWC", 2, 5, 6, (2, 4)), ("NHWC", 3, 7, 6, (2, 1))):
        x, w = f32(rng, 9, c, h, w_), f32(rng, *kernel, c, 67)
        y = K.conv2d_forward(ref.to_layout(x, layout), w, layout=layout, padding=padding, block=block)
        close(ref.to_nchw(y, layout), torch_conv(x, w, 1, padding)[2].detach().numpy(),
              scale=c * kernel[0] * kernel[1])


@pytest.mark.parametrize("block", BLOCKS + [None])
def test_shallow_nhwc_forwards_copy_x_by_bands_not_whole(block, rng):
    """A padded NHWC forward under _COLUMN_DEPTH deep (cifar10-cnn's first layer) copies each
    band's rows of x into scratch of its own as it runs: no zero-padded copy of all of x lands in
    the workspace (the whole copy cost its writes and the blocks' reads of it through memory:
    docs/performance.md, session 36)."""
    ws = K.Workspace()
    x, w = f32(rng, 4, 10, 12, 3), f32(rng, 3, 3, 3, 40)
    y = K.conv2d_forward(x, w, layout="NHWC", padding="same", workspace=ws, block=block)
    assert "conv2d.xp" not in ws._buffers
    close(y, ref.conv2d(x, w, "NHWC", 1, "same"), scale=27)


@pytest.mark.parametrize("split", ["inner", "left on", "right on", "on"])
@pytest.mark.parametrize("block", BLOCKS)
def test_pixel_block_forwards_with_each_split_of_the_columns(block, split, monkeypatch, rng, dirty_malloc):
    """The deep pixel-block forwards (NCHW's bands, NHWC's _forward_nhwc) run the output columns
    whose windows reach padding in blocks down each column, over the kernel columns that reach x,
    or with the others (_columns_apart picks; here forced): all apart, the left or the right ones
    run on, or all run on. 'same' forwards and the input grads of 'valid' layers (the full
    correlation, padded by KW - 1 on each side), kernels 3x3, 2x4 (padding more on the right than
    the left), 1x5 and 1x3, NCHW bands of 1-4 rows (a batch of 3 splits each image for the
    threads) and whole images, C_out 70 and C_in 64 (past a block of lanes of every block shape:
    fewer run _forward_shifted), against PyTorch. Each band's channels-last outputs come back
    dirty (dirty_malloc): a column no block stores shows."""
    from kernels import conv

    def forced(plan, bands, p):
        lo, hi = conv._inner(plan.kw, plan.ow, plan.data[2], plan.data[3], plan.stride, p)
        return {"inner": (lo, hi), "left on": (0, hi), "right on": (lo, plan.ow), "on": (0, plan.ow)}[split]
    monkeypatch.setattr(conv, "_columns_apart", forced)
    for band_bytes, layouts in ((20000, ["NCHW"]), (1 << 30, LAYOUTS)):
        monkeypatch.setattr(conv, "_BAND_BYTES", band_bytes)
        for c, h, w_, kernel, cout in ((32, 7, 13, (3, 3), 70), (32, 6, 17, (2, 4), 70), (16, 5, 19, (1, 5), 70),
                                       (64, 6, 12, (3, 3), 40), (64, 5, 13, (1, 3), 24)):
            for padding in ("same", "valid"):
                x, w = f32(rng, 3, c, h, w_), f32(rng, *kernel, c, cout)
                xt, wt, yt = torch_conv(x, w, 1, padding)
                dy = f32(rng, *yt.shape)
                yt.backward(torch.tensor(dy))
                for layout in layouts:
                    y = K.conv2d_forward(ref.to_layout(x, layout), w, layout=layout, padding=padding, block=block)
                    close(y, ref.to_layout(yt.detach().numpy(), layout), scale=c * kernel[0] * kernel[1])
                    dx, _ = K.conv2d_backward(ref.to_layout(x, layout), w, ref.to_layout(dy, layout), layout=layout,
                                              padding=padding, block=block)
                    close(dx, ref.to_layout(xt.grad.numpy(), layout), scale=cout * kernel[0] * kernel[1])


def test_bands_hold_the_copy_of_x_and_the_outputs_within_band_bytes(monkeypatch):
    """_bands keeps cifar10-cnn's third layer's input grad's images whole (a row: 17 x 64 floats of
    dy's channels-last copy and 15 x 32 outputs; 50 rows fit in 320 KiB) and splits a 64 x 64
    image of 64 channels in 8 (66 x 64 floats and 64 x 64 a row: 8 rows and the copy's 2 more),
    in 6 with 32 outputs (11 rows, 13 without the copy's 2); at one thread (more split a batch of
    32 further, for the threads' work)."""
    from kernels import conv
    monkeypatch.setattr(conv.numba, "get_num_threads", lambda: 1)
    grad = _plan(32, 15, 64, "same").full_correlation(np.zeros((32, 64, 15, 15), np.float32))
    assert conv._bands(grad, conv.block_of("8x32")) == 1
    assert conv._bands(_plan(64, 64, 64, "same"), conv.block_of("6x64")) == 8
    assert conv._bands(_plan(64, 64, 40, "same"), conv.block_of("8x32")) == 8   # 40 outputs stored as 64 lanes
    assert conv._bands(_plan(64, 64, 32, "same"), conv.block_of("8x32")) == 6


def _plan(c, hw, cout, padding):
    from kernels import conv
    return conv._Plan(np.zeros((32, c, hw, hw), np.float32), np.zeros((3, 3, c, cout), np.float32),
                      "NCHW", 1, padding, None, None)


def _walked_steps(p, bands, oh_, ow_, kh, kw, s, data, a, e):
    """The block steps of the pixel-block forwards' walk, block by block: each band's pixels of
    the columns a:e in row order, p at a time, over the kernel rows that reach x from any of them
    and every kernel column; each other column in blocks of p rows, over its kernel columns that
    reach x."""
    d0, d1, c0, c1 = data
    rows = lambda r: {i for i in range(kh) if d0 <= r * s + i < d1}   # noqa: E731
    cols = lambda o: {j for j in range(kw) if c0 <= o * s + j < c1}   # noqa: E731
    steps = 0
    for k in range(bands):
        band = range(k * oh_ // bands, (k + 1) * oh_ // bands)
        pixels = [r for r in band for _ in range(a, e)]
        for i in range(0, len(pixels), p):
            steps += len(set().union(*map(rows, pixels[i:i + p]))) * kw
        for o in [*range(a), *range(e, ow_)]:
            for i in range(0, len(band), p):
                steps += len(set().union(*map(rows, band[i:i + p]))) * len(cols(o))
    return steps


def test_columns_apart_takes_the_split_with_the_fewest_block_steps():
    """_block_steps against a walk of the blocks (_walked_steps) for every split between _inner's
    and all columns run on: strides 1 and 2, kernels 1 or 3 rows by 1, 2 or 4 columns, x 0-2 rows
    and columns into the padded input (and 2 - that on the right), 1 or 3 bands, blocks of 6 and 8
    rows. _columns_apart takes the fewest steps, ties to the most columns run on, then to the left
    ones. Known answers: cifar10-cnn's last layer's input grad (15 x 15 from 13 x 13, padded by 2)
    runs the inner left padding column on with either block (6 rows: 270 steps, as with the inner
    right one, against 276 all four apart, 297 all on); its third layer's (15 x 15,
    'same') in bands of 7 and 8 rows runs both apart with 8-row blocks (243 against 255 on) but
    not with 6-row ones (330 against 342), where each band's outer columns take two blocks of
    mostly idle rows; a 'valid' forward has no padding columns; under 64 deep all run on."""
    from kernels import conv
    for s, kh, kw, pad, oh_, ow_, bands, p in itertools.product((1, 2), (1, 3), (1, 2, 4), (0, 1, 2), (5, 9), (9, 14),
                                                               (1, 3), (6, 8)):
        data = (pad, (oh_ - 1) * s + kh - pad, pad, (ow_ - 1) * s + kw - (2 - pad))   # 2 - pad on the right
        if data[1] <= data[0] or data[3] <= data[2]:
            continue
        lo, hi = conv._inner(kw, ow_, data[2], data[3], s, p)
        splits = [(a, e) for a in range(lo + 1) for e in range(hi, ow_ + 1)] if hi - lo >= p else []
        walked = {ae: _walked_steps(p, bands, oh_, ow_, kh, kw, s, data, *ae) for ae in splits}
        for ae, steps in walked.items():
            assert conv._block_steps(p, bands, oh_, ow_, kh, kw, s, data, *ae) == steps, (s, kh, kw, pad, ae)
        if walked:
            fewest = min(walked.values())
            first = min((a - e, a, e) for (a, e), n in walked.items() if n == fewest)
            chosen = conv._split(p, bands, oh_, ow_, kh, kw, s, data)
            assert chosen == first[1:], (s, kh, kw, pad, chosen, walked)
    last = _plan(64, 15, 64, "valid").full_correlation(np.zeros((32, 64, 13, 13), np.float32))
    assert conv._columns_apart(last, 1, 6) == conv._columns_apart(last, 1, 8) == (1, 13)
    third = _plan(32, 15, 64, "same").full_correlation(np.zeros((32, 64, 15, 15), np.float32))
    assert conv._columns_apart(third, 2, 8) == (1, 14)
    assert conv._columns_apart(third, 2, 6) == (0, 15)
    assert conv._columns_apart(_plan(32, 15, 64, "valid"), 1, 8) == (0, 13)
    assert conv._columns_apart(_plan(3, 15, 64, "same"), 1, 8) == (0, 15)   # 27 deep


def test_the_forwards_split_the_columns_by_the_bands_they_run(monkeypatch, rng):
    """_columns_apart is asked for the bands each forward runs: NCHW's stride-1 bands (_bands; a
    small _BAND_BYTES for several an image), one an image for NHWC's and the strided forwards
    (_forward_nhwc), with the rows of the block the call runs."""
    from kernels import conv
    asked = []
    choose = conv._columns_apart
    monkeypatch.setattr(conv, "_columns_apart", lambda plan, bands, p: asked.append((bands, p)) or choose(plan, bands, p))
    monkeypatch.setattr(conv, "_BAND_BYTES", 20000)
    x, w = f32(rng, 2, 32, 9, 11), f32(rng, 3, 3, 32, 70)
    blk = conv.block_of("8x32")
    bands = conv._bands(conv._Plan(x, w, "NCHW", 1, "same", None, blk), blk)
    assert bands > 1
    for layout, stride, want in (("NCHW", 1, bands), ("NHWC", 1, 1), ("NCHW", 2, 1), ("NHWC", 2, 1)):
        asked.clear()
        K.conv2d_forward(ref.to_layout(x, layout), w, layout=layout, stride=stride, padding="same", block="8x32")
        assert asked == [(want, 8)], (layout, stride)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("stride,padding", [(1, "same"), (1, "valid"), (2, "same")])
def test_conv2d_matches_torch_on_wide_layers(layout, stride, padding, block, rng, dirty_malloc):
    """Channel counts past one register block and not a multiple of it (C_out 20, 38, 70), widths
    past one row block of lanes (and rows shorter than one): the edge handling of every kernel,
    both layouts, every block shape. The kernels' scratch comes back dirty (dirty_malloc): the
    weight grads' copies of x's bands of rows show padding left unzeroed (several bands an image:
    the first layers' on 42-column rows, NHWC's on all, NCHW's on 48 x 50, its last band short)."""
    for n, c, h, cout in [(3, 7, 19, 20), (2, 33, 9, 38), (2, 3, 40, 70), (1, 11, 48, 20)]:
        x, w = f32(rng, n, c, h, h + 2), f32(rng, 3, 3, c, cout)
        xt, wt, yt = torch_conv(x, w, stride, padding)
        dy = f32(rng, *yt.shape)
        yt.backward(torch.tensor(dy))
        xl = ref.to_layout(x, layout)
        close(ref.to_nchw(K.conv2d_forward(xl, w, layout=layout, stride=stride, padding=padding, block=block), layout),
              yt.detach().numpy(), scale=9 * c)
        dx, dw = K.conv2d_backward(xl, w, ref.to_layout(dy, layout), layout=layout, stride=stride, padding=padding,
                                   block=block)
        close(ref.to_nchw(dx, layout), xt.grad.numpy(), scale=9 * cout)
        close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=n * h * h)


@pytest.mark.parametrize("block", BLOCKS + [None])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("c,kh,kw,padding", [(1, 3, 3, "valid"), (3, 3, 3, "same"), (3, 2, 2, "valid"),
                                             (2, 3, 5, "same"), (1, 5, 1, "same"), (3, 5, 5, "same"),
                                             (2, 2, 4, "same")])
def test_first_layers_match_torch(layout, block, c, kh, kw, padding, rng):
    """The shallow layers' own paths (1-3 input channels): the NCHW forward over shifted planes
    ('same' layers copy each channel whole, shifted by -2..2 columns, and zero the floats that
    wrapped round a row end; 'valid' ones row by row; 2 x 4 pads one column more on the right),
    the NCHW weight grad over dy transposed by bands, the weight grad's blocks of patch elements
    running on over kernel rows (KW*C_in from 8: 9, 10 and 15 here), the input grad by whole
    patches (up to 75 values: more than one block of lanes), each with rows that are not a
    multiple of the lanes (26 and 37 pixels), against PyTorch, with and without the input grad.
    No block (None) runs the machine's choices: on AVX-512, weight-grad blocks of KW*C_in rows."""
    for n, h, w_, cout in [(5, 28, 28, 32), (3, 19, 37, 40)]:
        x, w = f32(rng, n, c, h, w_), f32(rng, kh, kw, c, cout)
        xt, wt, yt = torch_conv(x, w, 1, padding)
        dy = f32(rng, *yt.shape)
        yt.backward(torch.tensor(dy))
        xl, dyl = ref.to_layout(x, layout), ref.to_layout(dy, layout)
        y = K.conv2d_forward(xl, w, layout=layout, padding=padding, block=block)
        close(ref.to_nchw(y, layout), yt.detach().numpy(), scale=kh * kw * c)
        dw_scale = n * h * w_ / cout
        none, dw = K.conv2d_backward(xl, w, dyl, layout=layout, padding=padding, need_dx=False, block=block)
        assert none is None
        close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=dw_scale)
        dx, dw = K.conv2d_backward(xl, w, dyl, layout=layout, padding=padding, block=block)
        close(ref.to_nchw(dx, layout), xt.grad.numpy(), scale=kh * kw * cout)
        close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=dw_scale)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block", BLOCKS + [None])
def test_shifted_planes_serve_each_threads_images_in_turn(threads, block, rng):
    """_forward_shifted zeroes a thread's shifted planes once and copies its images into them in
    turn: every image's copies write the same floats, so none of the image before is left. Images
    1 and 3 of five are zero, so each follows one that is not (1 thread: one group of all five; 2:
    groups of two and three), and their outputs must be exactly zero: the NCHW forwards of 'same'
    layers (whole-channel copies with the wrapped floats zeroed, 2 x 4 kernels pad one column more
    on the right, planes one column wide, images under a block of lanes) and of a 'valid' one,
    and the input grads of 8 and 16 input channels (full correlations, which run shifted planes
    where those channels are fewer than the block's lanes), against PyTorch."""
    K.BLOCK   # the kernels load before numba's thread pool starts: its threading layer is theirs
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for c, h, w_, (kh, kw), padding, cout in [(3, 13, 13, (3, 3), "same", 32), (3, 9, 11, (2, 4), "same", 8),
                                                  (1, 6, 1, (3, 5), "same", 8), (2, 9, 9, (3, 3), "valid", 32),
                                                  (1, 3, 3, (3, 3), "same", 8), (8, 9, 9, (3, 3), "same", 16),
                                                  (16, 7, 7, (3, 3), "same", 24)]:
            x, w = f32(rng, 5, c, h, w_), f32(rng, kh, kw, c, cout)
            x[1] = x[3] = 0.0
            xt, wt, yt = torch_conv(x, w, 1, padding)
            dy = f32(rng, *yt.shape)
            dy[1] = dy[3] = 0.0
            yt.backward(torch.tensor(dy))
            y = K.conv2d_forward(x, w, layout="NCHW", padding=padding, block=block)
            close(y, yt.detach().numpy(), scale=kh * kw * c)
            assert not y[1].any() and not y[3].any()
            dx, _ = K.conv2d_backward(x, w, dy, layout="NCHW", padding=padding, block=block)
            close(dx, xt.grad.numpy(), scale=kh * kw * cout)
            assert not dx[1].any() and not dx[3].any()
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_first_layers_weight_grad_runs_two_runs_of_images_a_thread(threads, layout, rng):
    """The first layers' weight grad (C_in 1 and 3) sums a part per run of images, two runs a
    thread (conv._SHALLOW_RUNS: numba's scheduler evens out a thread that starts late), at most one
    an image; the deeper ones' parts are larger to sum and run one a thread. The parts the kernel
    takes from the workspace show the runs, and every image's share is summed: dw matches
    PyTorch's on batches of 5 and 3."""
    class Recording(K.Workspace):
        def take(self, name, shape, dtype=np.float32):
            self.shapes[name] = shape
            return super().take(name, shape, dtype)

    K.BLOCK   # the kernels load before numba's thread pool starts: its threading layer is theirs
    before = numba.get_num_threads()
    threads = min(threads, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(threads)
    try:
        for c, batch, runs in [(1, 5, 2 * threads), (3, 5, 2 * threads), (3, 3, min(3, 2 * threads)),
                               (16, 5, threads)]:
            x, w = f32(rng, batch, c, 10, 10), f32(rng, 3, 3, c, 32)
            xt, wt, yt = torch_conv(x, w, 1, "same")
            dy = f32(rng, *yt.shape)
            yt.backward(torch.tensor(dy))
            ws = Recording()
            ws.shapes = {}
            _, dw = K.conv2d_backward(ref.to_layout(x, layout), w, ref.to_layout(dy, layout), layout=layout,
                                      padding="same", workspace=ws, need_dx=False)
            assert ws.shapes["conv2d.dw_parts"][0] == runs, (c, batch)
            close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=batch * 100)
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("bands", [1, 2, 3, None])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_first_layers_weight_grad_over_slabs_of_x(layout, bands, monkeypatch, rng, dirty_malloc):
    """The first layers' weight grad copies x a slab of output rows' padded rows at a time into
    scratch of its own (_slabs; here forced: 1, 2 or 3 of dy's bands a slab, the last short, or
    _SLAB_BYTES' own; NHWC x with no padding is read where it is); strides 1 and 2, 'same' and
    'valid', C_in 3 and 1, images of 13 columns (bands of 4 output rows) and 30 (bands of 2),
    against PyTorch. The scratch comes back dirty (dirty_malloc): padding left unzeroed shows."""
    from kernels import conv
    slabs = conv._slabs
    if bands:
        monkeypatch.setattr(conv, "_slabs", lambda plan: (slabs(plan)[0], bands * slabs(plan)[0]))
    for c, h, w_, (kh, kw) in ((3, 23, 13, (3, 3)), (1, 17, 30, (3, 3)), (3, 21, 13, (2, 4))):
        for stride, padding in ((1, "same"), (1, "valid"), (2, "same"), (2, "valid")):
            x, w = f32(rng, 3, c, h, w_), f32(rng, kh, kw, c, 32)
            xt, wt, yt = torch_conv(x, w, stride, padding)
            dy = f32(rng, *yt.shape)
            yt.backward(torch.tensor(dy))
            none, dw = K.conv2d_backward(ref.to_layout(x, layout), w, ref.to_layout(dy, layout), layout=layout,
                                         stride=stride, padding=padding, need_dx=False)
            assert none is None
            close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=3 * h * w_ / 32)


def test_first_layers_weight_grad_slabs_are_whole_bands_within_slab_bytes():
    """_slabs: bands of ~64 output pixels (2 rows of cifar10-cnn's 32, 4 of 13), and as many whole
    bands a slab as keep its padded rows within _SLAB_BYTES (at least one): cifar10-cnn's first
    layer's 34 rows of 408 bytes one slab; a 224-pixel-wide RGB image's rows (2712 bytes) 4 output
    rows of 6 padded; at stride 2 the same 6 padded rows hold 2."""
    from kernels import conv

    def plan(h, w_, stride, padding):
        return conv._Plan(np.zeros((1, h, w_, 3), np.float32), np.zeros((3, 3, 3, 32), np.float32), "NHWC",
                          stride, padding, None, None)
    assert conv._slabs(plan(32, 32, 1, "same")) == (2, 38)
    assert conv._slabs(plan(20, 13, 1, "same")) == (4, 88)   # 91 padded rows of 180 bytes
    assert conv._slabs(plan(224, 224, 1, "same")) == (1, 4)
    assert conv._slabs(plan(224, 224, 2, "same")) == (1, 2)


def test_weight_grad_spans_are_exactly_the_outputs_that_reach_x():
    """_span / _spans / _within against brute force: for every stride 1-4, kernel offsets k0..k1,
    and x's rows d0:d1 inside a padded axis, the span runs from the first to the last output
    whose window reaches x at one of those offsets (so the weight grads skip just the padding's
    outputs: an empty span when none reach it), and _within clips it to a band."""
    from kernels import conv
    for s in range(1, 5):
        for o_ in range(1, 8):
            for d0 in range(0, 4):
                for d1 in range(d0 + 1, d0 + 9):
                    for k0 in range(0, 5):
                        for k1 in range(k0, 6):
                            hits = [o for o in range(o_) if any(d0 <= o * s + k < d1 for k in range(k0, k1 + 1))]
                            lo, hi = conv._span.py_func(k0, k1, o_, d0, d1, s)
                            assert (lo, hi) == ((hits[0], hits[-1] + 1) if hits else (lo, lo)), (s, o_, d0, d1, k0, k1)
                            assert 0 <= lo <= hi <= o_
    spans = conv._spans.py_func(7, 3, 2, 5, 1, 4, 1)   # blocks of 3 elements, 2 to an offset
    assert spans.tolist() == [list(conv._span.py_func(k0, k1, 5, 1, 4, 1)) for k0, k1 in ((0, 1), (1, 2), (3, 3))]
    assert [conv._within.py_func(2, 6, o0, o0 + 3) for o0 in (0, 3, 6)] == [(2, 3), (3, 6), (6, 6)]


def test_inner_columns_are_exactly_those_whose_windows_lie_on_x():
    """_inner against brute force: for every stride 1-4, kernel width 1-5 and x's columns d0:d1
    of a padded axis, the output columns whose windows read only x (the NHWC forward's run-on
    blocks; the others, in blocks down their column, sum over fewer kernel columns), or all of
    them when fewer than a block's worth would be."""
    from kernels import conv
    for s in range(1, 5):
        for k_ in range(1, 6):
            for o_ in range(1, 12):
                wp = (o_ - 1) * s + k_
                for d0 in range(0, 4):
                    for d1 in range(d0 + 1, wp + 1):
                        whole = [o for o in range(o_) if d0 <= o * s and o * s + k_ <= d1]
                        for p in (1, 3, 6):
                            want = (whole[0], whole[-1] + 1) if len(whole) >= p else (0, o_)
                            assert conv._inner(k_, o_, d0, d1, s, p) == want, (s, k_, o_, d0, d1, p)


@pytest.mark.parametrize("block", BLOCKS)
def test_nhwc_forward_never_reads_the_padding_columns(block, rng):
    """The NHWC forward (and so the NHWC stride-1 input grads past the first layers and the strided
    forwards), its padding columns apart as _inner splits them (the most _columns_apart runs apart),
    reads none of the padded input's columns outside x when at least a block's worth of output
    columns have windows wholly on x (here 20 or 21 of 23 at stride 1, 10 of 12 at stride 2): with
    NaN in those columns the result is still the convolution over zero padding, from the serial and
    the parallel kernel. 'same' 3x3, 2x4 (two columns on the right, one on the left) and 3x5 at
    strides 1 and 2, C_in 8 (3x3x8 = 72 deep, 2x4x8 = 64), C_out 20 and 70 (partial lanes)."""
    from kernels import conv
    from kernels._jit import PARALLEL_MIN
    blk = conv.block_of(block)
    for (kh, kw), s, cout in (((3, 3), 1, 20), ((2, 4), 1, 70), ((3, 3), 2, 20), ((3, 5), 2, 70)):
        x, w = f32(rng, 2, 9, 23, 8), f32(rng, kh, kw, 8, cout)   # NHWC
        want = ref.conv2d(x, w, "NHWC", s, "same")
        oh, ow = want.shape[1:3]
        pt = ((oh - 1) * s + kh - 9) // 2
        pl = ((ow - 1) * s + kw - 23) // 2
        hp, wp = (oh - 1) * s + kh, (ow - 1) * s + kw
        xp = np.zeros((2, hp, wp, 8), np.float32)
        xp[:, :, :pl] = np.nan
        xp[:, :, pl + 23:] = np.nan
        xp[:, pt:pt + 9, pl:pl + 23] = x
        wk = conv._lanes(blk, K.Workspace(), "wk", w).reshape(kh, kw * 8, -1)
        for size, rows in ((0, kh), (PARALLEL_MIN, kh), (PARALLEL_MIN, 1)):   # the twins; passes of a row
            y = np.empty(want.shape, np.float32)
            conv._forward_nhwc[blk](size, xp, wk, s, (pt, pt + 9, pl, pl + 23), False,
                                    conv._inner(kw, ow, pl, pl + 23, s, blk.rows), rows, y)
            close(y, want, scale=kh * kw * 8)


def _amid_nan(rng, *shape):
    """A C-ordered float32 array of `shape` whose neighbours in memory, a whole image before and
    after, are NaN: a read past either end of it shows in the result."""
    size, pad = int(np.prod(shape)), int(np.prod(shape[1:]))
    flat = np.full(size + 2 * pad, np.nan, np.float32)
    a = flat[pad:pad + size].reshape(shape)
    a[...] = f32(rng, *shape)
    return a


@pytest.mark.parametrize("block", BLOCKS)
def test_nhwc_products_read_x_in_place_never_its_padding(block, monkeypatch, request, rng):
    """The NHWC stride-1 products from 64 deep (_reads_in_place, here whatever their block steps)
    read x itself, not a padded copy: the 'same' forward of x, and the input grads of 'valid' and
    'same' layers (full correlations over dy padded by K - 1 - pad) of dy, each between NaN in
    memory and each output starting as NaN, match PyTorch, taking no padded copy where they read
    in place. Kernels 3x3,
    5x5 (two rows of padding above and below: the top and bottom two output rows each reach x's
    rows apart), 5x2 and 2x4 (more padding on one side than the other), C_in 16; images 9 x 23
    and 3 x 23 (5x5: no output row whose every kernel row reaches x). The forward with a 1x3
    kernel (48 deep) copies x band by band (_forward_bands), and that of an image with fewer
    columns whose windows lie wholly on x than a block has rows (5 x 7) pads a whole copy."""
    from kernels import conv
    monkeypatch.setattr(conv, "_IN_PLACE_STEPS", float("inf"))
    conv._in_place_pays.cache_clear()   # its answers depend on the threshold, not in its key
    request.addfinalizer(conv._in_place_pays.cache_clear)
    rows = parse_block(block)[0]
    for (kh, kw), h, wd in (((3, 3), 9, 23), ((5, 5), 9, 23), ((5, 5), 3, 23), ((5, 2), 9, 23), ((2, 4), 9, 23),
                            ((1, 3), 9, 23), ((3, 3), 5, 7)):
        x, w = _amid_nan(rng, 2, h, wd, 16), f32(rng, kh, kw, 16, 40)   # NHWC
        for padding in ("same", "valid"):
            if padding == "valid" and kh > h:
                continue
            xt, wt, yt = torch_conv(ref.to_nchw(x, "NHWC").copy(), w, 1, padding)
            want = ref.to_layout(yt.detach().numpy(), "NHWC")
            dy = _amid_nan(rng, *want.shape)
            yt.backward(torch.tensor(ref.to_nchw(dy, "NHWC").copy()))
            ws = K.Workspace()
            y = K.conv2d_forward(x, w, layout="NHWC", padding=padding, block=block, workspace=ws,
                                 out=np.full(want.shape, np.nan, np.float32))
            close(y, want, scale=kh * kw * 16)
            if padding == "same":
                assert ("conv2d.xp" in ws._buffers) == (kh * kw * 16 >= 64 and wd - kw + 1 < rows), (kh, kw, h, wd)
            dx, _ = K.conv2d_backward(x, w, dy, layout="NHWC", padding=padding, block=block, workspace=ws,
                                      out=(np.full(x.shape, np.nan, np.float32), None))
            close(dx, ref.to_layout(xt.grad.numpy(), "NHWC"), scale=40 * kh * kw)
            inner = wd - 2 * kw + 2 if padding == "valid" else wd - kw + 1   # columns of dx whose windows lie on dy
            assert ("conv2d.dy_full" in ws._buffers) == (inner < rows), (kh, kw, h, wd, padding)


# Run in a child process: a read past the guarded memory ends it with SIGSEGV.
_GUARDED_READS = """
import ctypes, mmap, sys
import numpy as np
import kernels as K
from kernels import conv

conv._IN_PLACE_STEPS = float("inf")   # every geometry that can reads in place
libc = ctypes.CDLL(None, use_errno=True)


def guarded(a, at_end):
    # a's values in memory flush against a page no access is allowed to: right after its last
    # float, or right before its first
    page = mmap.PAGESIZE
    pages = -(-a.nbytes // page)
    mm = mmap.mmap(-1, (pages + 2) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    for at in (base, base + (pages + 1) * page):
        assert libc.mprotect(ctypes.c_void_p(at), page, 0) == 0, ctypes.get_errno()
    g = np.frombuffer(mm, np.float32, a.size, page + (pages * page - a.nbytes if at_end else 0)).reshape(a.shape)
    g[...] = a
    return g


rng = np.random.default_rng(0)
for block in sys.argv[1:]:
    for (kh, kw), h, wd in (((3, 3), 9, 23), ((5, 5), 9, 23), ((5, 5), 3, 23), ((5, 2), 9, 23), ((2, 4), 9, 23)):
        x = rng.standard_normal((2, h, wd, 16)).astype(np.float32)
        w = rng.standard_normal((kh, kw, 16, 40)).astype(np.float32)
        for padding in ("same", "valid"):
            if padding == "valid" and kh > h:
                continue
            args = dict(layout="NHWC", padding=padding, block=block)
            y = K.conv2d_forward(x, w, **args)
            dy = rng.standard_normal(y.shape).astype(np.float32)
            dx = K.conv2d_backward(x, w, dy, **args)[0]
            for at_end in (False, True):
                ws = K.Workspace()
                if padding == "same":
                    assert np.array_equal(K.conv2d_forward(guarded(x, at_end), w, workspace=ws, **args), y)
                    assert "conv2d.xp" not in ws._buffers, (block, kh, kw, h, wd)   # x read in place
                got = K.conv2d_backward(x, w, guarded(dy, at_end), workspace=ws, **args)[0]
                assert np.array_equal(got, dx)
                assert "conv2d.dy_full" not in ws._buffers, (block, kh, kw, h, wd, padding)   # dy read in place
print("ok")
"""


def test_nhwc_products_read_in_place_nothing_outside_x():
    """Reading x itself, the NHWC stride-1 products read no float outside it: x (for the 'same'
    forwards) and dy (for the input grads) lie flush against a page no access is allowed to, after
    their last float and then before their first, in a child process where a read past them ends
    it; the results equal those from ordinary memory, and no padded copy is taken. A NaN
    neighbour (test_nhwc_products_read_x_in_place_never_its_padding) shows only reads that reach
    an output; this catches those whose products are overwritten later too."""
    proc = subprocess.run([sys.executable, "-c", _GUARDED_READS, *BLOCKS], capture_output=True, text=True,
                          timeout=600, env=os.environ | {"PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])


def _walk_steps(p, oh_, ow_, kh, kw, data, a, e, on_x):
    """An independent count of the block steps of _forward_nhwc's walk at stride 1: columns a:e
    run on in lines of whole blocks, each block at most p pixels over at most one row end, the
    other columns apart in blocks of p rows. With `on_x` a block crosses a row end only between
    two rows whose every kernel row reaches x, and each other row of an outer column is a block."""
    d0, d1, c0, c1 = data
    width = e - a
    full = [d0 <= r and r + kh <= d1 for r in range(oh_)]

    def rows(first, last):   # kernel rows that reach x from some of the output rows first..last
        return max(0, min(kh, d1 - first) - max(0, d0 - last))
    steps, line = 0, -(-width // p) * p
    for l0 in range(0, oh_ * width, line):
        q, end = l0, min(oh_ * width, l0 + line)
        while q < end:
            r, col = divmod(q, width)
            n = min(p, end - q, 2 * width - col)
            if col + n > width and on_x and not (full[r] and full[r + 1]):
                n = width - col
            steps += kw * rows(r, (q + n - 1) // width)
            q += n
    for col in [*range(a), *range(e, ow_)]:
        r = 0
        while r < oh_:
            n = min(p, oh_ - r)
            if on_x:
                n = next((i for i in range(1, n) if not full[r + i]), n) if full[r] else 1
            steps += max(0, min(kw, c1 - col) - max(0, c0 - col)) * rows(r, r + n - 1)
            r += n
    return steps


def test_in_place_steps_count_the_walk_over_x_itself():
    """_in_place_steps against an independent walk of the blocks (_walk_steps), and _block_steps
    (the padded copy's walk) against it too, over 'same' and full-correlation paddings, kernels
    1-5 rows and columns, images 3-26 rows and 7-26 columns, blocks of 5, 6 and 8 rows, wherever
    a block's worth of columns have windows wholly on x."""
    from kernels import conv
    for p in (5, 6, 8):
        for kh, kw in ((3, 3), (5, 5), (5, 2), (2, 4), (1, 3), (3, 1)):
            for oh_, ow_ in ((26, 26), (15, 15), (9, 23), (3, 23), (13, 7)):
                for pt, pb, pl, pr in (((kh - 1) // 2, kh // 2, (kw - 1) // 2, kw // 2), (kh - 1, kh - 1, kw - 1, kw - 1)):
                    h, wd = oh_ + kh - 1 - pt - pb, ow_ + kw - 1 - pl - pr
                    if h < 1 or wd < 1:
                        continue
                    data = (pt, pt + h, pl, pl + wd)
                    a, e = conv._inner(kw, ow_, pl, pl + wd, 1, 0)
                    if e - a < p:   # _reads_in_place takes the copy
                        continue
                    want = _walk_steps(p, oh_, ow_, kh, kw, data, a, e, True)
                    assert conv._in_place_steps(p, oh_, ow_, kh, kw, data) == want, (p, kh, kw, oh_, ow_, data)
                    assert conv._block_steps(p, 1, oh_, ow_, kh, kw, 1, data, a, e) == _walk_steps(
                        p, oh_, ow_, kh, kw, data, a, e, False), (p, kh, kw, oh_, ow_, data)


def test_nhwc_products_read_in_place_where_it_costs_few_block_steps():
    """_reads_in_place on the seed models' layers (AVX-512's blocks): the input grads of mnist
    conv2 and cifar conv2 read dy in place (their walks 5.4% and 4.1% more block steps than the
    padded copy's); cifar conv3's 'same' forward and input grad, and cifar conv4's input grad
    (8.7-15.6% more: their 15-row images lose more to the top and bottom rows) take the copy;
    the 'valid' forwards have no padding to copy."""
    from kernels import conv
    for (n, h, c, cout, padding), forward, grad in (((128, 26, 32, 64, "valid"), False, True),
                                                     ((32, 32, 32, 32, "valid"), False, True),
                                                     ((32, 15, 32, 64, "same"), False, False),
                                                     ((32, 15, 64, 64, "valid"), False, False)):
        x, w = np.zeros((n, h, h, c), np.float32), np.zeros((3, 3, c, cout), np.float32)
        dy = np.zeros(K.conv2d_output_shape(x.shape, w.shape, layout="NHWC", padding=padding), np.float32)
        plan = conv._Plan(x, w, "NHWC", 1, padding, K.Workspace(), None)
        q = plan.full_correlation(dy)
        assert conv._reads_in_place(plan, conv.lanes_block("8x32", cout)) == forward, (h, c, cout)
        assert conv._reads_in_place(q, conv.lanes_block("8x32", c)) == grad, (h, c, cout)


@pytest.mark.parametrize("rows", [1, 3])
def test_nhwc_forward_stores_zeros_where_a_block_reaches_no_row_of_x(rows, rng):
    """_forward_nhwc over a padded input whose x is one row in the middle of 20 (a window the
    public calls never make: there every output row reaches x): the blocks of output rows whose
    3 kernel rows all read padding store zeros in the first pass (the output starts as NaN), the
    others sum over the one row they reach, in passes of 1 or all 3 kernel rows."""
    from kernels import conv
    blk = conv.block_of("8x32")
    x, w = f32(rng, 2, 1, 12, 16), f32(rng, 3, 3, 16, 40)   # NHWC: one row of 12 pixels
    xp = np.zeros((2, 20, 14, 16), np.float32)
    xp[:, 9:10, 1:13] = x
    want = ref.conv2d(xp, w, "NHWC", 1, "valid")   # 18 x 12 outputs, rows 7-9 reach x's row
    wk = conv._lanes(blk, K.Workspace(), "wk", w).reshape(3, 3 * 16, -1)
    y = np.full(want.shape, np.nan, np.float32)
    conv._forward_nhwc[blk](0, xp, wk, 1, (9, 10, 1, 13), False, (0, 12), rows, y)
    close(y, want, scale=3 * 16)
    assert (y[:, :7] == 0).all() and (y[:, 10:] == 0).all()


@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("block", BLOCKS)
def test_nhwc_forward_in_passes_of_kernel_rows(block, rows, monkeypatch, rng):
    """_forward_nhwc's run-on blocks in passes of `rows` kernel rows (_chunk; here forced), each
    adding onto the passes before: the first pass a block runs stores (the output starts as NaN),
    also where padding rows leave a block's first pass out ('same'). Kernels 3x3, 5x2 (passes of
    2, 2, 1) and 1x3, 'same' and 'valid', forward and input grad (the full correlation), C_in 64
    and C_out 70, against PyTorch."""
    from kernels import conv
    monkeypatch.setattr(conv, "_chunk", lambda plan, np_: rows)
    for kernel in ((3, 3), (5, 2), (1, 3)):
        for padding in ("same", "valid"):
            x, w = f32(rng, 2, 64, 9, 14), f32(rng, *kernel, 64, 70)
            xt, wt, yt = torch_conv(x, w, 1, padding)
            dy = f32(rng, *yt.shape)
            yt.backward(torch.tensor(dy))
            xn = ref.to_layout(x, "NHWC")
            y = K.conv2d_forward(xn, w, layout="NHWC", padding=padding, block=block,
                                 out=np.full(ref.to_layout(yt.detach().numpy(), "NHWC").shape, np.nan, np.float32))
            close(y, ref.to_layout(yt.detach().numpy(), "NHWC"), scale=64 * kernel[0] * kernel[1])
            dx, _ = K.conv2d_backward(xn, w, ref.to_layout(dy, "NHWC"), layout="NHWC", padding=padding, block=block,
                                      out=(np.full(xn.shape, np.nan, np.float32), None))
            close(dx, ref.to_layout(xt.grad.numpy(), "NHWC"), scale=70 * kernel[0] * kernel[1])


def test_nhwc_forward_passes_hold_a_kernel_row_of_weights_where_the_kernel_overflows_l1():
    """_chunk: with a 48 KB L1, mnist-cnn's second layer (3 kernel rows of 96 steps x 64 lanes,
    24 KB each, 72 KB in all) runs a row a pass; five rows of 12 KB run two a pass, four (48 KB,
    all L1 holds) the whole kernel; cifar10-cnn's second layer (36 KB in all, 32 lanes) and fourth
    (rows of 48 KB, over _CHUNK_BYTES) run the whole kernel, and so does every layer with an L1
    under 48 KB or an unknown one."""
    from kernels import conv

    def plan(c, kh, kw):
        return conv._Plan(np.zeros((1, 16, 16, c), np.float32), np.zeros((kh, kw, c, 8), np.float32),
                          "NHWC", 1, "valid", None, None)
    assert conv._chunk(plan(32, 3, 3), 64, 48 << 10) == 1
    assert conv._chunk(plan(16, 5, 3), 64, 48 << 10) == 2
    assert conv._chunk(plan(16, 4, 3), 64, 48 << 10) == 4   # four 12 KB rows: exactly L1, whole
    assert conv._chunk(plan(32, 3, 3), 32, 48 << 10) == 3
    assert conv._chunk(plan(64, 3, 3), 64, 48 << 10) == 3
    assert conv._chunk(plan(32, 3, 3), 64, (48 << 10) - 1024) == 3   # an L1 under 48 KB
    assert conv._chunk(plan(32, 3, 3), 64, 32 << 10) == conv._chunk(plan(32, 3, 3), 64, 0) == 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_conv2d_backward_can_skip_the_input_gradient(layout, rng):
    x, w = ref.to_layout(f32(rng, 2, 3, 8, 8), layout), f32(rng, 3, 3, 3, 4)
    dy = f32(rng, *K.conv2d_output_shape(x.shape, w.shape, layout=layout))
    _, dw = K.conv2d_backward(x, w, dy, layout=layout)
    none, dw_only = K.conv2d_backward(x, w, dy, layout=layout, need_dx=False)
    assert none is None
    np.testing.assert_array_equal(dw_only, dw)


# Compiled in a fresh numba cache: prints the instructions of every straight-line machine-code loop
# with FMAs (the reduction steps) of the 8 x 32 weight grads (16 input channels, and 3: the first
# layers' kernel, also in 9 x 32, the block it takes on AVX-512), serial and parallel, both layouts run.
_REDUCTION_LOOPS = r"""
import re, sys, numpy as np, kernels as K
from kernels import conv
rng = np.random.default_rng(0)
for c, blocks in ((16, ["8x32"]), (3, ["8x32", "9x32"])):
    for layout, x in (("NHWC", rng.standard_normal((2, 20, 20, c))), ("NCHW", rng.standard_normal((2, c, 20, 20)))):
        x = x.astype(np.float32)
        w = rng.standard_normal((3, 3, c, 32)).astype(np.float32)
        dy = rng.standard_normal(K.conv2d_output_shape(x.shape, w.shape, layout=layout)).astype(np.float32)
        for block in blocks:
            K.conv2d_backward(x, w, dy, layout=layout, need_dx=False, block=block)
for tiled, block in ((conv._backward_weight, "8x32"), (conv._backward_weight_shallow, "8x32"),
                     (conv._backward_weight_shallow, "9x32")):
    k = tiled[conv.block_of(block)]
    for twin in (k.serial, k.parallel):
        if not twin.signatures:   # the size picks one twin: compile the other for the same arguments
            twin.compile(next(iter((k.serial if twin is k.parallel else k.parallel).signatures)))
        for asm in twin.inspect_asm().values():
            lines = [l.strip() for l in asm.splitlines()]
            labels = {l[:-1]: i for i, l in enumerate(lines) if re.fullmatch(r"\.?\w+:", l)}
            jumps = [bool(re.fullmatch(r"j\w+\s+\S+", l)) for l in lines]
            for i, l in enumerate(lines):   # straight-line loops: a backward jump with no jump in between
                start = labels.get(l.split()[-1], i) if jumps[i] else i
                body = lines[start:i]
                if start < i and not any(jumps[start:i]) and any("vfmadd" in b for b in body):
                    print(f"{k.__name__}[{block}]", " ; ".join(body))
"""


@pytest.mark.slow
@pytest.mark.skipif(K.isa_info()["isa"] == "other", reason="inspects x86 FMA code")
def test_the_weight_grads_reduction_loops_take_no_address_apart(tmp_path):
    """The micro-kernel's reduction loops, in both weight-grad kernels, hold loads, broadcasts,
    FMAs and scalar address arithmetic only: no row addresses kept in a vector and taken apart at every step (vmovq,
    vpextrq, vextracti: the SLP vectorizer's form, which ran AVX-512 8 x 32 blocks at half speed)."""
    proc = subprocess.run([sys.executable, "-c", _REDUCTION_LOOPS], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    loops = proc.stdout.splitlines()
    assert {loop.split()[0] for loop in loops} == {"_backward_weight[8x32]", "_backward_weight_shallow[8x32]",
                                                  "_backward_weight_shallow[9x32]"}, loops
    bad = [loop for loop in loops if re.search(r"vmovq|vpextr|vextract", loop)]
    assert not bad, bad[0]


def test_conv2d_workspace_and_out_buffers_are_reused(rng):
    x, w = f32(rng, 4, 3, 9, 9), f32(rng, 3, 3, 3, 5)
    ws = K.Workspace()
    out = np.empty((4, 5, 7, 7), np.float32)
    y = K.conv2d_forward(x, w, layout="NCHW", out=out, workspace=ws)
    assert y is out and ws.nbytes > 0
    before = ws.nbytes
    K.conv2d_forward(x, w, layout="NCHW", out=out, workspace=ws)
    assert ws.nbytes == before
    close(y, ref.conv2d(x, w, "NCHW", 1, "valid"), scale=27)


def test_workspace_buffers_and_allocated_results_start_on_a_cache_line(rng):
    """A Workspace's buffers, grown or reused, and the results a kernel allocates (no out=) start
    on a 64-byte line (kernels.aligned_empty), where numpy's large arrays start 16-48 bytes past
    one; their values are the kernels' all the same."""
    ws = K.Workspace()
    for name, shape, dtype in (("a", (5,), np.float32), ("a", (3, 1000), np.float32), ("a", (7,), np.float32),
                               ("b", (1 << 20,), np.float32), ("c", (33,), np.int64), ("d", (9,), np.uint8)):
        buf = ws.take(name, shape, dtype)
        assert buf.ctypes.data % 64 == 0 and buf.shape == shape and buf.dtype == dtype, (name, shape, dtype)
    assert ws.nbytes == 3 * 1000 * 4 + (1 << 20) * 4 + 33 * 8 + 9
    for shape, dtype in (((3, 5, 7), np.float64), (9, np.float16), ([4, 6], np.complex64), (np.int64(1 << 18), np.int32),
                         ((2, 3), np.uint8), ((3,), "U3"), ((2, 2), np.dtype("f4,f4,f4")), ((4,), "S100")):
        for _ in range(8):   # numpy's buffers start at different offsets from a line
            a = K.aligned_empty(shape, dtype)
            want = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
            assert a.ctypes.data % 64 == 0 and a.shape == want and a.dtype == dtype and a.flags.c_contiguous \
                and a.flags.writeable, (shape, dtype)
    assert K.aligned_empty((0, 3), "S100").shape == (0, 3)   # empty, of items wider than a line
    x, w, b = f32(rng, 70, 600), f32(rng, 600, 130), f32(rng, 130)
    y = K.dense_forward(x, w, b)
    dx, dw, db = K.dense_backward(x, w, f32(rng, 70, 130))
    xc, wc = f32(rng, 2, 3, 9, 9), f32(rng, 3, 3, 3, 5)
    for out in (y, dx, dw, db, K.conv2d_forward(xc, wc, layout="NCHW"), *K.conv2d_backward(xc, wc, f32(rng, 2, 5, 7, 7),
                                                                                         layout="NCHW")):
        assert out.ctypes.data % 64 == 0, out.shape
    close(y, x.astype(np.float64) @ w + b, scale=np.sqrt(600))


@pytest.mark.parametrize("block", [b for b in BLOCKS if 64 % parse_block(b)[1] == 0] + [None])
def test_conv2d_copies_a_weight_that_starts_off_a_cache_line(block, rng):
    """conv2d reads w (the NHWC forward's B operand) in place along a block's lanes (64 channels:
    whole blocks of them) only where it starts on a 64-byte line; off one, each J-float load would
    straddle two lines, so it is copied into the workspace (exactly its bytes more in it). NHWC dy
    (the weight grad's B operand) is read in place wherever it starts: a copy cost more. The
    results are bit for bit those of the arrays on a line."""
    x, w, dy = f32(rng, 3, 9, 9, 64), f32(rng, 3, 3, 64, 64), f32(rng, 3, 7, 7, 64)
    results, sizes = [], []
    for offset in (0, 4):   # floats past a line
        wl, dyl = K.aligned_empty(w.size + 16).reshape(-1), K.aligned_empty(dy.size + 16).reshape(-1)
        wo, dyo = wl[offset:offset + w.size].reshape(w.shape), dyl[offset:offset + dy.size].reshape(dy.shape)
        wo[...], dyo[...] = w, dy
        forward, weight_grad = K.Workspace(), K.Workspace()
        y = K.conv2d_forward(x, wo, layout="NHWC", workspace=forward, block=block)
        _, dw = K.conv2d_backward(x, wo, dyo, layout="NHWC", workspace=weight_grad, need_dx=False, block=block)
        dx, _ = K.conv2d_backward(x, wo, dyo, layout="NHWC", block=block)
        sizes.append((forward.nbytes, weight_grad.nbytes))
        results.append((y, dx, dw))
    assert sizes[1] == (sizes[0][0] + w.nbytes, sizes[0][1])   # a copy of w, none of dy
    for ours, aligned in zip(results[1], results[0]):
        np.testing.assert_array_equal(ours, aligned)
    close(results[0][0], ref.conv2d(x, w, "NHWC", 1, "valid"), scale=24)


def test_conv2d_backward_copies_x_by_bands_and_packs_dy_into_a_buffer_of_its_own(rng):
    """The weight grads copy x a band (or slab) of rows at a time into scratch of their own, so no
    whole copy of x lands in the workspace, in either layout; the NHWC input grad's padded dy (a
    full correlation that does not read dy in place: 6-column images) is packed into a workspace
    buffer of its own, not the forward's "conv2d.xp": one buffer shared by two packs, each split
    over the threads by images at its own offsets, moved between the cores' caches
    (docs/performance.md). Both grads match PyTorch's."""
    x, w, dy = f32(rng, 2, 8, 6, 6), f32(rng, 3, 3, 8, 16), f32(rng, 2, 16, 6, 6)
    xt, wt, yt = torch_conv(x, w, 1, "same")
    yt.backward(torch.tensor(dy))
    for layout in LAYOUTS:
        ws = K.Workspace()
        dx, dw = K.conv2d_backward(ref.to_layout(x, layout), w, ref.to_layout(dy, layout), layout=layout,
                                   padding="same", workspace=ws, block="8x32")
        assert "conv2d.xp" not in ws._buffers, layout
        assert ("conv2d.dy_full" in ws._buffers) == (layout == "NHWC"), layout
        close(ref.to_nchw(dx, layout), xt.grad.numpy(), scale=16 * 9)
        close(dw, wt.grad.numpy().transpose(2, 3, 1, 0), scale=2 * 36)


@given(n=st.integers(1, 4), c=st.integers(1, 6), h=st.integers(1, 7), w=st.integers(1, 7),
       strided=st.booleans(), seed=st.integers(0, 2**31))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_broadcast_add_4d_matches_torch(layout, n, c, h, w, strided, seed):
    rng = np.random.default_rng(seed)
    x, b = f32(rng, n, c, h, w), f32(rng, c)
    xl = maybe_strided(ref.to_layout(x, layout), strided)
    y = K.broadcast_add_forward(xl, b, layout=layout)
    close(ref.to_nchw(y, layout), (torch.tensor(x) + torch.tensor(b)[:, None, None]).numpy())
    a = xl.copy()
    assert K.broadcast_add_forward(a, b, layout=layout, out=a) is a
    np.testing.assert_array_equal(a, y)
    db = K.broadcast_add_backward(xl, layout=layout)
    close(db, torch.tensor(x).sum(dim=(0, 2, 3)).numpy(), scale=n * h * w)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_broadcast_add_2d_and_large_reductions(layout, rng):
    x, b = f32(rng, 5, 3), f32(rng, 3)
    close(K.broadcast_add_forward(x, b, layout=layout), ref.broadcast_add(x, b, layout))
    close(K.broadcast_add_backward(x, layout=layout), x.sum(0))
    # a reduction over ~10^5 values (the parallel path) keeps float32 accuracy
    big = ref.to_layout(f32(rng, 64, 8, 40, 40), layout)
    exact = ref.to_nchw(big, layout).astype(np.float64).sum(axis=(0, 2, 3))
    np.testing.assert_allclose(K.broadcast_add_backward(big, layout=layout), exact, rtol=1e-5, atol=1e-2)
    close(K.broadcast_add_forward(big, b[:1].repeat(8) + 1, layout=layout), big + 1 + b[0])
    bias = np.arange(8, dtype=np.float32)
    expect = ref.to_layout(ref.to_nchw(big, layout) + bias[:, None, None], layout)
    np.testing.assert_array_equal(K.broadcast_add_forward(big, bias, layout=layout, out=big), expect)   # in place


@pytest.mark.parametrize("c, hw", [(1, 1), (3, 7), (8, 8), (9, 15), (17, 40), (64, 576), (65, 23)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_broadcast_add_forward_rows_of_many_widths(layout, c, hw, rng):
    """Rows of 1 to 576 floats along the contiguous axis (NCHW's planes, NHWC's channels: whole
    vectors and the floats after them), out of place and in place, exact against numpy."""
    x, b = ref.to_layout(f32(rng, 3, c, hw, 1), layout), f32(rng, c)
    expect = x + (b[:, None, None] if layout == "NCHW" else b)
    np.testing.assert_array_equal(K.broadcast_add_forward(x, b, layout=layout), expect)
    np.testing.assert_array_equal(K.broadcast_add_forward(x, b, layout=layout, out=x), expect)


@pytest.mark.parametrize("c", [1, 3, 10, 16, 17, 32, 34, 63, 64, 65, 100, 1030])
@pytest.mark.parametrize("rows", [1, 7, 300, 5000])
def test_broadcast_add_backward_every_row_width(c, rows, rng):
    """The channels-inner sum over its row widths: C widened to a multiple of 64, C itself with an
    overlapping 16-column run at the end, and rows of C left over after the widened rows."""
    dy = f32(rng, rows, c)
    np.testing.assert_allclose(K.broadcast_add_backward(dy, layout="NHWC"), dy.astype(np.float64).sum(0),
                               rtol=1e-5, atol=1e-5 * np.sqrt(rows))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_broadcast_add_finite_differences(layout, rng):
    x, b = ref.to_layout(f32(rng, 2, 3, 4, 5), layout), f32(rng, 3)
    dy = f32(rng, *x.shape)
    db = K.broadcast_add_backward(dy, layout=layout)
    v = rng.standard_normal(3)
    fd = ref.directional_fd(lambda a: (ref.broadcast_add(x, a, layout) * dy).sum(), b, v)
    assert np.isclose((db * v).sum(), fd, rtol=1e-4)


@given(n=st.integers(1, 6), i=st.integers(1, 40), o=st.integers(1, 12), strided=st.booleans(),
       seed=st.integers(0, 2**31))
@pytest.mark.parametrize("block", BLOCKS)
def test_dense_matches_torch(block, n, i, o, strided, seed):
    rng = np.random.default_rng(seed)
    x, w, b, dy = f32(rng, n, i), f32(rng, i, o), f32(rng, o), f32(rng, n, o)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yt = xt @ wt + bt
    yt.backward(torch.tensor(dy))
    xs = maybe_strided(x, strided)
    close(K.dense_forward(xs, w, b, block=block), yt.detach().numpy(), scale=i)
    dx, dw, db = K.dense_backward(xs, w, dy, block=block)
    close(dx, xt.grad.numpy(), scale=o)
    close(dw, wt.grad.numpy(), scale=n)
    close(db, bt.grad.numpy(), scale=n)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n,i,o", [(70, 600, 130), (50, 700, 20), (5, 300, 400), (32, 520, 70)])
def test_dense_blocked_products_match_a_float64_reference(n, i, o, block, rng):
    """Sizes that take the numba path (past OpenBLAS's single-thread threshold): the forward's
    reduction blocks of 256, row bands of 48, column groups split for the threads, and their
    partial edges; batches up to 32 run the forward transposed (x packed, w read in place); the
    backward by slabs."""
    x, w, b, dy = f32(rng, n, i), f32(rng, i, o), f32(rng, o), f32(rng, n, o)
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    close(K.dense_forward(x, w, b, block=block), x64 @ w64 + b, scale=np.sqrt(i))
    dx, dw, db = K.dense_backward(x, w, dy, workspace=K.Workspace(), block=block)
    close(dx, dy64 @ w64.T, scale=np.sqrt(o))
    close(dw, x64.T @ dy64, scale=np.sqrt(n))
    close(db, dy64.sum(axis=0), scale=np.sqrt(n))


def test_dense_finite_differences(rng):
    x, w, b, dy = f32(rng, 4, 6), f32(rng, 6, 3), f32(rng, 3), f32(rng, 4, 3)
    dx, dw, db = K.dense_backward(x, w, dy)
    for grad, arg, f in [(dx, x, lambda a: ref.dense(a, w, b)), (dw, w, lambda a: ref.dense(x, a, b)),
                         (db, b, lambda a: ref.dense(x, w, a))]:
        v = rng.standard_normal(arg.shape)
        assert np.isclose((grad * v).sum(), ref.directional_fd(lambda a: (f(a) * dy).sum(), arg, v), rtol=1e-4)


# dense's orientations for 32-lane blocks (kernels/dense.py): the forward reading w in place when
# its outputs are whole 32-lane blocks, the grads by slabs of inputs (their workspace:
# tests/test_kernels_dense.py), each with ragged inputs
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n,i,o", [(40, 300, 64), (20, 530, 96), (130, 1000, 32), (33, 700, 128)])
def test_dense_orientations_match_a_float64_reference(n, i, o, block, rng):
    x, w, b, dy = f32(rng, n, i), f32(rng, i, o), f32(rng, o), f32(rng, n, o)
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    ws = K.Workspace()
    close(K.dense_forward(x, w, b, workspace=ws, block=block), x64 @ w64 + b, scale=np.sqrt(i))
    if o % parse_block(block)[1] == 0:   # w read in place: nothing packed
        assert ws.nbytes == 0
    dx, dw, db = K.dense_backward(x, w, dy, workspace=ws, block=block)
    close(dx, dy64 @ w64.T, scale=np.sqrt(o))
    close(dw, x64.T @ dy64, scale=np.sqrt(n))
    close(db, dy64.sum(axis=0), scale=np.sqrt(n))


def check_maxpool_against_torch(x, layout, size, rng):
    """Forward and backward against torch; dx starts as NaN, so a position never written fails."""
    xt = torch.tensor(x, requires_grad=True)
    yt = F.max_pool2d(xt, size)
    dy = f32(rng, *yt.shape)
    yt.backward(torch.tensor(dy))
    xl = ref.to_layout(x, layout)
    y, arg = K.maxpool2d_forward(xl, layout=layout, size=size)
    close(ref.to_nchw(y, layout), yt.detach().numpy())
    dx = K.maxpool2d_backward(ref.to_layout(dy, layout), arg, xl.shape, layout=layout, size=size,
                              out=np.full_like(xl, np.nan))
    close(ref.to_nchw(dx, layout), xt.grad.numpy())


@given(n=st.integers(1, 3), c=st.integers(1, 5), h=st.integers(2, 9), w=st.integers(2, 9),
       size=st.integers(2, 3), seed=st.integers(0, 2**31))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_maxpool_matches_torch(layout, n, c, h, w, size, seed):
    if h < size or w < size:
        return
    rng = np.random.default_rng(seed)
    check_maxpool_against_torch(f32(rng, n, c, h, w), layout, size, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [11, 12, 13])
def test_maxpool_windows_past_int8_positions_match_torch(layout, size, rng):
    """An 11 x 11 window's 121 positions fit int8; 12 x 12's 144 do not, so its argmax is int16
    (an int8 one wrapped: a gradient routed to the wrong element)."""
    assert K.maxpool2d_argmax_dtype(size) == (np.int8 if size <= 11 else np.int16)
    assert K.maxpool2d_argmax_dtype(182) == np.int32
    x = f32(rng, 2, 3, 2 * size + 1, size)
    x[0, 0, size - 1, size - 1] = 10.0   # the window's last position holds its max
    check_maxpool_against_torch(x, layout, size, rng)


def test_conv2d_takes_numpys_narrow_integer_strides(rng):
    """A stride of np.int8 or np.uint8 gives the int stride's result (the geometry in numpy's int8
    arithmetic overflowed into a shape of 0)."""
    x, w = f32(rng, 1, 3, 9, 9), f32(rng, 3, 3, 3, 4)
    want = K.conv2d_forward(x, w, layout="NCHW", stride=2, padding="same")
    for stride in (np.int8(2), np.uint8(2), np.int64(2)):
        np.testing.assert_array_equal(K.conv2d_forward(x, w, layout="NCHW", stride=stride, padding="same"), want)
        assert K.conv2d_output_shape(x.shape, w.shape, layout="NCHW", stride=stride, padding="same") == want.shape


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [2, 3])
def test_maxpool_parallel_kernels_match_torch(layout, size, rng):
    """Inputs above PARALLEL_MIN run the parallel twins; odd sizes leave rows and columns unpooled."""
    check_maxpool_against_torch(f32(rng, 8, 32, 17, 19), layout, size, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 12, 12), (4, 5, 12, 6), (8, 32, 18, 18)],
                         ids=["serial", "narrow", "parallel"])
def test_maxpool_propagates_nan_like_torch(layout, size, shape, rng):
    """NaN at every window position, alone and with others: the max is NaN and the gradient goes
    to the window's last NaN, as in PyTorch (a NaN after the first element used to be dropped)."""
    x = f32(rng, *shape)
    x[rng.random(shape) < 0.3] = np.nan
    windows = x.reshape(shape[0], shape[1], shape[2] // size, size, shape[3] // size, size)
    nan_at = np.isnan(windows).transpose(0, 1, 2, 4, 3, 5).reshape(-1, size * size)
    assert nan_at.any(axis=0).all() and (nan_at.sum(axis=1) == 1).any() and (nan_at.sum(axis=1) > 1).any()
    check_maxpool_against_torch(x, layout, size, rng)
    y, arg = K.maxpool2d_forward(ref.to_layout(x, layout), layout=layout, size=size)
    assert np.isnan(y).sum() == nan_at.any(axis=1).sum()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("w", [5, 9, 13, 16, 17, 35])
def test_maxpool_ties_go_to_the_first_like_torch(layout, w, rng):
    """Rows of 2 windows (one by one), 4 (one run of 4), 6 (two, the second overlapping), 8 and 17
    (runs of 8), odd widths and heights: with most windows holding equal values, the max and the
    gradient's route match PyTorch's (the first of equals wins)."""
    x = rng.integers(0, 3, (2, 3, 7, w)).astype(np.float32)
    check_maxpool_against_torch(x, layout, 2, rng)
    _, arg = K.maxpool2d_forward(ref.to_layout(x, layout), layout=layout)
    assert (arg == 0).mean() > 0.3   # ties are common: the first position wins them


@pytest.mark.parametrize("layout", LAYOUTS)
def test_maxpool_writes_only_its_outputs(layout, rng):
    """Every width of 2-40 columns (rows of 1-20 windows: one by one, runs of 4 and of 8, the last
    overlapping), odd height: each array is the middle plane of three, x's guard planes NaN (a read
    past x would show in y) and the outputs' a marker no kernel writes."""
    for w in range(2, 41):
        x = ref.to_layout(f32(rng, 1, 3, 5, w), layout)
        big_x = np.full((3,) + x.shape[1:], np.nan, np.float32)
        big_x[1] = x[0]
        pooled = ref.to_layout(np.empty((1, 3, 2, w // 2), np.float32), layout).shape   # no unguarded call first
        big_y, big_arg = np.full((3,) + pooled[1:], 7.0, np.float32), np.full((3,) + pooled[1:], 7, np.int8)
        big_dx = np.full((3,) + x.shape[1:], 7.0, np.float32)
        K.maxpool2d_forward(big_x[1:2], layout=layout, out=big_y[1:2], argmax_out=big_arg[1:2])
        K.maxpool2d_backward(f32(rng, *pooled), big_arg[1:2], x.shape, layout=layout, out=big_dx[1:2])
        assert not np.isnan(big_y[1]).any(), w
        for big in (big_y, big_arg, big_dx):
            assert (big[0] == 7).all() and (big[2] == 7).all(), w
        check_maxpool_against_torch(ref.to_nchw(x, layout), layout, 2, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_maxpool_finite_differences(layout, rng):
    x = ref.to_layout(f32(rng, 2, 3, 5, 4), layout)
    y, arg = K.maxpool2d_forward(x, layout=layout)
    dy = f32(rng, *y.shape)
    dx = K.maxpool2d_backward(dy, arg, x.shape, layout=layout)
    v = rng.standard_normal(x.shape)
    fd = ref.directional_fd(lambda a: (ref.maxpool(a, layout, 2) * dy).sum(), x, v, eps=1e-6)
    assert np.isclose((dx * v).sum(), fd, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,torch_fn", [("relu", torch.relu), ("sigmoid", torch.sigmoid)])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4, 5), (64, 32, 8, 8)])
def test_activations_match_torch_and_finite_differences(name, torch_fn, shape, rng):
    x, dy = f32(rng, *shape), f32(rng, *shape)
    forward, backward = getattr(K, f"{name}_forward"), getattr(K, f"{name}_backward")
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_fn(xt)
    yt.backward(torch.tensor(dy))
    y = forward(x)
    close(y, yt.detach().numpy())
    dx = backward(y, dy)
    close(dx, xt.grad.numpy())
    f64 = {"relu": lambda a: np.maximum(a, 0), "sigmoid": lambda a: 1 / (1 + np.exp(-a))}[name]
    v = rng.standard_normal(shape)
    assert np.isclose((dx * v).sum(), ref.directional_fd(lambda a: (f64(a) * dy).sum(), x, v, eps=1e-6), rtol=1e-3)


@given(n=st.integers(1, 8), k=st.integers(1, 12), scale=st.sampled_from([1.0, 50.0, 1000.0]),
       seed=st.integers(0, 2**31))
def test_softmax_cross_entropy_matches_torch(n, k, scale, seed):
    rng = np.random.default_rng(seed)
    logits = (f32(rng, n, k) * scale).astype(np.float32)
    target = np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]
    lt = torch.tensor(logits, requires_grad=True)
    loss_t = F.cross_entropy(lt, torch.tensor(target))
    loss_t.backward()
    loss, probs, grad = K.softmax_cross_entropy(logits, target)
    assert np.isfinite(loss)
    assert np.isclose(loss, loss_t.item(), rtol=1e-5, atol=1e-5 * scale)
    close(probs, torch.softmax(lt, 1).detach().numpy())
    close(grad, lt.grad.numpy())


def test_softmax_cross_entropy_finite_differences(rng):
    logits, target = f32(rng, 5, 4), rng.dirichlet(np.ones(4), 5).astype(np.float32)
    _, _, grad = K.softmax_cross_entropy(logits, target)
    v = rng.standard_normal(logits.shape)
    fd = ref.directional_fd(lambda a: ref.softmax_xent(a, target), logits, v)
    assert np.isclose((grad * v).sum(), fd, rtol=1e-4)


def test_sigmoid_accuracy_over_the_whole_float32_range():
    x = np.linspace(-100, 100, 200_001, dtype=np.float32)
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    y = K.sigmoid_forward(x)
    assert np.abs(y - exact).max() <= 2e-7
    assert y.min() >= 0 and y.max() <= 1 and np.all(np.diff(y) >= -4e-7)   # bounded; monotone within 2x the bound
    assert np.isnan(K.sigmoid_forward(np.array([np.nan, 0.0], np.float32))[0])   # NaN stays NaN
