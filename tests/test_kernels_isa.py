"""The host ISA, the micro-kernel block shape chosen for it and its override, and the AVX2 build
on an AVX-512 host."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernels as K
from kernels import _isa
from tests import reference as ref

HASWELL = _isa.HASWELL_FEATURES


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,   # a cold compile
                          env={k: v for k, v in os.environ.items() if k != _isa.ENV} | env)


def test_isa_info_names_the_isa_the_cpu_and_the_block():
    info = K.isa_info()
    assert info["isa"] in ("avx512", "avx2", "other") and info["cpu"]
    rows, lanes = _isa.parse_block(info["block"])
    assert info["block"] == K.BLOCK == f"{rows}x{lanes}"
    assert info["l1d"] is None or info["l1d"] >= 1024


def test_l1_data_bytes_reads_the_level_1_data_cache(tmp_path):
    """Linux's sysfs lists the caches as index0..; the L1 data cache is the one of level 1 and type
    Data (its instruction cache has the same level). Missing or malformed: None."""
    caches = (("1", "Instruction", "32K"), ("1", "Data", "48K"), ("2", "Unified", "2048K"))
    for i, (level, kind, size) in enumerate(caches):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(text + "\n")
    assert _isa.l1_data_bytes(tmp_path) == 48 << 10
    assert _isa.l1_data_bytes(tmp_path / "absent") is None
    (tmp_path / "index0" / "level").unlink()   # an unreadable entry before L1's is passed over
    assert _isa.l1_data_bytes(tmp_path) == 48 << 10
    (tmp_path / "index1" / "size").write_text("lots\n")
    assert _isa.l1_data_bytes(tmp_path) is None


def test_isa_info_does_not_import_numba():
    proc = _run("import sys, kernels; info = kernels.isa_info(); print(info['block'], 'numba' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1] == "False"


@pytest.mark.parametrize("text", ["6x16", "12X32", " 8x32 ", "5x24"])
def test_block_shapes_parse(text):
    rows, lanes = _isa.parse_block(text)
    assert f"{rows}x{lanes}" == text.strip().lower()


@pytest.mark.parametrize("text", ["6", "6x15", "0x16", "6x0", "64x16", "6x256", "axb", ""])
def test_bad_block_shapes_are_named(text):
    with pytest.raises(ValueError, match=_isa.ENV):
        _isa.parse_block(text)
    with pytest.raises(ValueError, match="block"):
        K.dense_forward(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones(4, np.float32),
                        block=text)


def test_the_environment_variable_sets_the_block():
    proc = _run("import kernels; i = kernels.isa_info(); print(kernels.BLOCK, i['block_source'], i['wide'])",
                **{_isa.ENV: "8x32"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["8x32", "env", "None"]   # the override is the one shape, forwards too
    proc = _run("import kernels; kernels.BLOCK", **{_isa.ENV: "6x17"})
    assert proc.returncode != 0 and _isa.ENV in proc.stderr and "'6x17'" in proc.stderr


@pytest.mark.parametrize("flags,override,wide,pixels,half", [({"avx512f": True}, None, "6x64", "6x64", "8x16"),
                                                             ({"avx2": True, "fma": True}, None, None, "4x24", None),
                                                             ({}, None, None, None, None),
                                                             ({"avx512f": True}, "8x32", None, None, None)])
def test_the_wide_pixel_and_half_blocks_follow_the_isa_and_yield_to_the_override(flags, override, wide, pixels,
                                                                                 half, monkeypatch):
    monkeypatch.setattr(_isa, "_target", lambda: ("somecpu", flags))
    if override:
        monkeypatch.setenv(_isa.ENV, override)
    else:
        monkeypatch.delenv(_isa.ENV, raising=False)
    info = _isa._detect()
    assert (info["wide"], info["pixels"], info["half"]) == (wide, pixels, half)


def test_256_bit_code_on_an_avx512_host_has_avx2s_blocks(monkeypatch):
    monkeypatch.setattr(_isa, "_INFO", {"isa": "avx512", "cpu": "somecpu", "block": "8x32", "wide": "6x64",
                                        "pixels": "6x64", "half": "8x16", "block_source": "isa"})
    _isa.narrow()
    info = _isa.isa_info()
    assert (info["block"], info["wide"], info["pixels"], info["half"]) == ("6x16", None, "4x24", None)


def _record_blocks(monkeypatch, chooser):
    """The names of the blocks that _tile's `chooser` (lanes_block or rows_block) picks for conv
    and dense from now on, in order (each pick also runs)."""
    from kernels import _tile, conv, dense
    chosen, choose = [], getattr(_tile, chooser)

    def spy(spec, n, *along):
        chosen.append(choose(spec, n, *along).name)
        return _tile.block(chosen[-1])
    for module in (conv, dense):
        monkeypatch.setattr(module, chooser, spy)
    return chosen


def test_products_take_the_wide_block_when_the_axis_along_its_lanes_fills_it(monkeypatch, rng):
    """With a wide block (AVX-512's 6 x 64), conv2d's pixel-block forwards (the stride-1 input
    grad's among them: C_in outputs), its deep weight grads and dense's forward run it when no
    block is asked for and the axis along the lanes is whole blocks of them; an asked-for block,
    axes that would leave lanes idle, and NCHW forwards of shallow reductions or fewer outputs
    than lanes (pixels along the lanes, their rows from rows_block) keep theirs. Results as with
    the default block."""
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), wide="6x64", half=None))
    chosen = _record_blocks(monkeypatch, "lanes_block")
    x = rng.standard_normal((2, 9, 9, 8)).astype(np.float32)
    for cout, want in ((64, "6x64"), (128, "6x64"), (96, K.BLOCK)):
        w = rng.standard_normal((3, 3, 8, cout)).astype(np.float32)
        for layout, xl in (("NHWC", x), ("NCHW", np.ascontiguousarray(x.transpose(0, 3, 1, 2)))):
            chosen.clear()
            y = K.conv2d_forward(xl, w, layout=layout)
            assert chosen == [want]
            np.testing.assert_allclose(y, K.conv2d_forward(xl, w, layout=layout, block=K.BLOCK), rtol=1e-5, atol=1e-5)
    chosen.clear()
    K.conv2d_forward(x, rng.standard_normal((3, 3, 8, 64)).astype(np.float32), layout="NHWC", block="8x32")
    assert chosen == ["8x32"]
    chosen.clear()
    first = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((3, 3, 3, 64)).astype(np.float32)
    K.conv2d_forward(*first, layout="NCHW")
    assert chosen == []   # depth 27: _forward_shifted, output channels along the rows
    few = rng.standard_normal((2, 8, 9, 9)).astype(np.float32), rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    y = K.conv2d_forward(*few, layout="NCHW")
    assert chosen == []   # depth 72, but 8 outputs leave most lanes idle: _forward_shifted too
    np.testing.assert_allclose(y, K.conv2d_forward(*few, layout="NCHW", block=K.BLOCK), rtol=1e-5, atol=1e-4)
    # the backward: the weight grad's lanes run along C_out (NHWC) or KW*C_in (NCHW, 3*C_in here),
    # the stride-1 input grad's (a forward) along C_in
    for cin, cout, wants in ((64, 8, {"NHWC": [K.BLOCK, "6x64"], "NCHW": ["6x64", "6x64"]}),
                             (32, 64, {"NHWC": ["6x64", K.BLOCK], "NCHW": [K.BLOCK, K.BLOCK]})):
        xb, dy = rng.standard_normal((2, cin, 9, 9)).astype(np.float32), rng.standard_normal((2, cout, 9, 9))
        wb, dy = rng.standard_normal((3, 3, cin, cout)).astype(np.float32), dy.astype(np.float32)
        for layout, want in wants.items():
            xl, dyl = ref.to_layout(xb, layout), ref.to_layout(dy, layout)
            chosen.clear()
            dx, dw = K.conv2d_backward(xl, wb, dyl, layout=layout, padding="same")
            assert chosen == want
            dx_base, dw_base = K.conv2d_backward(xl, wb, dyl, layout=layout, padding="same", block=K.BLOCK)
            np.testing.assert_allclose(dx, dx_base, rtol=1e-5, atol=1e-4)
            np.testing.assert_allclose(dw, dw_base, rtol=1e-5, atol=1e-3)
    a, b = rng.standard_normal((40, 300)).astype(np.float32), rng.standard_normal((300, 128)).astype(np.float32)
    chosen.clear()
    y = K.dense_forward(a, b, np.zeros(128, np.float32))
    np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert chosen == ["6x64"]


def test_dense_forward_keeps_the_machines_block_where_the_wide_one_pads_the_batch_more(monkeypatch, rng):
    """dense's forward passes its batch as the product's rows: where those pad to at least a tenth
    more rows in the wide block (6 x 64) than in the machine's (8 x 32), the machine's runs, with
    the same results (16 and 32 rows: 18 and 36 against 16 and 32); 40, 64 and 128 rows, and
    products that give no rows, keep the wide one; an asked-for block runs as asked."""
    from kernels import _tile
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="8x32", wide="6x64", half=None,
                                            block_source="isa"))
    picks = {16: "8x32", 32: "8x32", 40: "6x64", 64: "6x64", 128: "6x64", 6: "6x64", 8: "8x32"}
    assert {rows: _tile.lanes_block(None, 512, rows).name for rows in picks} == picks
    assert _tile.lanes_block(None, 512).name == "6x64"
    assert _tile.lanes_block("6x64", 512, 32).name == "6x64"
    chosen = _record_blocks(monkeypatch, "lanes_block")
    w, bias = rng.standard_normal((300, 128)).astype(np.float32), np.zeros(128, np.float32)
    for n, want in ((32, "8x32"), (40, "6x64")):
        a = rng.standard_normal((n, 300)).astype(np.float32)
        chosen.clear()
        y = K.dense_forward(a, w, bias)
        assert chosen == [want]
        np.testing.assert_array_equal(y, K.dense_forward(a, w, bias, block="6x64" if want == "8x32" else "8x32"))


def test_output_channels_along_the_rows_take_the_block_that_pads_them_least(monkeypatch, rng):
    """rows_block: with no block asked for, the machine's block with as few as two thirds of its
    rows where that pads the rows at least a tenth less (the fewest padded rows, ties keeping the
    most rows: 64 rows stay 6 x 16, 66 against 4 x 16's 64); an asked-for block, and any block
    PROFILER_KERNEL_BLOCK set, as it is. conv2d's NCHW forwards with output channels along the rows
    (first layers), the input grads that run them (C_in under a block of lanes, from a quarter of
    it: fewer go by patch gradients) and dense's backward by slabs (rows over a block's J inputs)
    take it, with results identical to the machine's block (each output's reduction runs in the
    same order whatever the rows)."""
    from kernels import _tile
    for machine, picks in (("6x16", {32: "4x16", 16: "4x16", 7: "4x16", 1: "4x16", 10: "5x16", 6: "6x16",
                                     36: "6x16", 64: "6x16", 35: "6x16"}),
                           ("8x32", {32: "8x32", 20: "7x32", 18: "6x32", 10: "6x32", 64: "8x32", 63: "8x32"})):
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=machine, block_source="isa"))
        assert {n: _tile.rows_block(None, n).name for n in picks} == picks
        assert _tile.rows_block(machine, 32).name == machine
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=machine, block_source="env"))
        assert {_tile.rows_block(None, n).name for n in picks} == {machine}
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="6x16", wide=None, pixels=None, block_source="isa"))
    chosen = _record_blocks(monkeypatch, "rows_block")
    x, w = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((3, 3, 3, 32)).astype(np.float32)
    x10 = rng.standard_normal((2, 10, 9, 9)).astype(np.float32)
    w10 = rng.standard_normal((3, 3, 10, 32)).astype(np.float32)
    dy = rng.standard_normal((2, 32, 9, 9)).astype(np.float32)
    y = K.conv2d_forward(x, w, layout="NCHW", padding="same")
    dx, _ = K.conv2d_backward(x10, w10, dy, layout="NCHW", padding="same")
    assert chosen == ["4x16", "5x16"]   # the forward's 32 outputs; the input grad's 10 (a forward too)
    np.testing.assert_array_equal(y, K.conv2d_forward(x, w, layout="NCHW", padding="same", block="6x16"))
    np.testing.assert_array_equal(dx, K.conv2d_backward(x10, w10, dy, layout="NCHW", padding="same", block="6x16")[0])
    chosen.clear()
    K.conv2d_backward(x, w, dy, layout="NCHW", padding="same")
    assert chosen == []   # the input grad of 3 channels goes by patch gradients, not a forward
    chosen.clear()
    a, b, d = (rng.standard_normal(shape).astype(np.float32) for shape in ((64, 300), (300, 32), (64, 32)))
    grads = K.dense_backward(a, b, d)   # by slabs: a batch of 64 against 32 outputs
    assert chosen == ["4x16"]
    for got, want in zip(grads, K.dense_backward(a, b, d, block="6x16")):
        np.testing.assert_array_equal(got, want)


def test_products_take_the_half_block_where_it_pads_the_lanes_a_tenth_less(monkeypatch, rng):
    """With a half block (AVX-512's 8 x 16) and no block asked for, a product whose axis along the
    lanes pads to at least a tenth fewer lanes in it than in the machine's block runs it (48, 80
    and 112 channels; 10 dense outputs); whole blocks of the machine's or the wide block's lanes
    keep those; without a half block, with a block asked for or set by PROFILER_KERNEL_BLOCK, as
    before. conv2d's forwards, weight grads and NHWC input grad and dense's forward take it, with
    results as with the machine's block."""
    from kernels import _tile
    avx512 = dict(_isa.isa_info(), block="8x32", wide="6x64", half="8x16", block_source="isa")
    picks = {48: "8x16", 80: "8x16", 112: "8x16", 40: "8x16", 10: "8x16", 144: "8x16", 200: "8x32", 32: "8x32",
             96: "8x32", 64: "6x64", 128: "6x64"}
    monkeypatch.setattr(_isa, "_INFO", dict(avx512))
    assert {n: _tile.lanes_block(None, n).name for n in picks} == picks
    assert _tile.lanes_block("8x32", 48).name == "8x32"
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="8x32", wide="6x64", half=None, block_source="isa"))
    assert _tile.lanes_block(None, 48).name == "8x32"
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="4x16", wide=None, half=None, block_source="env"))
    assert _tile.lanes_block(None, 48).name == "4x16"
    monkeypatch.setattr(_isa, "_INFO", dict(avx512))
    chosen = _record_blocks(monkeypatch, "lanes_block")
    x, w = rng.standard_normal((2, 9, 9, 16)).astype(np.float32), rng.standard_normal((3, 3, 16, 48)).astype(np.float32)
    for layout, xl in (("NHWC", x), ("NCHW", np.ascontiguousarray(x.transpose(0, 3, 1, 2)))):
        chosen.clear()
        y = K.conv2d_forward(xl, w, layout=layout)
        assert chosen == ["8x16"]
        np.testing.assert_allclose(y, K.conv2d_forward(xl, w, layout=layout, block="8x32"), rtol=1e-5, atol=1e-4)
    # the backward: the weight grad's lanes along C_out = 48 (NHWC) or KW*C_in = 48 (NCHW), the NHWC
    # input grad's along C_in = 16 (NCHW's, 16 outputs under 32 lanes, runs output channels along the rows)
    dy = rng.standard_normal((2, 48, 9, 9)).astype(np.float32)
    for layout, want in (("NHWC", ["8x16", "8x16"]), ("NCHW", ["8x16"])):
        xl, dyl = ref.to_layout(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), layout), ref.to_layout(dy, layout)
        chosen.clear()
        dx, dw = K.conv2d_backward(xl, w, dyl, layout=layout, padding="same")
        assert chosen == want
        dx_base, dw_base = K.conv2d_backward(xl, w, dyl, layout=layout, padding="same", block="8x32")
        np.testing.assert_allclose(dx, dx_base, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(dw, dw_base, rtol=1e-5, atol=1e-3)
    a, b = rng.standard_normal((70, 300)).astype(np.float32), rng.standard_normal((300, 48)).astype(np.float32)
    chosen.clear()
    y = K.dense_forward(a, b, np.zeros(48, np.float32))
    assert chosen == ["8x16"]
    np.testing.assert_allclose(y, K.dense_forward(a, b, np.zeros(48, np.float32), block="8x32"), rtol=1e-5, atol=1e-4)


def test_pixels_along_the_lanes_take_the_pixel_block_where_it_pads_them_about_as_little(monkeypatch, rng):
    """rows_block with `along` (each image's pixels along the lanes): where the machine has a pixel
    block (AVX-512's 6 x 64, AVX2's 4 x 24) that pads the pixels to whole blocks of its lanes at
    most a 64th further than the machine's block (fewer pixels than its lanes: only padded less),
    it is the base the rows are fitted to (32 channels as 4 x 64 or 4 x 24); else the machine's
    block; without a pixel block, or with a
    block asked for or set by PROFILER_KERNEL_BLOCK, as before. conv2d's NCHW first-layer forwards
    pass each image's pixels, with results identical to the machine's block."""
    from kernels import _tile
    for machine, pixels, picks in (
            ("8x32", "6x64", {(32, 676): "4x64", (32, 1024): "4x64", (20, 676): "5x64", (64, 1024): "6x64",
                              (32, 900): "8x32", (32, 784): "8x32", (20, 900): "7x32", (32, 81): "8x32",
                              (32, 100): "4x64", (32, 1296): "8x32", (32, None): "8x32", (20, None): "7x32",
                              (32, 64): "4x64", (32, 36): "8x32", (32, 50): "8x32", (32, 20): "8x32"}),
            ("6x16", "4x24", {(32, 676): "4x24", (32, 1024): "4x24", (16, 900): "4x24", (64, 676): "4x24",
                              (6, 676): "3x24", (32, 100): "4x16", (32, 256): "4x16", (32, None): "4x16",
                              (10, None): "5x16", (32, 20): "4x24", (32, 12): "4x16", (32, 24): "4x24"})):
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=machine, pixels=pixels, block_source="isa"))
        assert {key: _tile.rows_block(None, *key).name for key in picks} == picks
        assert _tile.rows_block(machine, 32, 676).name == machine
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=machine, pixels=None, block_source="isa"))
        assert _tile.rows_block(None, 32, 1024).name == _tile.rows_block(None, 32).name
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=machine, pixels=None, block_source="env"))
        assert _tile.rows_block(None, 32, 1024).name == machine
    w = rng.standard_normal((3, 3, 3, 32)).astype(np.float32)
    # images of 256 pixels: 256 lanes in either block (AVX2: 264 against 256); 81: 128 against 96 (96 each)
    for machine, pixels, wants in (("8x32", "6x64", {16: "4x64", 9: "8x32"}),
                                   ("6x16", "4x24", {16: "4x16", 9: "4x24"})):
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=machine, pixels=pixels, block_source="isa"))
        chosen = _record_blocks(monkeypatch, "rows_block")
        for side, want in wants.items():
            x = rng.standard_normal((2, 3, side, side)).astype(np.float32)
            chosen.clear()
            y = K.conv2d_forward(x, w, layout="NCHW", padding="same")
            assert chosen == [want]
            np.testing.assert_array_equal(y, K.conv2d_forward(x, w, layout="NCHW", padding="same", block=machine))


