"""dense's backward against a float64 reference at several block shapes: by slabs of inputs
(kernels/dense.py, _backward_slabs), each block of dx.T = w @ dy.T stored transposed, whole
blocks by _tile's _store_cols, partial ones lane by lane."""

import re

import numba
import numpy as np
import pytest

import kernels as K
from kernels._isa import parse_block
from tests.conftest import f32

BLOCKS = ["6x16", "8x32", "6x64", "5x24"]


def check_backward(x, w, dy, block, ws):
    """dense_backward's (dx, dw, db) against float64 products."""
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    dx, dw, db = K.dense_backward(x, w, dy, workspace=ws, block=block)
    np.testing.assert_allclose(dx, dy64 @ w64.T, rtol=1e-4, atol=1e-4 * np.sqrt(w.shape[1]))
    np.testing.assert_allclose(dw, x64.T @ dy64, rtol=1e-4, atol=1e-4 * np.sqrt(x.shape[0]))
    np.testing.assert_allclose(db, dy64.sum(axis=0), rtol=1e-4, atol=1e-4 * np.sqrt(x.shape[0]))


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n,i,o", [
    (128, 1000, 128),   # 32-lane blocks: two slabs of 16 blocks, the last 8 inputs wide
    (67, 530, 96),      # a batch that is not whole row blocks; slabs of 8 and 9 blocks, the last 18 wide
    (40, 1100, 130),    # outputs not whole 32-lane panels; three slabs of 11-12 blocks
    (33, 2049, 100),    # five slabs of 13 blocks, the last block one input
])
def test_backward_by_slabs_matches_a_float64_reference(n, i, o, block, rng):
    x, w, dy = f32(rng, n, i), f32(rng, i, o), f32(rng, n, o)
    check_backward(x, w, dy, block, K.Workspace())


@pytest.mark.parametrize("threads", [1, 2])
def test_backward_by_slabs_splits_the_inputs_among_the_threads(threads, rng):
    """Each chunk of slabs (two chunks per thread) writes its own rows of dw and columns of dx:
    every one is checked, with chunks of unequal sizes."""
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for i in (512, 1100, 5000):   # 1 / 2 threads: 1 slab / 2; 3 slabs in 2 chunks / 4 in 4; 10 in 2 / 10 in 4
            x, w, dy = f32(rng, 128, i), f32(rng, i, 64), f32(rng, 128, 64)
            check_backward(x, w, dy, "8x32", K.Workspace())
    finally:
        numba.set_num_threads(before)


def test_backward_by_slabs_overwrites_the_out_buffers(rng):
    """dx and dw are stored, not added to: buffers full of NaN come back exact."""
    x, w, dy = f32(rng, 64, 700), f32(rng, 700, 96), f32(rng, 64, 96)
    out = (np.full(x.shape, np.nan, np.float32), np.full(w.shape, np.nan, np.float32), np.full(96, np.nan, np.float32))
    dx, dw, db = K.dense_backward(x, w, dy, out=out, block="8x32")
    assert dx is out[0] and dw is out[1] and db is out[2]
    np.testing.assert_allclose(dx, dy.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dw, x.T.astype(np.float64) @ dy, rtol=1e-4, atol=1e-3)


