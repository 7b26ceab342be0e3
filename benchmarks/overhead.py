"""What the profiler costs: epoch time with no session, light capture, deep capture every epoch,
deep every K epochs, and auto; and the profiler's own memory over 100,000 epochs of a tiny loop."""

import json
import shutil
import tempfile
import time

import numpy as np
import psutil

from profiler import Session
from profiler.workloads import scenarios
from profiler.workloads.engine import Loop

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


def instrument_costs(ops=200_000, epochs=5_000):
    """Seconds per op-timer use and per epoch of bookkeeping, timed directly: robust to the
    machine's noise, unlike the A/B rows above."""
    tmp = tempfile.mkdtemp(prefix="profiler-bench-")
    try:
        with Session(f"{tmp}/run") as session:
            with session.epoch(0):
                timer = session.op("x", layout="NHWC")
                start = time.perf_counter()
                for _ in range(ops):
                    with timer:
                        pass
                per_op = (time.perf_counter() - start) / ops
            start = time.perf_counter()
            for epoch in range(1, epochs):
                with session.epoch(epoch):
                    pass
            per_epoch = (time.perf_counter() - start) / (epochs - 1)
        return per_op, per_epoch
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ops_per_epoch(name, options):
    sc = scenarios.build(name, **options)
    tmp = tempfile.mkdtemp(prefix="profiler-bench-")
    try:
        with Session(f"{tmp}/run") as session:
            times = Loop(sc.model, sc.optimizer, sc.data, max_epochs=3, session=session).run().times
        with open(f"{tmp}/run/epochs.jsonl") as f:
            last = json.loads(f.read().splitlines()[-1])
        return sum(op["calls"] for op in last["ops"].values()), min(times)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
    per_op, per_epoch = instrument_costs()
    direct = []
    for name, options in (("mlp", {}), ("mnist-cnn", {"samples": 256})):
        calls, epoch_s = _ops_per_epoch(name, options)
        direct.append({"model": name, "ops": calls, "epoch_ms": epoch_s * 1e3,
                       "share": (calls * per_op + per_epoch) / epoch_s})
    return rows, own_memory(), (per_op, per_epoch, direct)


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
    rows, memory, (per_op, per_epoch, direct) = result
    out = [f"Light capture, timed directly: {per_op * 1e6:.2f} us per op-timer use, {per_epoch * 1e6:.0f} us of "
           f"bookkeeping per epoch (GC record, RSS and malloc reads, one JSON line written and flushed).", "",
           "| model | op calls per epoch | fastest epoch ms | light capture share of the epoch |",
           "|---|---:|---:|---:|"]
    out += [f"| {d['model']} | {d['ops']} | {d['epoch_ms']:.2f} | {100 * d['share']:.2f}% |" for d in direct]
    out += ["", "A/B runs, modes interleaved round by round (on a quiet machine; on a noisy one these rows "
            "swing by +-25% and the direct figures above are the ones to trust):", "",
            "| model | mode | median epoch ms | overhead |", "|---|---|---:|---:|"]
    out += [f"| {r['model']} | {r['mode']} | {r['epoch_ms']:.2f} | {100 * r['overhead']:+.1f}% |" for r in rows]
    out.append("")
    out.append(f"Profiler RSS growth over {memory['epochs']:,} epochs of a tiny loop (after epoch 1,000): "
               f"{memory['rss_growth_bytes'] / 1e6:.2f} MB.")
    return "\n".join(out)