def test_first_layers_weight_grads_take_one_kernel_row_a_block(monkeypatch, rng):
    """_shallow_block: with no block asked for, the first layers' weight grad (KW*C_in up to 16)
    runs blocks of KW*C_in rows, one kernel row each, while they fit in registers (14 rows of 32
    lanes, 6 of 16); an asked-for block, and any block PROFILER_KERNEL_BLOCK set, as it is.
    conv2d_backward takes it, with results identical to the machine's block (each output's sum
    runs over the same pixels in the same order whatever the rows)."""
    from kernels import _tile, conv
    for name, picks in (("8x32", {3: "3x32", 9: "9x32", 14: "14x32", 15: "8x32", 16: "8x32"}),
                        ("6x16", {3: "3x16", 4: "4x16", 6: "6x16", 7: "6x16", 9: "6x16", 16: "6x16"})):
        machine = _tile.block(name)
        monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block=name, block_source="isa"))
        assert {kl: conv._shallow_block(None, machine, kl).name for kl in picks} == picks
        assert conv._shallow_block(name, machine, 3).name == name
        assert conv._shallow(machine, 16) and not conv._shallow(machine, 17)
    machine = _tile.block("8x32")
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="8x32", block_source="isa"))
    chosen, choose = [], conv._shallow_block

    def spy(*args):
        chosen.append(choose(*args).name)
        return choose(*args)
    monkeypatch.setattr(conv, "_shallow_block", spy)
    x = rng.standard_normal((2, 1, 9, 11)).astype(np.float32)
    w = rng.standard_normal((3, 3, 1, 32)).astype(np.float32)
    for layout, stride in (("NCHW", 1), ("NHWC", 1), ("NCHW", 2), ("NHWC", 2)):
        xl = ref.to_layout(x, layout)
        dy = rng.standard_normal(K.conv2d_output_shape(xl.shape, w.shape, layout=layout, stride=stride, padding="same"))
        dy = dy.astype(np.float32)
        chosen.clear()
        _, dw = K.conv2d_backward(xl, w, dy, layout=layout, stride=stride, padding="same", need_dx=False)
        _, dw_machine = K.conv2d_backward(xl, w, dy, layout=layout, stride=stride, padding="same", need_dx=False,
                                          block="8x32")
        assert chosen == ["3x32", "8x32"]
        np.testing.assert_array_equal(dw, dw_machine)
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="8x32", block_source="env"))
    assert choose(None, machine, 3).name == "8x32"


