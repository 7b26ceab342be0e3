"""Every contract kernel x layout x direction, ours vs PyTorch, on the seed models' shapes."""

import numpy as np
import torch
import torch.nn.functional as F

import kernels as K
from kernels._tile import blocks_used

from .timing import interleaved, medians, middle_half, set_threads, spread_cell

CONVS = [  # name, N, C, H, W, C_out, padding
    ("mnist conv1 128x28x28 1->32", 128, 1, 28, 28, 32, "valid"),
    ("mnist conv2 128x26x26 32->64", 128, 32, 26, 26, 64, "valid"),
    ("cifar conv1 32x32x32 3->32 same", 32, 3, 32, 32, 32, "same"),
    ("cifar conv2 32x32x32 32->32", 32, 32, 32, 32, 32, "valid"),
    ("cifar conv3 32x15x15 32->64 same", 32, 32, 15, 15, 64, "same"),
    ("cifar conv4 32x15x15 64->64", 32, 64, 15, 15, 64, "valid"),
]


def _nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def _shared(a, layout="NCHW"):
    """(a's values as a numpy array, a tensor over the same memory): both candidates read the same
    bytes, so a row compares the loops, not where two allocators put their buffers. PyTorch
    allocates it, on a 64-byte line as it does its own tensors (numpy starts large arrays 16-48
    bytes past one, where both libraries' memory-bound loops ran 1.05-1.3x slower:
    docs/performance.md, session 20). A 4-D NHWC array's tensor is the NCHW view with
    channels-last strides."""
    t = torch.empty(a.shape, dtype=torch.float32)
    view = t.numpy()
    view[...] = a
    return view, t.permute(0, 3, 1, 2) if layout == "NHWC" else t


def _conv_cases(rng):
    for name, n, c, h, w, co, pad in CONVS:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = (rng.standard_normal((3, 3, c, co)) * 0.1).astype(np.float32)
        oh, ow = (h, w) if pad == "same" else (h - 2, w - 2)
        dy = rng.standard_normal((n, co, oh, ow)).astype(np.float32)
        flops = 2 * n * oh * ow * co * 9 * c
        tw = torch.tensor(wt.transpose(3, 2, 0, 1).copy())
        for layout in ("NCHW", "NHWC"):
            (xl, tx), (dyl, tdy) = (_shared(a if layout == "NCHW" else _nhwc(a), layout) for a in (x, dy))
            twl = tw.contiguous(memory_format=torch.contiguous_format if layout == "NCHW" else torch.channels_last)
            ws = K.Workspace()
            padding = 1 if pad == "same" else 0
            yield (f"conv2d_forward {name}", layout, flops, "GFLOP/s",
                   lambda xl=xl, wt=wt, layout=layout, ws=ws, pad=pad: K.conv2d_forward(xl, wt, layout=layout, padding=pad, workspace=ws),
                   lambda tx=tx, twl=twl, padding=padding: F.conv2d(tx, twl, padding=padding))
            yield (f"conv2d_backward {name}", layout, 2 * flops, "GFLOP/s",
                   lambda xl=xl, wt=wt, dyl=dyl, layout=layout, ws=ws, pad=pad: K.conv2d_backward(xl, wt, dyl, layout=layout, padding=pad, workspace=ws),
                   lambda tx=tx, twl=twl, tdy=tdy, padding=padding: torch.ops.aten.convolution_backward(
                       tdy, tx, twl, None, [1, 1], [padding, padding], [1, 1], False, [0, 0], 1, [True, True, False]))
            if c <= 3:   # a network's first layer: a training step asks it for dw alone, as the engine does
                yield (f"conv2d_backward dw only {name}", layout, flops, "GFLOP/s",
                       lambda xl=xl, wt=wt, dyl=dyl, layout=layout, ws=ws, pad=pad: K.conv2d_backward(
                           xl, wt, dyl, layout=layout, padding=pad, workspace=ws, need_dx=False),
                       lambda tx=tx, twl=twl, tdy=tdy, padding=padding: torch.ops.aten.convolution_backward(
                           tdy, tx, twl, None, [1, 1], [padding, padding], [1, 1], False, [0, 0], 1,
                           [False, True, False]))


