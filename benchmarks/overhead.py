"""What the profiler costs: epoch time with no session, light capture, deep capture every epoch,
deep every K epochs, and auto; and the profiler's own memory over 100,000 epochs of a tiny loop."""

import shutil
import tempfile

import numpy as np
import psutil

from profiler import Session, scenarios
from profiler.engine import Loop

MODES = [("no session", None), ("light", {}), ("deep every epoch", {"tracemalloc": True}),
         ("deep every 10", {"tracemalloc": True, "every": 10}), ("auto", {"tracemalloc": "auto"})]


def _median_epoch(name, options, epochs, session_options):
    sc = scenarios.build(name, **options)
    tmp = tempfile.mkdtemp(prefix="profiler-bench-")
    try:
        if session_options is None:
            times = Loop(sc.model, sc.optimizer, sc.data, max_epochs=epochs).run().times
        else:
            with Session(f"{tmp}/run", **session_options) as session:
                times = Loop(sc.model, sc.optimizer, sc.data, max_epochs=epochs, session=session).run().times
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return float(np.median(times[2:]))


def run(rounds=3):
    rows = []
    for name, options, epochs in (("mlp", {}, 40), ("mnist-cnn", {"samples": 256}, 6)):
        times = {label: [] for label, _ in MODES}
        for _ in range(rounds):   # interleave the modes, round after round
            for label, session_options in MODES:
                times[label].append(_median_epoch(name, options, epochs, session_options))
        base = np.median(times["no session"])
        for label, _ in MODES:
            t = np.median(times[label])
            rows.append({"model": name, "mode": label, "epoch_ms": t * 1e3, "overhead": t / base - 1})
    return rows, own_memory()


def own_memory(epochs=100_000):
    process = psutil.Process()
    tmp = tempfile.mkdtemp(prefix="profiler-bench-")
    try:
        with Session(f"{tmp}/run") as session:
            for epoch in range(epochs):
                with session.epoch(epoch):
                    with session.op("step"):
                        pass
                if epoch == 1000:
                    start = process.memory_info().rss
        return {"epochs": epochs, "rss_growth_bytes": process.memory_info().rss - start}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(result):
    rows, memory = result
    out = ["| model | mode | median epoch ms | overhead |", "|---|---|---:|---:|"]
    out += [f"| {r['model']} | {r['mode']} | {r['epoch_ms']:.2f} | {100 * r['overhead']:+.1f}% |" for r in rows]
    out.append("")
    out.append(f"Profiler RSS growth over {memory['epochs']:,} epochs of a tiny loop (after epoch 1,000): "
               f"{memory['rss_growth_bytes'] / 1e6:.2f} MB.")
    return "\n".join(out)