def test_blocks_used_names_the_blocks_a_call_ran(monkeypatch, rng):
    """_tile.blocks_used, which names each benchmark row's blocks: a block asked for; the one a
    product picks for itself (the first layers' weight grad on an 8 x 32 machine: 3 x 32); none
    for kernels without a block (broadcast_add); and nothing once the `with` has ended."""
    from kernels._tile import blocks_used
    monkeypatch.setattr(_isa, "_INFO", dict(_isa.isa_info(), block="8x32", block_source="isa"))
    x = rng.standard_normal((2, 1, 9, 11)).astype(np.float32)
    w = rng.standard_normal((3, 3, 1, 32)).astype(np.float32)
    dy = rng.standard_normal((2, 32, 7, 9)).astype(np.float32)
    with blocks_used() as forward:
        K.conv2d_forward(x, w, layout="NCHW", block="5x24")
    with blocks_used() as weight_grad:
        K.conv2d_backward(x, w, dy, layout="NCHW", need_dx=False)
    with blocks_used() as bias:
        K.broadcast_add_forward(dy, np.ones(32, np.float32), layout="NCHW")
    K.conv2d_forward(x, w, layout="NCHW", block="6x16")
    assert (forward, weight_grad, bias) == ({"5x24"}, {"3x32"}, set())


