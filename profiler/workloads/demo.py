"""`profiler demo` (and `make demo`): both bug reports reproduced on the engine, diagnosed, reported.

The Axon report: the mlp halted after the same epochs with growing max_epochs, once with the preallocated
history (the bug) and once with the default append history, both with a gc.collect() per epoch.
The Keras-MXNet report: mnist-cnn in NCHW and NHWC, compared op by op with what-if projections.
Every run is a fresh process, so GC state does not carry over.
"""

import shutil
from pathlib import Path

from ..analysis import analyze, compare, scaling, series
from ..report import figures, html, text
from .processes import run_many


def demo(out, quick=False):
    out = Path(out)
    max_epochs = [50, 20_000] if quick else [100, 10_000, 100_000]
    halt = 8 if quick else 30
    samples, cnn_epochs = (128, 2) if quick else (512, 3)
    policies = {}
    for history in ("preallocated", "append"):
        policies[history] = {n: out / f"axon-{history}" / f"max-{n}" for n in max_epochs}
    layouts = {layout: out / f"keras-mxnet-mnist-cnn-{layout}" for layout in ("NCHW", "NHWC")}
    jobs = [["run", "mlp", "--epochs", str(n), "--halt-after", str(halt), "--history", history,
             "--gc-collect", "epoch", "--out", str(d), "--quiet"]
            for history, runs in policies.items() for n, d in runs.items()]
    jobs += [["run", "mnist-cnn", "--layout", layout, "--epochs", str(cnn_epochs), "--samples", str(samples),
              "--out", str(d), "--quiet"] for layout, d in layouts.items()]
    print(f"profiler demo: {len(jobs)} runs in fresh processes under {out} ...")
    for d in [d for runs in policies.values() for d in runs.values()] + list(layouts.values()):
        shutil.rmtree(d, ignore_errors=True)   # a rerun replaces the demo's own runs, nothing else
    run_many(jobs, "demo")

    scalings = [scaling(runs) for runs in policies.values()]
    worst = policies["preallocated"][max_epochs[-1]]
    clean = policies["append"][max_epochs[-1]]
    diagnoses = [(analyze(d), series(d)) for d in (worst, clean)]
    comparison = compare(layouts["NCHW"], layouts["NHWC"])

    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    figures.save(figures.scaling(scalings[0]), fig_dir / "scaling-preallocated.png")
    figures.save(figures.epoch_time(diagnoses[0][1]), fig_dir / "epoch-time-preallocated.png")
    figures.save(figures.ops_by_run(comparison), fig_dir / "ops-nchw-vs-nhwc.png")
    report = out / "report.html"
    report.write_text(html.render(title="profiler demo: the two bug reports", scalings=scalings,
                                  comparisons=[comparison], diagnoses=diagnoses), encoding="utf-8")

    for name, result in zip(("preallocated history", "append history"), scalings):
        print(f"\n== Axon report, {name} ==\n{text.scaling(result)}")
    print(f"\n== Axon report, diagnosis of {worst} ==\ncause: {diagnoses[0][0].primary_cause}\n{text.verdict(diagnoses[0][0])}")
    print(f"\n== Keras-MXNet report, NCHW vs NHWC ==\n{text.comparison(comparison)}")
    print(f"\nreport: {report.resolve()}")
    return report