def test_backward_by_slabs_keeps_no_copy_of_w(rng):
    """The workspace holds dy's panels and each chunk's slab copies, whatever the number of inputs
    (a packing of w.T would grow with it)."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        sizes = []
        for i in (2000, 20000):
            ws = K.Workspace()
            K.dense_backward(f32(rng, 64, i), f32(rng, i, 96), f32(rng, 64, 96), workspace=ws, block="8x32")
            sizes.append(ws.nbytes)
    finally:
        numba.set_num_threads(before)
    assert sizes[0] == sizes[1] < 2000 * 96 * 4


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n,i,o", [
    (32, 600, 300),    # whole blocks, a reduction over 300 outputs
    (64, 333, 260),    # a last row block of 5 inputs (stored lane by lane)
    (40, 257, 170),    # a last lane block of 8 of the batch (stored lane by lane)
])
def test_backward_transposed_blocks_match_a_float64_reference(n, i, o, block, rng):
    """Batches small against the outputs (long reductions over them for dx.T = w @ dy.T, short ones
    over the batch for dw): dx.T's whole blocks _tile stores transposed (_store_cols: runs of P
    floats, one per lane), the partial ones lane by lane."""
    x, w, dy = f32(rng, n, i), f32(rng, i, o), f32(rng, n, o)
    check_backward(x, w, dy, block, K.Workspace())


def _fresh_product(shape, rng):
    """(block, dense's parallel product for it compiled afresh, so that numba shows its code rather
    than code it read from its cache), after one call checked against numpy."""
    from kernels import _jit, dense
    from kernels._tile import block
    blk = block(shape)
    matmul = _jit._compiled(dense._matmul.fn, blk.env, f"inspected {blk.name}", cache=False, parallel=True)
    m, k, n = 40, 24, 3 * blk.lanes
    a, b = f32(rng, m, k), f32(rng, k, n)
    out = np.zeros((m, n), np.float32)
    panels = dense._packed(blk, K.Workspace(), "b", b).reshape(-1)
    matmul(a.reshape(-1), k, 1, panels, k, blk.lanes, k, m, n, out.reshape(-1), n, 1, dense._group(blk, m, n))
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    return blk, matmul


@pytest.mark.parametrize("shape", ["6x16", "8x32"])
def test_the_block_function_is_compiled_into_its_caller(shape, rng):
    """_tile marks itself alwaysinline for LLVM (_inlined): the parallel loop nest of a product
    holds the block's code rather than a call to it. Without it LLVM leaves the call in numba's
    parallel loop bodies, passing ~48 arguments a block, mostly through the stack (the first
    layers' forwards 1.04-1.42x slower, docs/performance.md). The block function's own symbols
    (numba's mangled names) must be absent, and are first found in its own code, so the check
    cannot pass for want of a match."""
    blk, matmul = _fresh_product(shape, rng)
    names = {sig: blk.tile.overloads[sig].fndesc.mangled_name for sig in blk.tile.signatures}
    assert names and all(name in blk.tile.inspect_asm(sig) for sig, name in names.items())
    code = matmul.inspect_asm(matmul.signatures[0])
    assert not [name for name in names.values() if name in code]


@pytest.mark.parametrize("shape, width", [("6x16", 16), ("8x32", 32), ("5x24", 8), ("3x48", 16)])
def test_the_block_multiplies_in_vectors_a_power_of_two_wide(shape, width, rng):
    """_fma_rows multiplies a row of J lanes as runs a power of two wide (_runs): LLVM compiled
    vectors of 24, 40 or 48 floats into code 3.8-17x slower than runs of 8 or 16 (docs/performance.md,
    session 24). The block function's LLVM IR holds FMAs of that width only."""
    blk, _ = _fresh_product(shape, rng)
    code = "".join(blk.tile.inspect_llvm(sig) for sig in blk.tile.signatures)
    assert set(re.findall(r"llvm\.fma\.v(\d+)f32", code)) == {str(width)}


@pytest.mark.parametrize("rows,lanes", [(8, 32), (6, 16), (5, 24), (12, 32), (14, 32), (16, 16), (4, 8), (1, 16),
                                        (2, 32), (3, 24), (7, 8), (8, 64), (6, 64)])
def test_transpose_plan_gives_every_lane_its_run(rows, lanes):
    """_store_cols' shuffles, replayed on numpy vectors (rows past `rows` as NaN padding): each
    lane's run holds that lane of every row, in row order."""
    from kernels._tile import _transpose_plan
    rounds, runs = _transpose_plan(rows, lanes)
    block = np.arange(rows * lanes, dtype=np.float64).reshape(rows, lanes)
    r = 1 << max(0, (rows - 1).bit_length())
    width = -(-lanes // r) * r
    vectors = [np.concatenate([block[p], np.full(width - lanes, block[p, -1])]) if p < rows else np.full(width, np.nan)
               for p in range(r)]
    for shuffles in rounds:
        for a, b, mask in shuffles:
            vectors.append(np.concatenate([vectors[a], vectors[b]])[mask])
    assert sorted(j for _, _, j in runs) == list(range(lanes))
    for v, off, j in runs:
        np.testing.assert_array_equal(vectors[v][off:off + rows], block[:, j])


def test_forward_in_place_bands_split_the_batch_evenly_over_the_threads(monkeypatch):
    """_in_place_bands: mnist-cnn's batch of 128 in 6-row blocks (22) is one band at 1 thread, two
    of 11 at 2 and four of 5-6 at 4; 38 row blocks (301 rows of 8) two bands at 1 and 2 threads,
    four at 4; bands of at most 32 blocks, never more than the blocks; with a band a thread or
    more, each takes all the outputs, else they are split (_group)."""
    from kernels import dense
    from kernels._tile import block
    for threads, n, rows, want in ((1, 128, 6, 1), (2, 128, 6, 2), (4, 128, 6, 4), (1, 301, 8, 2), (2, 301, 8, 2),
                                   (4, 301, 8, 4), (2, 6, 6, 1), (8, 20, 6, 4), (2, 1000, 8, 4), (1, 1000, 8, 4)):
        monkeypatch.setattr(dense.numba, "get_num_threads", lambda: threads)
        blk = block(f"{rows}x32")
        bands = dense._in_place_bands(blk, n)
        assert bands == want, (threads, n, rows, bands)
        assert -(-n // rows) <= 32 * bands
        group = dense._in_place_group(blk, n, 128, bands)
        assert group == 128 if bands >= threads else group < 128, (threads, n, group)


def test_backward_slabs_split_the_inputs_evenly_over_the_threads(monkeypatch, rng):
    """The backward's slabs (_parts over its J-lane blocks of inputs): mnist-cnn's 9216 inputs in
    32-lane blocks (288) are 18 slabs of 16 blocks at 1 and 2 threads, 20 of 14-15 at 4; 512
    inputs one slab at 1 thread, two of 256 at 2 (one would leave a thread idle); 9 blocks four
    slabs of 2-3 at 4 threads; always a multiple of the threads (or one a block), split evenly
    as _backward_slabs splits them, none over 16 blocks. dense_backward hands the kernel that
    count, two chunks a thread at most, and scratch rows for the widest slab."""
    from kernels import dense
    for threads, blocks, want in ((1, 288, 18), (2, 288, 18), (4, 288, 20), (1, 16, 1), (2, 16, 2), (2, 25, 2),
                                  (4, 9, 4), (2, 72, 6), (1, 72, 5), (8, 2, 2), (2, 1, 1), (2, 271, 18)):
        monkeypatch.setattr(dense.numba, "get_num_threads", lambda: threads)
        slabs = dense._parts(blocks, dense._SLAB_BLOCKS)
        assert slabs == want, (threads, blocks, slabs)
        assert slabs == blocks or slabs % threads == 0
        widths = [(s + 1) * blocks // slabs - s * blocks // slabs for s in range(slabs)]   # as _backward_slabs
        assert sum(widths) == blocks and max(widths) <= 16 and max(widths) - min(widths) <= 1, widths
    calls = []

    class Recorded:   # the kernel's arguments, not its run (the thread count above is pretended)
        def __getitem__(self, blk):
            return lambda size, *args: calls.append((blk.lanes, args[-2].shape, args[-1]))
    monkeypatch.setattr(dense, "_backward_slabs", Recorded())
    for threads, i, want in ((1, 512, (1, (1, 2 * 512 * 64), 1)), (2, 512, (2, (2, 2 * 256 * 64), 2)),
                             (2, 5000, (4, (4, 2 * 512 * 64), 10)), (4, 9 * 32, (4, (4, 2 * 96 * 64), 4))):
        monkeypatch.setattr(dense.numba, "get_num_threads", lambda: threads)
        K.dense_backward(f32(rng, 64, i), f32(rng, i, 96), f32(rng, 64, 96), block="8x32")
        lanes, scratch, slabs = calls.pop()
        assert (scratch[0], scratch, slabs) == want and lanes == 32, (threads, i, scratch, slabs)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block", BLOCKS)
def test_forward_in_place_bands_match_a_float64_reference(threads, block, rng):
    """The forward reading w in place splits the batch's row blocks evenly into bands of at most
    32, as many as a multiple of the threads: batches of 1-6 bands, with a ragged last row block;
    96 outputs are whole blocks of 16, 24 and 32 lanes, 128 of 64 too."""
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for n, o in ((130, 96), (301, 96), (130, 128), (301, 128), (700, 128)):
            x, w, b = f32(rng, n, 700), f32(rng, 700, o), f32(rng, o)
            ws = K.Workspace()
            np.testing.assert_allclose(K.dense_forward(x, w, b, workspace=ws, block=block),
                                       x.astype(np.float64) @ w + b, rtol=1e-4, atol=1e-4 * np.sqrt(700))
            assert (ws.nbytes == 0) == (o % parse_block(block)[1] == 0)   # read in place: nothing packed
    finally:
        numba.set_num_threads(before)