def _bias_cases(rng):
    x = rng.standard_normal((128, 64, 24, 24)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    tb = torch.tensor(b).view(1, 64, 1, 1)
    for layout in ("NCHW", "NHWC"):
        xl = x if layout == "NCHW" else _nhwc(x)
        (xl, tx), (out, tout) = _shared(xl, layout), _shared(np.zeros_like(xl), layout)
        bshape = (1, 64, 1, 1) if layout == "NCHW" else (1, 1, 1, 64)
        yield ("broadcast_add_forward 128x64x24x24", layout, 2 * x.nbytes, "GB/s",
               lambda xl=xl, out=out, layout=layout: K.broadcast_add_forward(xl, b, layout=layout, out=out),
               lambda tx=tx, tout=tout: torch.add(tx, tb, out=tout),
               lambda xl=xl, out=out, bshape=bshape: np.add(xl, b.reshape(bshape), out=out))
        # in place, as the engine's layers add their bias to the conv or dense output
        yl, ty = _shared(xl, layout)
        yield ("broadcast_add_forward in place 128x64x24x24", layout, 2 * x.nbytes, "GB/s",
               lambda yl=yl, layout=layout: K.broadcast_add_forward(yl, b, layout=layout, out=yl),
               lambda ty=ty: ty.add_(tb),
               lambda yl=yl, bshape=bshape: np.add(yl, b.reshape(bshape), out=yl))
        yield ("broadcast_add_backward 128x64x24x24", layout, x.nbytes, "GB/s",
               lambda xl=xl, layout=layout: K.broadcast_add_backward(xl, layout=layout),
               lambda tx=tx: tx.sum((0, 2, 3)),
               lambda xl=xl, layout=layout: xl.sum(axis=(0, 2, 3) if layout == "NCHW" else (0, 1, 2)))


def _pool_cases(rng):
    """mnist-cnn's pool and cifar10-cnn's second (an odd input: its last row and column unpooled),
    forward with the argmax as a training step asks both libraries for it."""
    for n, c, h, w in [(128, 64, 24, 24), (32, 64, 13, 13)]:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        dy = rng.standard_normal((n, c, h // 2, w // 2)).astype(np.float32)
        for layout in ("NCHW", "NHWC"):
            (xl, tx), (dyl, tdy) = (_shared(a if layout == "NCHW" else _nhwc(a), layout) for a in (x, dy))
            y, arg = K.maxpool2d_forward(xl, layout=layout)
            ti = F.max_pool2d(tx, 2, return_indices=True)[1]
            yield (f"maxpool2d_forward {n}x{c}x{h}x{w}", layout, x.nbytes + y.nbytes + arg.nbytes, "GB/s",
                   lambda xl=xl, layout=layout: K.maxpool2d_forward(xl, layout=layout),
                   lambda tx=tx: F.max_pool2d(tx, 2, return_indices=True))
            yield (f"maxpool2d_backward {n}x{c}x{h}x{w}", layout, x.nbytes + y.nbytes + arg.nbytes, "GB/s",
                   lambda dyl=dyl, arg=arg, xl=xl, layout=layout: K.maxpool2d_backward(dyl, arg, xl.shape,
                                                                                      layout=layout),
                   lambda tdy=tdy, tx=tx, ti=ti: torch.ops.aten.max_pool2d_with_indices_backward(
                       tdy, tx, [2, 2], [2, 2], [0, 0], [1, 1], False, ti))


def _dense_cases(rng):
    for n, i, o in [(128, 9216, 128), (32, 2304, 512)]:   # mnist-cnn's and cifar10-cnn's big Dense
        (x, tx), (w, tw), (b, tb), (dy, tdy) = map(_shared, (rng.standard_normal((n, i)), rng.standard_normal((i, o)) * 0.01,
                                                             np.zeros(o), rng.standard_normal((n, o))))
        flops, ws = 2 * n * i * o, K.Workspace()
        yield (f"dense_forward {n}x{i}->{o}", "-", flops, "GFLOP/s",
               lambda x=x, w=w, b=b, ws=ws: K.dense_forward(x, w, b, workspace=ws),
               lambda tx=tx, tw=tw, tb=tb: torch.addmm(tb, tx, tw))
        yield (f"dense_backward {n}x{i}->{o}", "-", 2 * flops, "GFLOP/s",
               lambda x=x, w=w, dy=dy, ws=ws: K.dense_backward(x, w, dy, workspace=ws),
               lambda tx=tx, tw=tw, tdy=tdy: (tdy @ tw.T, tx.T @ tdy, tdy.sum(0)))


def run(threads=(1, 2), rounds=20):
    """Rows of ours vs PyTorch (and numpy) per kernel, layout and thread count. Both layouts of a
    kernel are timed in one interleaved set, so NCHW/NHWC compares calls made side by side too
    (from separate sets, a slow phase of the machine during one of them made it 2x)."""
    rng = np.random.default_rng(0)
    cases = list(_conv_cases(rng)) + list(_bias_cases(rng)) + list(_pool_cases(rng)) + list(_dense_cases(rng))
    kernels = {}   # kernel name -> its cases, one per layout, in order
    for case in cases:
        kernels.setdefault(case[0], []).append(case)
    rows = []
    for n in threads:
        with set_threads(n):
            for name, group in kernels.items():
                fns, blocks = {}, {}
                for case in group:
                    layout, ours, theirs = case[1], case[4], case[5]
                    fns[(layout, "ours")], fns[(layout, "torch")] = ours, theirs
                    if len(case) > 6:
                        fns[(layout, "numpy")] = case[6]
                    with blocks_used() as used:
                        ours()
                    blocks[layout] = ", ".join(sorted(used)) or "-"
                times = interleaved(fns, rounds=rounds)
                t = medians(times)
                for _, layout, work, unit, *_ in group:
                    numpy_s = t.get((layout, "numpy"))
                    rows.append({"threads": n, "kernel": name, "layout": layout, "ours_ms": t[(layout, "ours")] * 1e3,
                                 "torch_ms": t[(layout, "torch")] * 1e3, "rate": work / t[(layout, "ours")] / 1e9,
                                 "unit": unit, "torch_over_ours": t[(layout, "torch")] / t[(layout, "ours")],
                                 "spread": middle_half(times, (layout, "torch"), (layout, "ours")),
                                 "numpy_rate": work / numpy_s / 1e9 if numpy_s else None,
                                 "blocks": blocks[layout]})
    by_key = {(r["threads"], r["kernel"], r["layout"]): r for r in rows}
    for r in rows:
        if r["layout"] == "NCHW":
            other = by_key[(r["threads"], r["kernel"], "NHWC")]
            r["nchw_over_nhwc"] = other["nchw_over_nhwc"] = r["ours_ms"] / other["ours_ms"]
    return rows


def markdown(rows):
    out = ["| threads | kernel | layout | ours ms | torch ms | torch/ours | its rounds' middle half | ours rate | "
           "NCHW/NHWC (ours) | np.add/np.sum rate | our blocks |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        nchw = f"{r['nchw_over_nhwc']:.2f}" if "nchw_over_nhwc" in r else "-"
        numpy_rate = f"{r['numpy_rate']:.1f} {r['unit']}" if r["numpy_rate"] else "-"
        out.append(f"| {r['threads']} | {r['kernel']} | {r['layout']} | {r['ours_ms']:.3f} | {r['torch_ms']:.3f} | "
                   f"{r['torch_over_ours']:.2f} | {spread_cell(r['spread'])} | {r['rate']:.1f} {r['unit']} | "
                   f"{nchw} | {numpy_rate} | {r['blocks']} |")
    return "\n".join(out)
