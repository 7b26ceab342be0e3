"""Training-step time of the seed models, ours vs PyTorch eager: same model, data, thread count."""

import torch
import torch.nn as nn

from profiler.workloads import scenarios

from .timing import interleaved, medians, middle_half, set_threads, spread_cell


def torch_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(2, 100), nn.Sigmoid(), nn.Linear(100, 2)), torch.optim.Adam, {}
    if name == "mnist-cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                             nn.Linear(128, 10)), torch.optim.Adadelta, {}
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(2304, 512), nn.ReLU(),
                         nn.Dropout(0.5), nn.Linear(512, 10)), torch.optim.RMSprop, {"lr": 1e-4}


def _ours_epoch(sc):
    batches = [(x.copy(), y.copy()) for x, y in sc.data.epoch(0)]

    def epoch():
        for x, y in batches:
            sc.model.train_step(x, y)
            sc.optimizer.step([sc.model.flat_params], [sc.model.flat_grads])
    return epoch


def _torch_epoch(name, sc, layout):
    model, opt_cls, kw = torch_model(name)
    fmt = torch.channels_last if layout == "NHWC" and name != "mlp" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = opt_cls(model.parameters(), **kw)
    batches = []
    for x, y in sc.data.epoch(0):
        tx = torch.tensor(x)
        if name != "mlp" and layout == "NHWC":
            tx = tx.permute(0, 3, 1, 2)
        batches.append((tx.contiguous(memory_format=fmt), torch.tensor(y.argmax(axis=1))))

    def epoch():
        for tx, ty in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(model(tx), ty).backward()
            opt.step()
    return epoch


CASES = [("mlp", {"labels": "learnable"}, "epoch (36 steps)"), ("mnist-cnn", {"samples": 512}, "step (batch 128)"),
         ("cifar10-cnn", {"samples": 256}, "step (batch 32)")]


def run(threads=(1, 2), rounds=10):
    rows = []
    for n in threads:
        with set_threads(n):
            for name, options, unit in CASES:
                for layout in (("NHWC",) if name == "mlp" else ("NCHW", "NHWC")):
                    sc = scenarios.build(name, layout=layout, **options)
                    steps = 1 if name == "mlp" else len(sc.data)
                    times = interleaved({"ours": _ours_epoch(sc), "torch": _torch_epoch(name, sc, layout)},
                                        rounds=rounds)   # this machine swings 2x within seconds: 3 rounds were not enough
                    t = medians(times)
                    rows.append({"threads": n, "model": name, "layout": layout if name != "mlp" else "-",
                                 "unit": unit, "ours_ms": t["ours"] / steps * 1e3, "torch_ms": t["torch"] / steps * 1e3,
                                 "ours_over_torch": t["ours"] / t["torch"], "spread": middle_half(times, "ours", "torch")})
    return rows


def markdown(rows):
    out = ["| threads | model | layout | per | ours ms | torch ms | ours/torch | its rounds' middle half |",
           "|---|---|---|---|---:|---:|---:|---:|"]
    out += [f"| {r['threads']} | {r['model']} | {r['layout']} | {r['unit']} | {r['ours_ms']:.2f} | {r['torch_ms']:.2f} | "
            f"{r['ours_over_torch']:.2f} | {spread_cell(r['spread'])} |" for r in rows]
    return "\n".join(out)