@pytest.mark.slow
def test_the_avx2_build_compiles_and_is_correct(tmp_path):
    """On any x86 host: numba told it is a Haswell (own cache dir) builds the AVX2 code with
    AVX2's block, and conv2d (forwards, first layers' weight grads), dense, broadcast_add and NCHW
    max-pooling agree with a float64 or numpy reference. Its speed can only be measured on an AVX2
    machine."""
    code = """
import numpy as np, kernels as K
from tests import reference as ref
info = K.isa_info()
assert [info[k] for k in ("isa", "block", "wide", "pixels", "half")] == ["avx2", "6x16", None, "4x24", None], info
assert K.BLOCK == "6x16"
rng = np.random.default_rng(0)
x, w = rng.standard_normal((4, 3, 12, 13)).astype(np.float32), rng.standard_normal((3, 3, 3, 20)).astype(np.float32)
for layout in ("NCHW", "NHWC"):
    xl = ref.to_layout(x, layout)
    y = K.conv2d_forward(xl, w, layout=layout, padding="same")
    np.testing.assert_allclose(y, ref.conv2d(xl, w, layout, 1, "same"), rtol=1e-4, atol=1e-4)
    for c in (3, 1):   # first layers' weight grads, against sums over the zero-padded input
        xc, wc = x[:, :c], w[:, :, :c]
        dy = rng.standard_normal((4, 20, 12, 13)).astype(np.float32)
        _, dw = K.conv2d_backward(ref.to_layout(xc, layout), wc, ref.to_layout(dy, layout), layout=layout,
                                  padding="same", need_dx=False)
        xp = np.pad(xc.astype(float), ((0, 0), (0, 0), (1, 1), (1, 1)))
        want = [[np.einsum("bchw,bnhw->cn", xp[:, :, i:i + 12, j:j + 13], dy) for j in range(3)] for i in range(3)]
        np.testing.assert_allclose(dw, np.array(want), rtol=1e-4, atol=1e-3)
x28 = rng.standard_normal((2, 3, 28, 28)).astype(np.float32)   # 676 pixels: the pixel block, 4 x 24, 24-float runs
y28 = K.conv2d_forward(x28, w, layout="NCHW")
np.testing.assert_allclose(y28, ref.conv2d(x28, w, "NCHW", 1, "valid"), rtol=1e-4, atol=1e-4)
a, b = rng.standard_normal((70, 600)).astype(np.float32), rng.standard_normal((600, 130)).astype(np.float32)
np.testing.assert_allclose(K.dense_forward(a, b, np.zeros(130, np.float32)), a.astype(float) @ b, rtol=1e-4, atol=1e-3)
for c in (3, 32, 65):   # broadcast_add's sums in 64- and 16-float vectors: 8 and 2 ymm on AVX2
    d = rng.standard_normal((1001, c)).astype(np.float32)
    np.testing.assert_allclose(K.broadcast_add_backward(d, layout="NHWC"), d.astype(float).sum(0), rtol=1e-5, atol=1e-3)
for w in (5, 9, 13, 17, 35):   # max-pool's NCHW rows of 2, 4, 6, 8 and 17 windows, mostly ties (the first wins)
    x = rng.integers(0, 3, (2, 3, 7, w)).astype(np.float32)
    y, arg = K.maxpool2d_forward(x, layout="NCHW")
    ow = w // 2
    win = x[:, :, :6, :2 * ow].reshape(2, 3, 3, 2, ow, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 3, ow, 4)
    assert (y == win.max(-1)).all() and (arg == win.argmax(-1)).all()
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = K.maxpool2d_backward(dy, arg, x.shape, layout="NCHW", out=np.full_like(x, np.nan))
    routed = np.zeros_like(win)
    np.put_along_axis(routed, arg[..., None].astype(int), dy[..., None], -1)
    want = np.zeros_like(x)
    want[:, :, :6, :2 * ow] = routed.reshape(2, 3, 3, ow, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 6, 2 * ow)
    assert np.array_equal(dx, want)
k = K.conv._forward_bands[K.conv.block_of(None)]   # the NHWC 'same' forward's, above
asm = "".join(a for twin in (k.serial, k.parallel) for a in twin.inspect_asm().values())
assert "vfmadd" in asm and "zmm" not in asm
k = K.conv._forward_shifted[K.conv.block_of("4x24")]   # the 676-pixel forward's block, above
asm = "".join(a for twin in (k.serial, k.parallel) for a in twin.inspect_asm().values())
assert "vfmadd" in asm and "vextractf128" not in asm   # rows stored in runs of 8 floats, not split 24-float vectors
print("ok")
"""
    proc = _run(code, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=HASWELL, NUMBA_CACHE_DIR=str(tmp_path),
                PYTHONPATH=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_kernel_names_carry_a_digest_of_every_kernel_source(monkeypatch):
    """numba's disk cache is keyed on the compiled function's own file and name: a helper edited in
    another file (_tile, _copies) must still change the name, or stale machine code is reused."""
    from kernels import _jit

    def f(a):
        return a

    name = _jit._compiled(f).py_func.__name__
    monkeypatch.setattr(_jit, "SOURCES", "00000000")
    assert _jit._compiled(f).py_func.__name__ != name
    sources = sorted(Path(_jit.__file__).parent.glob("*.py"))
    assert {"_tile.py", "_copies.py", "conv.py", "dense.py"} <= {p.name for p in sources}
