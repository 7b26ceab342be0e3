"""`profiler demo` (and `make demo`): both bug reports reproduced on the engine, diagnosed, reported.

The Axon report: the mlp halted after the same epochs with growing max_epochs, once with the preallocated
history (the bug) and once with the default append history, both with a gc.collect() per epoch.
The Keras-MXNet report: mnist-cnn in NCHW and NHWC, compared op by op with what-if projections.
A GC straggler (when torch is installed): mlp data-parallel on 2 ranks, rank 1 planted with GC
stalls, with automatic GC and with --gc-policy freeze, merged and compared.
Every run is a fresh process, so GC state does not carry over.
"""

import importlib.util
import shutil
from pathlib import Path

from ..analysis import analyze, compare, scaling, series
from ..analysis.ranks import rank_heatmap
from ..errors import UsageError
from ..report import figures, html, rank_text, text
from ..rundir.format import replaceable
from .processes import run_many


def demo(out, quick=False):
    out = Path(out)
    max_epochs = [50, 20_000] if quick else [100, 10_000, 100_000]
    halt = 8 if quick else 30
    samples, cnn_epochs = (128, 2) if quick else (512, 5)   # 5: the warm-up epoch is left out from 4 on
    policies = {}
    for history in ("preallocated", "append"):
        policies[history] = {n: out / f"axon-{history}" / f"max-{n}" for n in max_epochs}
    layouts = {layout: out / f"keras-mxnet-mnist-cnn-{layout}" for layout in ("NCHW", "NHWC")}
    jobs = [["run", "mlp", "--epochs", str(n), "--halt-after", str(halt), "--history", history,
             "--gc-collect", "epoch", "--out", str(d), "--quiet"]
            for history, runs in policies.items() for n, d in runs.items()]
    jobs += [["run", "mnist-cnn", "--layout", layout, "--epochs", str(cnn_epochs), "--samples", str(samples),
              "--out", str(d), "--quiet"] for layout, d in layouts.items()]
    ranks = ({policy: out / f"ranks-gc-{policy}" for policy in ("default", "freeze")}
             if importlib.util.find_spec("torch") else {})
    jobs += [["run", "--nproc-per-node", "2", "mlp", "--epochs", "6", "--straggler-rank", "1", "--gc-policy", policy,
              "--out", str(d), "--quiet"] for policy, d in ranks.items()]
    runs = [d for runs in policies.values() for d in runs.values()] + list(layouts.values()) + list(ranks.values())
    for d in runs:   # checked before any is removed
        if not replaceable(d):
            raise UsageError(f"--out {out}: {d} exists and is no run of the demo's, which a rerun replaces: move it "
                             f"or choose another --out")
    print(f"profiler demo: {len(jobs)} runs in fresh processes under {out} ...")
    for d in runs:
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
    sections = []
    if ranks:
        job, fix = analyze(ranks["default"]), compare(ranks["default"], ranks["freeze"])
        sections = [(rank_text.comparison_verdict(fix),
                     html.ranks_section(job.rank_analysis, rank_heatmap(ranks["default"])))]
    report = out / "report.html"
    report.write_text(html.render(title="profiler demo: the two bug reports", scalings=scalings,
                                  comparisons=[comparison], diagnoses=diagnoses, sections=sections), encoding="utf-8")

    for name, result in zip(("preallocated history", "append history"), scalings):
        print(f"\n== Axon report, {name} ==\n{text.scaling(result)}")
    print(f"\n== Axon report, diagnosis of {worst} ==\ncause: {diagnoses[0][0].primary_cause}\n{text.verdict(diagnoses[0][0])}")
    print(f"\n== Keras-MXNet report, NCHW vs NHWC ==\n{text.comparison(comparison)}")
    if ranks:
        print(f"\n== A GC straggler on 2 ranks ==\n{text.verdict(job)}\n\n{rank_text.comparison(fix)}")
    print(f"\nreport: {report.resolve()}")
    return report
