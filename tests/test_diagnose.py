"""analyze() on synthetic runs with known answers: each finding, its time and evidence, and runs
that must get no finding."""

import dataclasses
import gc
import json
from types import SimpleNamespace
import subprocess
import sys
import warnings

import numpy as np
import pytest

from benchmarks.detection import stationary
from profiler import Session
from profiler.analysis import analyze, findings
from profiler.report import text
from profiler.report.text import pct


from .fixtures import MIB, epoch, from_walls, stepped_run, write_run


def patterns(d):
    return [f.pattern for f in d.findings]


def test_steady_gc_share_is_gc_steady(tmp_path):
    # the Axon preallocated history: every epoch pays ~80% of its time for one full collection
    rng = np.random.default_rng(0)
    records = [epoch(i, 0.050 * w, pause=(0.0, 0.0, 0.040 * w), collections=(0, 0, 1))
               for i, w in enumerate(rng.uniform(0.95, 1.05, 30))]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.primary_cause == "gc" and patterns(d) == ["gc-steady"]
    f = d.findings[0]
    assert f.time_fraction == pytest.approx(0.8, abs=0.01)
    assert d.gc.share_total == pytest.approx(0.8, abs=0.01) and d.gc.generation == 2
    assert f.evidence.collections_per_epoch[2] == 1
    assert "gc.freeze()" in text.remedy(f) and "80.0%" in text.evidence(f)
    # full collections in 2 epochs of 5: ~0.4 an epoch (a median of the counts said 0)
    records = [epoch(i, 0.050, pause=(0.0, 0.0, 0.040 if i % 5 < 2 else 0.0), collections=(0, 0, int(i % 5 < 2)))
               for i in range(30)]
    d = analyze(write_run(tmp_path / "some", records))
    f = next(f for f in d.findings if f.pattern == "gc-steady")
    assert f.evidence.collections_per_epoch[2] == pytest.approx(10 / 27)   # 27 epochs after the warm-up, 10 with one
    assert d.gc.full_collections_per_epoch == pytest.approx(10 / 27)
    assert "(0.37 full collections per epoch)" in text.evidence(f)


def test_steady_gc_of_young_collections_is_not_told_to_freeze(tmp_path):
    # cyclic garbage made every step: generation-0 collections carry the cost, and gc.freeze() (which
    # takes old objects out of full collections) and fewer full collections would change nothing
    records = [epoch(i, 0.050, pause=(0.025, 0.002, 0.0), collections=(400, 36, 0)) for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    f = d.findings[0]
    assert f.pattern == "gc-steady" and f.evidence.generation == 0
    remedy = text.remedy(f)
    assert "youngest generation's collections" in remedy and "gc.set_threshold(50_000, 20)" in remedy
    assert "gc.freeze()" not in remedy
    # the evidence counts the collections it names, and no full collection walks anything here (a probe:
    # "mostly in generation 0 collections (0 full collections per epoch); each full collection walks ~20k")
    records = [dict(r, gc=dict(r["gc"], tracked=[0, 0, 20_000])) for r in records]
    words = text.evidence(analyze(write_run(tmp_path / "tracked", records)).findings[0])
    assert "mostly in generation 0 collections (400 collections per epoch, 0 full collections per epoch); ~20k " \
           "tracked objects" in words and "each full collection" not in words, words


def test_the_programs_own_gc_collect_calls_get_their_own_remedy(tmp_path):
    # a gc.collect() every step (OneTrainer issue 1459): 36 of an epoch's 37 full collections, 88% of its GC pause
    site = "/home/u/train.py:88"
    def run(name, **forced):
        return analyze(write_run(tmp_path / name, [epoch(i, 0.050, pause=(0.001, 0.0, 0.040), collections=(20, 1, 37),
                                                         **forced) for i in range(30)]))
    d = run("forced", forced=(0, 0, 36), forced_pause=(0.0, 0.0, 0.036), forced_sites={site: (36, 0.036)})
    f = d.findings[0]
    assert f.pattern == "gc-steady" and f.evidence.forced.site == site and d.gc.forced_share == pytest.approx(36 / 41)
    assert f.evidence.forced.collections_per_epoch == [0, 0, 36]
    assert "; 87.8% of the pause is the program's own gc.collect() calls (36 calls per epoch, at /home/u/train.py:88)" \
        in text.evidence(f)
    assert text.remedy(f).startswith("87.8% of this pause is the program's own gc.collect() calls (at "
                                     "/home/u/train.py:88): call it less often")
    assert "gc.set_threshold" not in text.remedy(f)   # thresholds do not touch collections asked for
    # asked for from three lines: the longest paused is named, with the others counted
    d = run("three", forced=(0, 0, 36), forced_pause=(0.0, 0.0, 0.036),
            forced_sites={site: (12, 0.013), "/home/u/eval.py:5": (12, 0.012), "/home/u/log.py:9": (12, 0.011)})
    assert d.findings[0].evidence.forced.sites == [site, "/home/u/eval.py:5", "/home/u/log.py:9"]
    assert "(36 calls per epoch, at /home/u/train.py:88 and 2 other lines)" in text.evidence(d.findings[0])
    assert "gc.collect() calls (at /home/u/train.py:88 and 2 other lines): call it" in text.remedy(d.findings[0])
    assert not d.findings[0].evidence.forced.more_sites
    # asked for from more lines than an epoch's record keeps (the 3 longest paused): "at least"
    d = run("many", forced=(0, 0, 37), forced_pause=(0.0, 0.0, 0.037),
            forced_sites={site: (12, 0.013), "/home/u/eval.py:5": (12, 0.012), "/home/u/log.py:9": (12, 0.011)})
    assert d.findings[0].evidence.forced.more_sites
    assert "at /home/u/train.py:88 and at least 2 other lines)" in text.evidence(d.findings[0])
    # fewer lines than a record keeps, with calls whose line could not be told: no "at least"
    d = run("untold", forced=(0, 0, 37), forced_pause=(0.0, 0.0, 0.037), forced_sites={site: (30, 0.030)})
    assert not d.findings[0].evidence.forced.more_sites and "other line" not in text.evidence(d.findings[0])
    # the collector off (gc.disable()), the program collecting by itself: no "not at all"
    d = run("off", forced=(20, 1, 37), forced_pause=(0.001, 0.0, 0.040), forced_sites={site: (58, 0.041)})
    assert d.findings[0].evidence.forced.only
    assert "CPython ran none of its own. Call it less often (once an epoch, or every few hundred steps), or call " \
           "gc.freeze()" in text.remedy(d.findings[0])
    # one call an epoch: less often is every few epochs
    d = run("once", forced=(0, 0, 1), forced_pause=(0.0, 0.0, 0.030), forced_sites={site: (1, 0.030)})
    assert "call it less often (every few epochs) or not at all" in text.remedy(d.findings[0])
    # young collections asked for (gc.collect(0)): freezing the old objects would spare them nothing
    d = analyze(write_run(tmp_path / "young", [epoch(i, 0.050, pause=(0.030, 0.0, 0.0), collections=(400, 0, 0),
                                                     forced=(300, 0, 0), forced_pause=(0.025, 0.0, 0.0))
                                               for i in range(30)]))
    assert d.findings[0].evidence.forced.generation == 0 and "gc.freeze()" not in text.remedy(d.findings[0])
    # ...nor when they are all the collections there are, which leaves CPython nothing to do (no "it would collect")
    d = analyze(write_run(tmp_path / "young-only", [epoch(i, 0.050, pause=(0.030, 0.0, 0.0), collections=(100, 0, 0),
                                                          forced=(100, 0, 0), forced_pause=(0.030, 0.0, 0.0))
                                                    for i in range(30)]))
    remedy = text.remedy(d.findings[0])
    assert d.findings[0].evidence.forced.only and "gc.freeze()" not in remedy and "would collect" not in remedy
    assert remedy.endswith("every few hundred steps). With the collector on, CPython then collects at its own "
                           "threshold; with it off (gc.disable()), keep some calls: they are the only collections "
                           "there are.")
    # none asked for: the automatic collections' remedy, and no word of gc.collect() in the evidence
    d = run("automatic", forced=(0, 0, 0), forced_pause=(0.0, 0.0, 0.0))
    f = d.findings[0]
    assert d.gc.forced_share == 0.0 and f.evidence.forced.site is None
    assert "gc.collect()" not in text.evidence(f) and text.remedy(f).startswith("Call gc.freeze() once set-up is done")
    # a run written before forced collections were recorded
    d = run("older")
    assert d.gc.forced_share is None and d.findings[0].evidence.forced is None
    assert text.remedy(d.findings[0]).startswith("Call gc.freeze() once set-up is done")


def test_gc_collect_calls_lead_the_spikes_remedy_only_if_they_can_be_the_spikes():
    from types import SimpleNamespace
    spikes = SimpleNamespace(generation=2, count_by_generation=[0, 0, 40])
    def forced(calls):
        return findings.Forced(share=0.6, pause_s=1.0, collections_per_epoch=[0, 0, 1], site=None,
                               collections=[0, 0, calls])
    # one gc.collect() an epoch outside the steps, 40 spikes with an automatic full collection: not theirs
    assert not findings.forced_leads(SimpleNamespace(forced=forced(10), spikes=spikes))
    assert findings.forced_leads(SimpleNamespace(forced=forced(40), spikes=spikes))
    assert findings.forced_leads(SimpleNamespace(forced=forced(10)))   # steady GC: the share alone
    # --gc-policy manual:N collects between steps with automatic collection off: a step's collection is the program's
    steps = SimpleNamespace(unit="step", generation=2, count_by_generation=[0, 0, 40])
    low = dataclasses.replace(forced(20), share=0.3)   # the policy's own collections take most of the pause
    assert findings.forced_leads(SimpleNamespace(forced=low, spikes=steps, policy="manual:5"))
    assert not findings.forced_leads(SimpleNamespace(forced=low, spikes=steps, policy=None))
    # ...if they hold half of the spikes: a call now and then beside automatic collections turned back on is not
    assert not findings.forced_leads(SimpleNamespace(forced=dataclasses.replace(low, collections=[0, 0, 10]),
                                                     spikes=steps, policy="manual:5"))
    assert not findings.forced_leads(SimpleNamespace(forced=dataclasses.replace(low, collections=[0, 0, 0]), spikes=steps,
                                                     policy="manual:5"))


def test_a_gc_collect_every_few_steps_is_named_as_the_spikes_cause(tmp_path):
    # a real loop: a kept heap of ~100k objects and gc.collect() every 10th step, the spikes' cause
    kept = [{"i": i} for i in range(100_000)]
    line = sys._getframe().f_lineno + 8   # the gc.collect() below
    with Session(tmp_path / "run") as session:
        for e in range(12):
            with session.epoch(e):
                for i in range(40):
                    with session.step():
                        sum(range(20_000))
                        if i % 10 == 9:
                            gc.collect()
    d = analyze(tmp_path / "run")
    f = next(f for f in d.findings if f.pattern == "gc-spikes")
    assert f.evidence.forced.site == f"{__file__}:{line}" and f.evidence.forced.share > 0.9
    assert f.evidence.forced.collections_per_epoch[2] == 4
    assert text.remedy(f).startswith(f"{pct(f.evidence.forced.share)} of this pause is the program's own gc.collect() "
                                     f"calls (at {__file__}:{line})")
    del kept


def test_clean_run_is_none(tmp_path):
    rng = np.random.default_rng(1)
    records = [epoch(i, 0.007 * w, pause=(0.0, 0.0, 0.00002), collections=(0, 0, 1))
               for i, w in enumerate(rng.uniform(0.95, 1.05, 30))]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.primary_cause == "none" and d.findings == []
    assert "Nothing to fix" in text.verdict(d) and "holds steady" in text.verdict(d)


@pytest.mark.parametrize("growing", [False, True])
def test_spikes_from_a_loader_buffer(tmp_path, growing):
    # 40 epochs x 20 steps of 5 ms; every 30th step holds a generation-2 pause of 100 ms, or of 40-160 ms
    def pause_at(n):
        return (2, 0.040 + 0.120 * n / 800 if growing else 0.100) if n % 30 == 29 else None
    d = analyze(stepped_run(tmp_path / "run", 40, 20, 0.005, pause_at))
    assert d.primary_cause == "gc"
    spikes = next(f for f in d.findings if f.pattern == "gc-spikes")
    s = spikes.evidence.spikes
    assert s.unit == "step" and s.generation == 2 and s.gc_explained_fraction > 0.95
    assert s.median_s == pytest.approx(0.005, rel=0.01)
    expected = sum(p[1] for n in range(4 * 20, 800) if (p := pause_at(n))) / d.spikes.wall_s
    assert s.time_fraction == pytest.approx(expected, rel=0.02)
    assert spikes.evidence.every == pytest.approx(30, rel=0.05)
    assert d.steps.count == 36 * 20 and d.steps.gc_explained_fraction > 0.95
    assert ("gc-growing-pauses" in patterns(d)) == growing
    assert spikes.evidence.growing == ("gc-growing-pauses" if growing else None)
    if not growing:
        assert "every 30 steps" in text.remedy(spikes) and "same point on every rank" in text.remedy(spikes)
    else:   # a fixed N walks a heap that grows more often than CPython would: --gc-policy manual:83 made a probe's
        # growing heap slower (42.5 -> 44.4 ms an epoch)
        assert "every 30 steps" not in text.remedy(spikes)
        assert text.remedy(spikes).startswith("The heap these collections walk keeps growing (gc-growing-pauses)")
        assert "leave the collector's own schedule" in text.remedy(spikes)


def test_spikes_over_memory_that_grows_to_the_end_get_no_fixed_n(tmp_path):
    # the same spikes, too few and too even to fit growing pauses, while RSS grows 20 MiB an epoch to the
    # end (a probe's history of dicts: 7 full collections, 162 -> 522 ms, with "gc.collect() every 74 steps")
    d = analyze(stepped_run(tmp_path / "run", 40, 20, 0.005, lambda n: (2, 0.100) if n % 30 == 29 else None,
                            rss=lambda e: (200 + 20 * e) * MIB))
    spikes = next(f for f in d.findings if f.pattern == "gc-spikes")
    assert "gc-growing-pauses" not in patterns(d) and "allocation-growth" in patterns(d)
    assert spikes.evidence.growing == "allocation-growth"
    assert text.remedy(spikes).startswith("The heap these collections walk keeps growing (allocation-growth)")


def test_epoch_spikes_without_steps(tmp_path):
    # no steps.bin: one epoch in three holds a full collection of ~115 ms on top of ~100 ms
    rng = np.random.default_rng(3)
    records = []
    for i in range(45):
        pause = 0.115 * rng.uniform(0.97, 1.03) if i % 3 == 2 else 0.0
        records.append(epoch(i, 0.100 * rng.uniform(0.97, 1.03) + pause, pause=(0.0, 0.0, pause),
                             collections=(0, 0, int(pause > 0))))
    d = analyze(write_run(tmp_path / "run", records))
    assert d.steps is None and d.primary_cause == "gc"
    spikes = next(f for f in d.findings if f.pattern == "gc-spikes")
    s = spikes.evidence.spikes
    assert s.unit == "epoch" and s.count == 14 and s.gc_explained_fraction > 0.9 and s.generation == 2
    assert "every 3 epochs" in text.remedy(spikes)
    # no line is known: the remedy says how to find it rather than guessing a data loader
    assert "--tracemalloc auto" in text.remedy(spikes) and "name the line that keeps them" in text.remedy(spikes)


def test_pauses_that_grow_with_uptime_are_projected(tmp_path):
    # one full collection per 10 s epoch, 10 ms at first growing 2 ms per epoch: 0.72 s per hour of uptime
    records, events = [], []
    for i in range(60):
        pause = 0.010 + 0.002 * i
        events.append((10.0 * i + 5, pause, 2, 0))
        records.append(epoch(i, 10.0, pause=(0.0, 0.0, pause), collections=(0, 0, 1), start_s=10.0 * i))
    d = analyze(write_run(tmp_path / "run", records, gc_events=events))
    growth = next(f for f in d.findings if f.pattern == "gc-growing-pauses")
    e = growth.evidence
    assert e.source == "gc_events" and e.growth_s_per_hour == pytest.approx(0.72, rel=0.02)
    # the trend reaches 1 s where 0.010 + 0.0002 * (t - 5) = 1: t = 4955 s
    assert e.hours_to_one_second == pytest.approx(4955 / 3600, rel=0.02)
    assert "1 s after 82.6 min of uptime" in text.evidence(growth)


def test_pauses_grow_with_the_epochs_time_not_with_the_gaps_between_them(tmp_path):
    # one full collection per 100-ms epoch, 10 ms growing to 100; after epoch 7 a 20-s pause between
    # epochs (an evaluation, or deep capture's traced window, which the analysis leaves out). On the
    # run's clock the line fitted through the late collections started below zero: no finding, the
    # loss of a real one whenever a run was repeated with --tracemalloc auto (a user probe)
    records, events = [], []
    for i in range(30):
        start, pause = 0.1 * i + (20.0 if i > 7 else 0.0), 0.010 + 0.090 * i / 29
        records.append(epoch(i, 0.1, pause=(0.0, 0.0, pause), collections=(0, 0, 1), start_s=start))
        events.append((start + 0.05, pause, 2, 0))
    d = analyze(write_run(tmp_path / "run", records, gc_events=events))
    growth = next(f for f in d.findings if f.pattern == "gc-growing-pauses")
    skipped = d.epoch_time.warmup_epochs_skipped
    # uptime counted in the analysed epochs: 30 - skipped of them, from the first one's start
    assert growth.evidence.uptime_s == pytest.approx(0.1 * skipped + 0.1 * (29 - skipped) + 0.05)
    assert growth.evidence.growth_s_per_hour == pytest.approx(0.090 / 2.9 * 3600, rel=0.02)


def test_full_collections_of_the_set_up_before_the_epochs_are_no_growing_pauses(tmp_path):
    # building a big structure before training: full collections ramp 10 -> 200 ms in the set-up,
    # then stay flat at 200 ms in every epoch (the gc_heavy script of a user probe)
    events = [(0.1 * i, 0.010 + 0.02 * i, 2, 0) for i in range(10)]
    records = []
    for i in range(20):
        events.append((5.0 + 1.0 * i + 0.5, 0.200, 2, 0))
        records.append(epoch(i, 1.0, pause=(0.0, 0.0, 0.200), collections=(0, 0, 1), start_s=5.0 + 1.0 * i))
    d = analyze(write_run(tmp_path / "run", records, gc_events=events))
    assert "gc-growing-pauses" not in [f.pattern for f in d.findings]


def test_full_collections_between_the_epochs_are_outside_their_time(tmp_path):
    # a script's own gc.collect() after each 50-ms epoch, outside it, walking a heap that grows:
    # 20 -> 400 ms. Counted against the epochs' time they made a finding of 880% of the run (a
    # user probe); the epochs themselves hold no collection
    records = [epoch(i, 0.050, start_s=1.0 * i) for i in range(30)]
    events = [(1.0 * i + 0.5, 0.020 + 0.380 * i / 29, 2, 0) for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records, gc_events=events))
    assert d.findings == [], text.verdict(d)


def _between(pause, *, forced=True, site="train.py:9"):
    """An epoch record's gc_before: one full collection of `pause` seconds before the epoch."""
    record = {"pause_s": [0.0, 0.0, pause], "collections": [0, 0, 1], "forced": [0, 0, int(forced)],
              "forced_pause_s": [0.0, 0.0, pause if forced else 0.0]}
    if forced:
        record["forced_sites"] = [{"site": site, "collections": 1, "pause_s": pause}]
    return record


@pytest.mark.parametrize("forced", [True, False])
def test_collections_between_the_epochs_are_a_finding_of_their_own(tmp_path, forced):
    # a script's gc.collect() after each 50-ms epoch (or what its evaluation allocates), 200 ms a time
    # in 250-ms gaps: the epochs hold no GC, and the report said "GC takes 0.0% ... Nothing to fix"
    records = [dict(epoch(i, 0.050, start_s=0.3 * i), **({"gap_s": 0.25, "gc_before": _between(0.2, forced=forced)}
                                                          if i else {})) for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == ["gc-between-epochs"] and d.primary_cause == "gc"
    f = d.findings[0]
    n = 30 - d.epoch_time.warmup_epochs_skipped   # each analysed epoch and the gap before it
    assert f.time_fraction == pytest.approx(0.2 / 0.3) == pytest.approx(d.gc.share_between)
    assert (f.evidence.intervals, f.evidence.collections) == (n, [0, 0, n]) and d.gc.share_total == 0.0
    assert text.evidence(f).startswith(f"Between the epochs, outside every epoch's time, {n} collections ({n} full) "
                                       f"paused {0.2 * n:.2f} s: 66.7% of the epochs' time and the gaps' together")
    if forced:
        assert "1 call per gap, at train.py:9" in text.evidence(f) and "gc.collect() calls (at train.py:9)" in text.remedy(f)
        assert "CPython ran none of its own" in text.remedy(f)   # none anywhere: the epochs hold no collection
        # CPython's own collections inside the epochs: it does collect, so the calls can go
        auto = [dict(r, gc=dict(r["gc"], collections=[5, 0, 0], pause_s=[0.001, 0.0, 0.0], forced=[0, 0, 0],
                                forced_pause_s=[0.0, 0.0, 0.0])) for r in records]
        f = analyze(write_run(tmp_path / "auto", auto)).findings[0]
        assert f.pattern == "gc-between-epochs" and "since CPython collects on its own" in text.remedy(f)
    else:
        assert text.remedy(f).startswith("What runs between the epochs (an evaluation, a checkpoint, logging) allocates")


def test_the_set_up_before_the_first_training_epoch_is_no_gap_between_epochs(tmp_path):
    # profiler run's time windows through a script's set-up, then three DataLoader passes: the import of torch
    # after the last window (2.5 s, 640 collections) read "Between the epochs ... 17.1%", the primary cause
    setup = [epoch(i, 1.0, start_s=float(i), steps=0) for i in range(2)]
    passes = [dict(epoch(2 + i, 0.05, start_s=4.5 + 0.06 * i, steps=1), gap_s=2.5 if i == 0 else 0.01,
                   gc_before=_between(0.45 if i == 0 else 0.0, forced=False)) for i in range(3)]
    steps = [(2 + i, 4.5 + 0.06 * i, 0.05, 0, 0, 0) for i in range(3)]
    d = analyze(write_run(tmp_path / "run", setup + passes, steps=steps))
    assert d.epoch_time.warmup_epochs_skipped == 2 and patterns(d) == [], text.verdict(d)
    assert d.gc.share_between == 0.0 and d.epoch_time.between_share == pytest.approx(0.02 / 0.12)
    # only the set-up was left out: the three passes hold their warm-up (compare says so too)
    assert d.epoch_time.setup_epochs == 2
    assert text.verdict(d).startswith("3 epochs after the set-up, its warm-up included: too few"), text.verdict(d)
    # after warm-up epochs of training, the first analysed epoch's gap is the training's own
    warm = [dict(epoch(i, 0.05, start_s=0.3 * i, steps=1), gap_s=0.25, gc_before=_between(0.2, forced=False))
            for i in range(30)]
    d = analyze(write_run(tmp_path / "warm", warm, steps=[(i, 0.3 * i, 0.05, 0, 0, 0) for i in range(30)]))
    assert d.epoch_time.warmup_epochs_skipped > 0 and d.findings[0].evidence.intervals == 30 - d.epoch_time.warmup_epochs_skipped


def test_collections_between_the_epochs_under_a_manual_policy_are_the_policys(tmp_path):
    # --gc-policy manual:N in a run with no steps collects after each epoch (not asked for by the program),
    # beside the program's own gc.collect() there: the remedy is the policy's, and names the rest
    both = {"pause_s": [0.0, 0.0, 0.2], "collections": [0, 0, 2], "forced": [0, 0, 1], "forced_pause_s": [0.0, 0.0, 0.08],
            "forced_sites": [{"site": "train.py:9", "collections": 1, "pause_s": 0.08}]}
    records = [dict(epoch(i, 0.050, start_s=0.3 * i), gap_s=0.25, gc_before=both) for i in range(30)]
    run = write_run(tmp_path / "run", records)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(dict(meta, options={"gc_policy": "manual:5"})))
    f = analyze(run).findings[0]
    assert f.pattern == "gc-between-epochs"
    assert text.remedy(f) == (
        "Most of these are --gc-policy manual:5's own collections (a full gc.collect() after each epoch, in a run "
        "with no steps): leave collecting to CPython (--gc-policy default), or freeze what set-up made (--gc-policy "
        "freeze) so each collection walks only what training keeps; the rest, 40.0% of the pause, is the program's "
        "own gc.collect() calls (at train.py:9): remove them, since the policy collects already.")


def test_collections_between_the_epochs_that_cost_little_are_no_finding(tmp_path):
    # a 1-ms collection in each 250-ms gap (an evaluation's), 0.3% of the time: no finding, its share shown
    records = [dict(epoch(i, 0.050, start_s=0.3 * i), gap_s=0.25, gc_before=_between(0.001)) for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.findings == [] and d.gc.share_between == pytest.approx(0.001 / 0.3)
    assert "between epochs 0.3%" in text.diagnosis(d)
    # most of the time passed between the epochs (a rank-0 evaluation the others wait for): said, as time
    assert d.epoch_time.between_share == pytest.approx(0.25 / 0.3)
    assert "Note: 83.3% of the time passed between the epochs, outside them" in text.verdict(d)
    assert "ratio 1.00   trend" in text.diagnosis(d) and "between epochs 83.3% of the time" in text.diagnosis(d)
    short = analyze(write_run(tmp_path / "short", [dict(r, gap_s=0.01) for r in records]))
    assert short.epoch_time.between_share == pytest.approx(0.01 / 0.06) and "passed between" not in text.verdict(short)
    # gaps without a collection count for their time (no gc_before is none)
    quiet = analyze(write_run(tmp_path / "quiet", [dict(r, gc_before=None) if r["epoch"] % 2 else r for r in records]))
    assert quiet.gc.share_between == pytest.approx(0.001 * 15 / (0.3 * 30), rel=0.1)
    # a run written before they were recorded cannot say: None, and no share shown
    old = analyze(write_run(tmp_path / "old", [epoch(i, 0.050, start_s=0.3 * i) for i in range(30)]))
    assert old.gc.share_between is None and "between epochs" not in text.diagnosis(old)
    assert old.epoch_time.between_share is None


def test_growing_pauses_share_is_of_the_epochs_they_fall_in(tmp_path):
    # growing full collections inside the epochs and as many again, as long, between them: only
    # the ones inside count, so the share is at most the epochs' GC share
    records, events = [], []
    for i in range(30):
        pause = 0.002 + 0.008 * i / 29
        records.append(epoch(i, 0.100, pause=(0.0, 0.0, pause), collections=(0, 0, 1), start_s=1.0 * i))
        events += [(1.0 * i + 0.05, pause, 2, 0), (1.0 * i + 0.5, 10 * pause, 2, 0)]
    d = analyze(write_run(tmp_path / "run", records, gc_events=events))
    growth = next(f for f in d.findings if f.pattern == "gc-growing-pauses")
    assert growth.evidence.collections == 30 - d.epoch_time.warmup_epochs_skipped   # one an epoch after the warm-up
    assert 0 < growth.time_fraction <= d.gc.share_total < 0.1, text.verdict(d)


@pytest.mark.parametrize("epochs, per_epoch, wall_s, first_s, growth_s, found", [
    (12, 1, 0.005, 0.00008, 0.00002, False),   # a clean short run (the CI rehearsal's append-none demo):
                                               # 0.08 -> 0.10 ms, a sustained +25% within the jitter, 0.2% of it
    (60, 1, 1.0, 0.001, 0.001, True),          # 1 -> 2 ms over a minute: 0.05% of the run, but growing 1 ms
    (12, 10, 0.010, 0.0002, 0.0003, True),     # 0.2 -> 0.5 ms, ten a 10-ms epoch: under 0.5 ms, but 15% of the run
])
def test_growing_pauses_need_half_a_millisecond_of_growth_or_five_percent_of_the_run(
        tmp_path, epochs, per_epoch, wall_s, first_s, growth_s, found):
    events, records = [], []
    for i in range(epochs):
        pauses = [first_s + growth_s * (i * per_epoch + k) / (epochs * per_epoch - 1) for k in range(per_epoch)]
        events += [(wall_s * (i + (k + 0.5) / per_epoch), p, 2, 0) for k, p in enumerate(pauses)]
        records.append(epoch(i, wall_s, pause=(0.0, 0.0, sum(pauses)), collections=(0, 0, per_epoch),
                             start_s=wall_s * i))
    d = analyze(write_run(tmp_path / "run", records, gc_events=events))
    assert ("gc-growing-pauses" in [f.pattern for f in d.findings]) == found, text.verdict(d)
    if not found:
        assert d.primary_cause == "none"


def test_gc_share_of_the_run_leaves_out_the_traced_epochs_as_the_findings_do(tmp_path):
    # 10 ms of GC in every 50-ms epoch; the 4 epochs deep capture traced ran 5x longer. The summary
    # said 28% where the gc-steady finding said 74% (a user probe): both weigh the untraced epochs
    heap = {"traced_bytes": 1000, "peak_bytes": 1000, "top_growth": []}
    records = [epoch(i, 0.250 if i >= 9 else 0.050, pause=(0.0, 0.0, 0.010), collections=(0, 0, 1),
                     heap=heap if i >= 9 else None) for i in range(13)]
    d = analyze(write_run(tmp_path / "run", records))
    steady = next(f for f in d.findings if f.pattern == "gc-steady")
    assert d.gc.share_total == pytest.approx(0.2) == steady.evidence.share_total, text.verdict(d)


def test_the_gc_shares_early_and_late_and_memory_growth_leave_the_traced_epochs_out(tmp_path):
    # a probe: GC at 85% of every epoch, the 2 traced ones at 8% (tracemalloc slows the rest of the epoch), read
    # "late 8.5%"; malloc growing 1.6 MiB an epoch and 80 MiB in each traced one (tracemalloc's own traces) read
    # "malloc memory grows 10.9 MiB per epoch"
    heap = {"traced_bytes": 1000, "peak_bytes": 1000, "top_growth": []}
    records = [epoch(i, 0.100 if i < 10 else 1.0, pause=(0.0, 0.0, 0.085), collections=(0, 0, 1),
                     malloc=(100 + 1.6 * i + 80 * max(0, i - 9)) * MIB, rss=(200 + 80 * max(0, i - 9)) * MIB,
                     heap=heap if i >= 10 else None) for i in range(12)]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.gc.share_early == pytest.approx(0.85) and d.gc.share_late == pytest.approx(0.85)
    assert d.allocation.malloc_growth_bytes_per_epoch == pytest.approx(1.6 * MIB)
    # RSS's figures as its rate: "RSS's level rose 80.0 MiB" beside a flat rate (a review)
    assert (d.allocation.rss_rise_bytes, d.allocation.rss_end_bytes) == (0.0, 200 * MIB)
    assert "RSS's level rose" not in text.verdict(d)
    memory = next((f for f in d.findings if f.pattern == "allocation-growth"), None)
    assert memory is None or memory.evidence.growth_bytes_per_epoch < 2 * MIB, text.verdict(d)


def test_epochs_that_auto_capture_traced_are_left_out_of_the_epoch_time_trend(tmp_path):
    heap = {"traced_bytes": 1000, "peak_bytes": 1000, "top_growth": []}
    records = [epoch(i, 0.030 + 0.0003 * (i % 3) if i < 9 else 0.150, heap=heap if i >= 9 else None)
               for i in range(13)]   # the first is the warm-up, left out; 4 traced at the end
    d = analyze(write_run(tmp_path / "run", records))
    assert d.epoch_time.ratio == pytest.approx(1.0) and d.primary_cause == "none", text.verdict(d)
    # what tracing cost is said (a probe's loop ran 148x slower traced, and the report was silent)
    assert (d.epoch_time.traced_epochs, d.epoch_time.traced_slowdown) == (4, pytest.approx(0.150 / 0.0303))
    assert ("Note: the 4 epochs deep capture traced took 5.0x the others' median time (tracemalloc's cost), and "
            "are left out of the epoch-time trend.") in text.verdict(d)   # no steps to leave out
    untraced = analyze(write_run(tmp_path / "none", records[:9]))
    assert (untraced.epoch_time.traced_epochs, untraced.epoch_time.traced_slowdown) == (0, None)
    assert "deep capture traced" not in text.verdict(untraced)
    cheap = analyze(write_run(tmp_path / "cheap", [dict(r, wall_s=0.031) if r["heap"] else r for r in records]))
    assert cheap.epoch_time.traced_slowdown < 1.1 and "deep capture traced" not in text.verdict(cheap)


def test_compute_growth_leaves_the_traced_epochs_time_out_of_its_cost(tmp_path):
    # a slowdown from 30 to 45 ms over 30 epochs, and auto capture's window tracing epochs 8-11 at
    # 150 ms: the finding's cost is the untraced epochs' time above the early median (it was 62% of
    # a new user's run with the profiler's own 4 epochs in it, 11% without)
    heap = {"traced_bytes": 1000, "peak_bytes": 1000, "top_growth": []}
    walls = [0.030 + 0.0005 * i for i in range(30)]
    records = [epoch(i, 0.150 if 8 <= i < 12 else w, heap=heap if 8 <= i < 12 else None) for i, w in enumerate(walls)]
    d = analyze(write_run(tmp_path / "run", records))
    f = next(f for f in d.findings if f.pattern == "compute-growth")
    kept = [r["wall_s"] for r in records[d.epoch_time.warmup_epochs_skipped:] if r["heap"] is None]
    total = sum(r["wall_s"] for r in records[d.epoch_time.warmup_epochs_skipped:])
    expected = sum(max(w - d.epoch_time.early_median_s, 0) for w in kept) / total
    assert f.time_fraction == pytest.approx(expected * (1 - d.gc.explained_fraction), rel=1e-6)
    assert f.time_fraction < 0.2
    # no op timers: the remedy can be followed by a script run as it is, not by a Session alone (a probe)
    assert "session.op()" in text.remedy(f) and "profiler flamegraph --out f.svg -- python SCRIPT" in text.remedy(f)


def test_windows_before_the_first_step_are_set_up_not_training(tmp_path):
    # three time windows of a script's set-up (a big full collection, RSS climbing), then training
    records = [epoch(i, 0.2, pause=(0.0, 0.0, 0.14 if i == 2 else 0.0), collections=(0, 0, int(i == 2)),
                     rss=(200 + 150 * i) * MIB, steps=0) for i in range(3)]
    records += [epoch(i, 0.2, rss=650 * MIB, steps=100) for i in range(3, 15)]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.primary_cause == "none" and not d.findings, text.verdict(d)
    from profiler.analysis.load import load
    loaded = load(tmp_path / "run")
    assert (loaded.skipped, loaded.warmup) == (3 + 1, 1)   # the set-up, then the warm-up of the 12 left
    assert d.epoch_time.warmup_epochs_skipped == 4


def test_a_run_whose_epochs_are_all_traced_keeps_them_in_the_epoch_time(tmp_path):
    heap = {"traced_bytes": 1000, "peak_bytes": 1000, "top_growth": []}
    d = analyze(write_run(tmp_path / "run", [epoch(0, 0.03, heap=heap)]))
    assert d.epoch_time.early_median_s == pytest.approx(0.03)


def test_a_lopsided_interval_is_shown_as_its_range_not_a_plus_minus():
    from types import SimpleNamespace
    assert text.change(SimpleNamespace(relative=0.14, relative_low=0.11, relative_high=0.17)) == "+14% ± 3%"
    assert text.change(SimpleNamespace(relative=0.60, relative_low=0.09, relative_high=8.38)) == "+60% (+9% to +838%)"
    # a change that rounds to none has no sign of its own (a probe read "steps -0% ± 0%")
    assert text.change(SimpleNamespace(relative=-0.004, relative_low=-0.006, relative_high=-0.002)) == "+0% ± 0%"
    assert text.change(SimpleNamespace(relative=-0.01, relative_low=-0.05, relative_high=-0.001)) == "-1% (-5% to +0%)"


def test_leak_that_levels_off(tmp_path):
    rss = [200 * MIB + min(i, 20) * 8 * MIB for i in range(45)]
    d = analyze(write_run(tmp_path / "run", [epoch(i, 0.01, rss=r) for i, r in enumerate(rss)]))
    assert d.primary_cause == "allocation" and patterns(d) == ["allocation-growth"]
    e = d.findings[0].evidence
    assert e.measure == "rss" and e.levels_off and e.end_bytes == 360 * MIB
    assert text.evidence(d.findings[0]) == ("RSS memory grew 128.0 MiB (232.0 MiB -> 360.0 MiB); it levelled off by "
                                            "the last third of the run")
    assert "levelled off" in text.remedy(d.findings[0])


def test_a_cache_that_filled_and_then_held_is_growth_that_levelled_off(tmp_path):
    # 45 epochs; a 4-MiB array cached in each of epochs 15-24, then none: the slope over every epoch
    # is ~0 and the report said "memory is flat" beside the 40-MiB line (a probe)
    traced = [20 * MIB + min(max(i - 14, 0), 10) * 4 * MIB for i in range(45)]
    records = [epoch(i, 0.01, rss=100 * MIB + t, heap={"traced_bytes": t, "peak_bytes": 0}) for i, t in enumerate(traced)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == ["allocation-growth"]
    e = d.findings[0].evidence
    assert e.measure == "traced" and e.levels_off and e.end_bytes - e.start_bytes == 40 * MIB
    assert text.evidence(d.findings[0]).startswith("traced memory grew 40.0 MiB (20.0 MiB -> 60.0 MiB)")
    # filled in the first epochs after the warm-up: no finding, and not "flat" either
    early = [dict(r, heap=None, rss_bytes=100 * MIB + min(max(r["epoch"] - 4, 0), 5) * 4 * MIB) for r in records]
    d = analyze(write_run(tmp_path / "early", early))
    assert patterns(d) == [] and "memory held after it rose early in the run (RSS 100.0 MiB -> 120.0 MiB" in text.verdict(d)


@pytest.mark.parametrize("deep,words", [
    ("auto", "Deep capture (auto) traced no epoch: it waits for several epochs of growth first"),
    (False, "Run with tracemalloc on (profiler run --tracemalloc auto"),
])
def test_malloc_growth_with_no_line_says_what_to_run_next(tmp_path, deep, words):
    # 8 epochs of a tensor leak under --tracemalloc auto: the fix said "run with --tracemalloc auto" (a probe)
    records = [epoch(i, 0.01, malloc=100 * MIB + 20 * MIB * i) for i in range(8)]
    d = analyze(write_run(tmp_path / "run", records, options={"tracemalloc": deep}))
    assert patterns(d) == ["allocation-growth"] and text.remedy(d.findings[0]).startswith(words)
    # traced from the start, no line grew: untraced memory, said as such
    traced = [dict(r, heap={"traced_bytes": 1 * MIB, "peak_bytes": 1 * MIB, "top_growth": []}) for r in records]
    d = analyze(write_run(tmp_path / "traced", traced, options={"tracemalloc": True}))
    assert text.remedy(d.findings[0]).startswith("tracemalloc traced 8 epochs and named no line that grew: the "
                                                 "growth is memory it does not trace")
    # no snapshot in them (a script's set-up snapshot, over torch's import, took 22 s and the budget held the
    # next past the end): not "memory it does not trace" (a probe), but what to run instead
    held = [dict(r, heap={"traced_bytes": 1 * MIB, "peak_bytes": 1 * MIB, "top_growth": [], "snapshot": False})
            for r in records]
    d = analyze(write_run(tmp_path / "held", held, options={"tracemalloc": True}))
    assert d.findings[0].evidence.snapshots == 0
    assert text.remedy(d.findings[0]).startswith("tracemalloc traced 8 epochs but took no snapshot in them: one before "
                                                 "them took so long"), text.remedy(d.findings[0])
    assert "Run with --tracemalloc auto" in text.remedy(d.findings[0])
    # a snapshot only in the warm-up epoch counts none in the analysed ones; a run already on auto is not told to
    # run auto (a review)
    warm = [dict(r, heap={**r["heap"], "snapshot": r["epoch"] == 0}) for r in held]
    d = analyze(write_run(tmp_path / "warm", warm, options={"tracemalloc": True}))
    assert d.findings[0].evidence.snapshots == 0 and "but took no snapshot in them" in text.remedy(d.findings[0])
    d = analyze(write_run(tmp_path / "auto", held, options={"tracemalloc": "auto"}))
    assert "Run with --tracemalloc auto" not in text.remedy(d.findings[0]), text.remedy(d.findings[0])
    # traced memory itself grows and no line was named: not "memory it does not trace" (a review)
    grows = [dict(r, heap={"traced_bytes": (1 + 20 * r["epoch"]) * MIB, "peak_bytes": 0, "top_growth": []})
             for r in records]
    d = analyze(write_run(tmp_path / "grows", grows, options={"tracemalloc": True}))
    assert d.findings[0].evidence.measure == "traced"
    assert text.remedy(d.findings[0]).startswith("Deep capture's snapshots named no line of it")


def test_two_traced_epochs_give_no_traced_rate(tmp_path):
    # auto capture traced two epochs, the first holding 13 MiB more at its end: "traced -13.0 MiB per
    # epoch" beside malloc's 12.5 MiB of growth (a probe); three epochs make a rate
    heaps = {8: 30 * MIB, 9: 17 * MIB}
    records = [epoch(i, 0.01, heap={"traced_bytes": heaps[i], "peak_bytes": 0} if i in heaps else None)
               for i in range(12)]
    d = analyze(write_run(tmp_path / "two", records))
    assert d.allocation.traced_growth_bytes_per_epoch is None and "traced" not in text.diagnosis(d).split("memory")[-1]
    heaps[10] = 19 * MIB
    records = [epoch(i, 0.01, heap={"traced_bytes": heaps[i], "peak_bytes": 0} if i in heaps else None)
               for i in range(12)]
    assert analyze(write_run(tmp_path / "three", records)).allocation.traced_growth_bytes_per_epoch is not None


@pytest.mark.parametrize("seed", range(20))
def test_a_flat_rss_that_jumps_between_two_levels_is_no_growth(tmp_path, seed):
    # RSS drawn at random from 300 and 320 MiB each epoch: the median of the first three epochs under the
    # late median made "growth that levelled off" in a quarter of a reviewer's seeds
    rng = np.random.default_rng(seed)
    records = [epoch(i, 0.01, rss=(300 + 20 * int(rng.integers(2))) * MIB) for i in range(40)]
    assert patterns(analyze(write_run(tmp_path / "run", records))) == []


def test_a_level_that_rose_under_the_limit_is_said_so(tmp_path):
    # RSS 8 MiB higher from epoch 30 on: no finding, and the sentence says the level rose, not "flat"
    records = [epoch(i, 0.01, rss=100 * MIB + (8 * MIB if i >= 30 else 0)) for i in range(40)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == [] and ("RSS's level rose 8.0 MiB from the first third of the run to the last, under the "
                                  "16.0 MiB that counts as growing memory") in text.verdict(d)


def test_malloc_growth_read_in_some_epochs_only(tmp_path):
    # a costly heap's malloc reads are sparse (memory.py): growth is measured over the epochs that have one
    records = [epoch(i, 0.01, malloc=100 * MIB + i * MIB if i % 7 == 0 else None) for i in range(45)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == ["allocation-growth"]
    e = d.findings[0].evidence
    assert e.measure == "malloc" and e.growth_bytes_per_epoch == pytest.approx(MIB)
    assert e.start_bytes == 107 * MIB and e.end_bytes == 142 * MIB   # epochs 7 and 42 (after the warm-up)


def test_leak_names_the_line(tmp_path):
    records = [epoch(i, 0.01, rss=200 * MIB + i * 4 * MIB, malloc=100 * MIB + i * 4 * MIB,
                     heap={"traced_bytes": 50 * MIB + i * 4 * MIB, "peak_bytes": 0,
                           "top_growth": [{"site": "train.py:42", "size_diff": 4 * MIB, "count_diff": 1}]})
               for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    f = d.findings[0]
    assert f.pattern == "allocation-growth" and not f.evidence.levels_off
    assert f.evidence.measure == "traced" and f.evidence.growth_bytes_per_epoch == pytest.approx(4 * MIB)
    assert "train.py:42" in text.remedy(f) and "keeps growing" in text.evidence(f)


def test_a_leak_of_numpy_buffers_names_their_line_not_a_smaller_python_one(tmp_path):
    # 8 MiB of numpy kept each epoch at train.py:7 and a float appended at train.py:8: the remedy named
    # :8, the first line of kind "python" (a user probe)
    growth = [{"site": "train.py:7", "size_diff": 8 * MIB, "count_diff": 3, "kind": "numpy"},
              {"site": "train.py:8", "size_diff": 24, "count_diff": 1, "kind": "python"}]
    records = [epoch(i, 0.01, rss=200 * MIB + i * 8 * MIB, malloc=100 * MIB + i * 8 * MIB,
                     heap={"traced_bytes": 50 * MIB + i * 8 * MIB, "peak_bytes": 0, "top_growth": growth})
               for i in range(30)]
    f = analyze(write_run(tmp_path / "run", records)).findings[0]
    assert f.pattern == "allocation-growth"
    assert text.remedy(f) == "Drop the reference that keeps what train.py:7 allocates alive, or bound the container it goes into."


def test_a_leak_whose_snapshots_all_fell_in_the_warm_up_is_still_named(tmp_path):
    # deep capture (tracemalloc=True) after a snapshot that took a second waits within its budget:
    # a short run's snapshots can all be in its first epochs, which the analysis leaves out as warm-up
    def heap(i):
        snapshot = i < 2
        return {"traced_bytes": 50 * MIB + i * 4 * MIB, "peak_bytes": 0, "snapshot": snapshot,
                "top_growth": [{"site": "train.py:42", "size_diff": 4 * MIB, "count_diff": 1}] if snapshot else []}
    records = [epoch(i, 0.01, rss=200 * MIB + i * 4 * MIB, malloc=100 * MIB + i * 4 * MIB, heap=heap(i))
               for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    f = d.findings[0]
    assert d.epoch_time.warmup_epochs_skipped >= 2 and f.pattern == "allocation-growth"
    assert [s.site for s in f.evidence.top_sites] == ["train.py:42"] and "train.py:42" in text.remedy(f)
    assert f.evidence.sites_share == pytest.approx(2 * 4 / 30 / 4)   # two snapshots' 4 MiB over 30 traced epochs
    # a later snapshot that saw nothing grow: the warm-up's sites (set-up filling caches) are not blamed
    later = [dict(r, heap=dict(r["heap"], snapshot=True)) if r["epoch"] == 20 else r for r in records]
    f = analyze(write_run(tmp_path / "later", later)).findings[0]
    assert f.pattern == "allocation-growth" and f.evidence.top_sites == []
    # no line to name, though tracemalloc traced it: the remedy says how to trace from the start however the
    # run was made (it named only profiler run's option, which the pytest marker and a Session do not take)
    assert text.remedy(f).endswith('run with tracemalloc on from the start (profiler run --tracemalloc on; '
                                   'Session(..., tracemalloc=True); @pytest.mark.profile_epochs(..., tracemalloc=True)), '
                                   'a snapshot every epoch (every=1) and fewer epochs or a smaller data set, to name '
                                   'the lines.')


def test_growth_that_tracemalloc_barely_saw_is_not_blamed_on_the_line_it_did_see(tmp_path):
    # a loss tensor kept with its graph each batch: 21 MiB more malloc per epoch, tracemalloc sees 40 KiB
    # of it, in torch's collate (a user probe's leak_graph.py under --tracemalloc auto)
    traced = {"traced_bytes": 2 * MIB, "peak_bytes": 0,
              "top_growth": [{"site": "/venv/torch/utils/data/_utils/collate.py:275", "size_diff": 40 * 1024,
                              "count_diff": 1}]}
    records = [epoch(i, 0.01, rss=200 * MIB + i * 21 * MIB, malloc=100 * MIB + i * 21 * MIB,
                     heap=traced if 20 <= i < 24 else None) for i in range(30)]
    f = analyze(write_run(tmp_path / "run", records)).findings[0]
    assert f.pattern == "allocation-growth" and f.evidence.measure == "malloc"
    assert f.evidence.sites_share == pytest.approx(40 / (21 * 1024), rel=0.01)
    assert text.remedy(f).startswith("tracemalloc saw 0.2% of it grow") and "tensor storage" in text.remedy(f)


def test_traced_memory_grows_within_each_auto_capture_window_not_across_them(tmp_path):
    # tracemalloc starts afresh in each 4-epoch window: 1.65, 2.44, 3.24, 4.03 MB, then again
    records = []
    for i in range(40):
        window = i // 10 in (1, 3) and i % 10 < 4
        heap = {"traced_bytes": int((1.65 + 0.79 * (i % 10)) * MIB), "peak_bytes": 0, "top_growth": []}
        records.append(epoch(i, 0.01, malloc=100 * MIB + i * MIB, heap=heap if window else None))
    rates = findings.memory_rates(records)
    assert rates["traced"] == pytest.approx(0.79 * MIB, rel=0.01)


def test_compute_growth_names_the_op(tmp_path):
    rng = np.random.default_rng(2)
    records = []
    for i in range(60):
        data, matmul, conv = 0.004, 0.002 + 0.0001 * i, 0.003
        ops = {("data", ()): data, ("matmul", (("layout", "NCHW"),)): matmul, ("conv[fast]", ()): conv}
        records.append(epoch(i, (data + matmul + conv) * rng.uniform(1.0, 1.03), ops=ops))
    d = analyze(write_run(tmp_path / "run", records))
    assert d.primary_cause == "compute" and d.epoch_time.slowdown
    f = d.findings[0]
    assert f.evidence.ops[0].name == "matmul" and f.evidence.ops[0].tags == {"layout": "NCHW"}
    assert "matmul (layout=NCHW)" in text.evidence(f) and "matmul (layout=NCHW)" in text.remedy(f)
    assert {(o.name, tuple(o.tags)) for o in d.ops} == {("data", ()), ("matmul", ("layout",)), ("conv[fast]", ())}
    # the epoch grows from 9 ms to ~15 ms: the stated change and its interval hold the truth
    c = d.epoch_time.change
    assert c.relative_low <= (0.0151 / 0.0094 - 1) <= c.relative_high + 0.1
    assert "get slower" in text.verdict(d) and "±" in text.verdict(d)


def test_run_that_got_faster_says_faster(tmp_path):
    d = analyze(from_walls(tmp_path / "run", np.linspace(0.087, 0.024, 30)))
    assert d.epoch_time.faster and not d.epoch_time.slowdown and d.primary_cause == "none"
    assert text.verdict(d).startswith("Epochs get faster") and "slower" not in text.verdict(d)


@pytest.mark.parametrize("seed", range(5))
def test_noise_with_reverting_level_switches_is_none(tmp_path, seed):
    walls = stationary(np.random.default_rng(seed), 150)
    walls[40:60] *= 1.5     # a switch that reverts
    walls[100] *= 5         # one slow epoch
    d = analyze(from_walls(tmp_path / "run", walls))
    assert d.primary_cause == "none" and not d.epoch_time.slowdown, text.verdict(d)


def test_worker_copy_on_read(tmp_path):
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 4, "uss_bytes": (40 + 20 * i) * MIB,
                                                        "pss_bytes": (60 + 20 * i) * MIB}) for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.primary_cause == "allocation" and patterns(d) == ["worker-copy-on-read"]
    e = d.findings[0].evidence
    assert e.trend and e.count == 4 and e.uss_growth_bytes_per_epoch == pytest.approx(20 * MIB)
    assert d.workers.count == 4 and d.workers.private_bytes == (40 + 20 * 29) * MIB
    assert "numpy arrays" in text.remedy(d.findings[0]) and "gc.freeze() does not stop that" in text.remedy(d.findings[0])


def test_workers_reforked_every_epoch_that_grow_within_it(tmp_path):
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 2, "uss_bytes": 60 * MIB, "pss_bytes": 70 * MIB,
                                                        "uss_growth_bytes": 50 * MIB}) for i in range(10)]
    d = analyze(write_run(tmp_path / "run", records))
    f = d.findings[0]
    assert f.pattern == "worker-copy-on-read" and f.evidence.worker_growth_bytes == 25 * MIB   # 50 MiB over 2
    assert f.evidence.grew and not f.evidence.trend
    assert "one worker's private memory grew 25.0 MiB after it started" in text.evidence(f)


@pytest.mark.parametrize("copied_mib", [0, 1, 10, 30])
def test_workers_whose_own_full_collection_copied_the_parents_pages(tmp_path, copied_mib):
    # a worker grew 36 MiB; its first full collection copied 30 of them (the rest is what a clean
    # worker holds: gc.freeze() is the fix), 10 (reading copied 26 more: the dataset is, and
    # gc.freeze() for the 10), 1 (a frozen parent's: no word of it), or nothing was recorded
    workers = {"count": 2, "uss_bytes": 90 * MIB, "pss_bytes": 120 * MIB, "uss_growth_bytes": 72 * MIB,
               "uss_growth_max_bytes": 36 * MIB, "new": 2, "carried_uss_bytes": 0}
    if copied_mib:
        workers |= {"full_collections": 2, "gc_copied_bytes": 2 * copied_mib * MIB,
                    "gc_copied_max_bytes": copied_mib * MIB}
    d = analyze(write_run(tmp_path / "run", [epoch(i, 0.01, rss=400 * MIB, workers=workers) for i in range(10)]))
    assert patterns(d) == ["worker-copy-on-read"]
    f = d.findings[0]
    assert f.evidence.worker_gc_copied_bytes == copied_mib * MIB
    assert (f.evidence.collector, f.evidence.read) == (copied_mib >= 10, copied_mib < 30)
    said, fix = text.evidence(f), text.remedy(f)
    assert said.startswith("2 workers held 90.0 MiB of private memory at the last epoch's peak (USS; PSS 120.0 MiB), "
                           "45.0 MiB each against")
    assert ("as it read" in said) == (copied_mib < 30)
    assert (f"full collection copied {copied_mib}.0 MiB of the parent's pages" in said) == (copied_mib >= 10)
    assert fix.startswith("Call gc.freeze()" if copied_mib == 30 else "Keep the dataset in numpy arrays")
    assert ("Call gc.freeze() just before" in fix) == (copied_mib >= 10)


def test_a_workers_collection_copy_is_a_finding_however_late_the_parent_first_saw_it(tmp_path):
    # the parent's first sample came after each worker's collection: no growth seen, 70 MiB copied
    workers = {"count": 2, "uss_bytes": 160 * MIB, "pss_bytes": 300 * MIB, "uss_growth_bytes": 2 * MIB,
               "uss_growth_max_bytes": MIB, "new": 2, "carried_uss_bytes": 0, "full_collections": 2,
               "gc_copied_bytes": 140 * MIB, "gc_copied_max_bytes": 70 * MIB}
    d = analyze(write_run(tmp_path / "run", [epoch(i, 0.01, rss=400 * MIB, workers=workers) for i in range(10)]))
    f = d.findings[0]
    assert patterns(d) == ["worker-copy-on-read"] and not f.evidence.grew and not f.evidence.read
    assert "grew" not in text.evidence(f) and "copied 70.0 MiB" in text.evidence(f)
    assert text.remedy(f).startswith("Call gc.freeze()")


def test_persistent_workers_that_keep_growing_after_their_collection_are_reading(tmp_path):
    # 4 persistent workers: 40 MiB copied by each one's first full collection, then 0.4 MiB more each
    # epoch (12 MiB a worker over the run, under the one-pass limit; 46 MiB for the 4, a trend)
    records = [epoch(i, 0.01, rss=400 * MIB, workers={
        "count": 4, "uss_bytes": int((4 * 50 + 1.6 * i) * MIB), "pss_bytes": 300 * MIB,
        "uss_growth_bytes": int((160 + 1.6 * i) * MIB), "uss_growth_max_bytes": int((40 + 0.4 * i) * MIB),
        "new": 4 if i == 0 else 0, "carried_uss_bytes": int((4 * 50 + 1.6 * i) * MIB),
        "full_collections": 4, "gc_copied_bytes": 160 * MIB, "gc_copied_max_bytes": 40 * MIB}) for i in range(30)]
    f = analyze(write_run(tmp_path / "run", records)).findings[0]
    assert f.evidence.trend and f.evidence.collector and f.evidence.read
    assert text.remedy(f).startswith("Keep the dataset in numpy arrays") and "Call gc.freeze()" in text.remedy(f)


def test_spawned_children_are_counted_but_are_no_copy_on_read(tmp_path):
    # 3 children that exec'd python (spawned workers and a resource tracker), 150 MiB each, grown from 0
    workers = {"count": 0, "uss_bytes": 0, "pss_bytes": 0, "uss_growth_bytes": 0, "uss_growth_max_bytes": 0,
               "new": 0, "carried_uss_bytes": 0, "spawned": 3, "spawned_uss_bytes": 450 * MIB}
    d = analyze(write_run(tmp_path / "run", [epoch(i, 0.01, rss=400 * MIB, workers=workers) for i in range(10)]))
    assert patterns(d) == [] and (d.workers.count, d.workers.private_bytes, d.workers.spawned) == (3, 450 * MIB, 3)
    assert "workers      3 (3 spawned), 450.0 MiB private" in text.diagnosis(d)


@pytest.mark.parametrize("new, found", [(2, False), (0, True)])
def test_workers_forked_anew_every_epoch_have_no_trend_across_epochs(tmp_path, new, found):
    # the same USS rising 4 MiB an epoch: re-forked workers sampled later in each epoch (new: 2 of 2
    # first seen in the epoch) are no growth; the same two workers carried over are (epoch 0's are new)
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 2, "uss_bytes": (40 + 4 * i) * MIB,
                                                        "pss_bytes": (50 + 4 * i) * MIB, "uss_growth_bytes": 1 * MIB,
                                                        "new": 2 if i == 0 else new}) for i in range(10)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == (["worker-copy-on-read"] if found else []), text.verdict(d)
    if found:
        assert d.findings[0].evidence.uss_growth_bytes_per_epoch == pytest.approx(4 * MIB)


@pytest.mark.parametrize("each_mib, found", [(7, False), (20, True)])
def test_growth_within_an_epoch_is_judged_per_worker(tmp_path, each_mib, found):
    # 4 workers forked anew every epoch: 7 MiB each (28 MiB in all) is what clean torch workers grow
    # by (measured up to 10 MB each); 20 MiB each is copy-on-read
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 4, "uss_bytes": (4 * 10 + 4 * each_mib) * MIB,
                                                        "pss_bytes": 200 * MIB, "uss_growth_bytes": 4 * each_mib * MIB,
                                                        "new": 4}) for i in range(10)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == (["worker-copy-on-read"] if found else []), text.verdict(d)


def test_epochs_without_workers_are_left_out_of_the_trend(tmp_path):
    # 6 epochs before any worker started, then 2 persistent workers flat at 100 MiB
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 0, "uss_bytes": 0, "pss_bytes": 0, "new": 0})
               for i in range(6)]
    records += [epoch(i, 0.01, rss=400 * MIB, workers={"count": 2, "uss_bytes": 100 * MIB, "pss_bytes": 120 * MIB,
                                                         "new": 2 if i == 6 else 0, "carried_uss_bytes": 0 if i == 6 else 100 * MIB})
                for i in range(6, 12)]
    assert patterns(analyze(write_run(tmp_path / "run", records))) == []


def test_persistent_workers_that_grow_beside_workers_forked_every_epoch(tmp_path):
    # 2 persistent training workers growing 4 MiB an epoch, and 2 validation workers new every epoch
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 4, "uss_bytes": (60 + 4 * i) * MIB, "pss_bytes": 200 * MIB,
                                                        "uss_growth_bytes": 2 * MIB, "uss_growth_max_bytes": 1 * MIB,
                                                        "new": 2, "carried_uss_bytes": (40 + 4 * i) * MIB})
               for i in range(1, 12)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == ["worker-copy-on-read"] and d.findings[0].evidence.trend
    assert d.findings[0].evidence.uss_growth_bytes_per_epoch == pytest.approx(4 * MIB)


def test_one_worker_that_grows_is_found_among_eight(tmp_path):
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 8, "uss_bytes": 140 * MIB, "pss_bytes": 300 * MIB,
                                                        "uss_growth_bytes": 67 * MIB, "uss_growth_max_bytes": 60 * MIB,
                                                        "new": 8, "carried_uss_bytes": 0}) for i in range(10)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == ["worker-copy-on-read"] and d.findings[0].evidence.worker_growth_bytes == 60 * MIB


def test_small_flat_workers_are_no_finding(tmp_path):
    records = [epoch(i, 0.01, rss=400 * MIB, workers={"count": 4, "uss_bytes": 40 * MIB, "pss_bytes": 60 * MIB,
                                                        "uss_growth_bytes": 1 * MIB}) for i in range(10)]
    d = analyze(write_run(tmp_path / "run", records))
    assert d.findings == [] and d.workers.count == 4


def test_deep_capture_names_the_objects_each_collection_walks(tmp_path):
    records = []
    for i in range(30):
        tracked = 100_000 + 40_000 * i
        heap = {"traced_bytes": 10 * MIB, "peak_bytes": 0, "top_growth": [],
                "top_types": [{"type": "list", "count": int(0.95 * tracked), "count_diff": 38_000, "site": "loader.py:42"},
                              {"type": "dict", "count": int(0.04 * tracked), "count_diff": 1_000, "site": None}]}
        records.append(epoch(i, 0.1, pause=(0.0, 0.0, 0.03), collections=(0, 0, 1), heap=heap,
                             tracked=[0, 0, tracked]))
    d = analyze(write_run(tmp_path / "run", records))
    f = d.findings[0]
    o = f.evidence.objects
    assert f.pattern == "gc-steady" and o.top_type == "list" and o.top_type_share == pytest.approx(0.95, abs=0.001)
    assert o.tracked == 100_000 + 40_000 * 29 and o.tracked_growth_per_epoch == pytest.approx(40_000)
    words = text.evidence(f)
    assert "~1.3M tracked objects" in words and "95.0% of them list" in words and "loader.py:42" in words
    assert "each full collection walks" in words and "last count" not in words   # counted in the last epoch


def test_the_top_types_share_is_of_the_objects_tracked_when_they_were_counted(tmp_path):
    """The tracked count is sampled within a budget, so its latest may come from epochs before the
    types' last count; a growing heap then read as more than 100% of one type (a probe: 107.3%
    list). The share is of that epoch's count, else never of a count smaller than the types' sum."""
    def run(name, tracked_every):
        records = []
        for i in range(12):
            objects = 100_000 + 20_000 * i
            heap = {"traced_bytes": MIB, "peak_bytes": 0, "top_growth": [],
                    "top_types": [{"type": "list", "count": int(0.99 * objects), "count_diff": 19_800, "site": "a.py:3"}]}
            records.append(epoch(i, 0.1, pause=(0.0, 0.0, 0.03), collections=(0, 0, 1), heap=heap,
                                 tracked=[0, 0, objects] if i % tracked_every == 0 else None))
        return analyze(write_run(tmp_path / name, records)).findings[0].evidence.objects
    assert run("same-epoch", 1).top_type_share == pytest.approx(0.99, abs=0.001)
    o = run("older-count", 5)   # tracked at epochs 0, 5, 10 (300k); the types' last count at 11 (316.8k lists)
    assert o.tracked == 300_000 and o.top_type_share == pytest.approx(1.0)


@pytest.mark.parametrize("traced", [False, True])
def test_steps_slowed_by_deep_capture_are_no_spikes(tmp_path, traced):
    """Auto capture's windows trace allocations, which slows their steps 2-10x: those epochs' steps
    are left out of the spikes, as the epoch trend leaves the epochs out; the same slow steps in
    untraced epochs are spikes (the known answer both ways; no GC anywhere)."""
    rng = np.random.default_rng(0)
    records, steps, clock = [], [], 0.0
    for e in range(40):
        slow = 20 <= e < 24   # the window's epochs: every step 5x
        walls = rng.uniform(0.0009, 0.0011, 10) * (5 if slow else 1)
        for w in walls:
            steps.append((e, clock, w, 0.0, 0.0, 0.0))
            clock += w
        heap = {"traced_bytes": MIB, "peak_bytes": MIB, "top_growth": []} if slow and traced else None
        records.append(epoch(e, float(walls.sum()), start_s=clock - float(walls.sum()), steps=10, heap=heap))
    d = analyze(write_run(tmp_path / "run", records, steps=steps))
    looked_at = 10 * (40 - d.epoch_time.warmup_epochs_skipped - (4 if traced else 0))
    assert d.steps.count == looked_at
    if traced:
        assert d.spikes.count == 0 and d.steps.spike_time_fraction == 0.0
    else:
        assert d.spikes.count == 40 and d.steps.spike_time_fraction > 0.05


def test_a_count_of_objects_from_the_warm_up_is_still_evidence(tmp_path):
    """A big heap's tracked count is sampled within a time budget, so a short run may hold one
    count, in its first epoch (the warm-up, left out of the timings): the GC finding still says how
    many objects full collections walked at that epoch, with no growth rate from one count."""
    records = [epoch(i, 0.1, pause=(0.0, 0.0, 0.03), collections=(0, 0, 1),
                     tracked=[0, 0, 2_000_000] if i == 0 else None) for i in range(30)]
    d = analyze(write_run(tmp_path / "run", records))
    f = d.findings[0]
    assert f.pattern == "gc-steady" and d.epoch_time.warmup_epochs_skipped >= 1
    assert f.evidence.objects.tracked == 2_000_000 and f.evidence.objects.tracked_growth_per_epoch is None
    assert d.gc.tracked == 2_000_000 and "~2.0M tracked objects" in text.evidence(f)
    # the count is that epoch's, not the last's: a heap that grows would make it short (a user probe
    # read "each full collection walks ~65k" of a heap grown to 1.6M)
    assert f.evidence.objects.tracked_epoch == 0 and "at epoch 0 (the last count; the run went on to epoch 29)" \
        in text.evidence(f) and "each full collection walks" not in text.evidence(f)


def test_findings_are_ranked_and_growing_memory_leads_only_without_a_costly_finding(tmp_path):
    leak = [epoch(i, 0.1, pause=(0.0, 0.0, 0.03), collections=(0, 0, 1), rss=200 * MIB + 8 * MIB * i)
            for i in range(30)]
    d = analyze(write_run(tmp_path / "a", leak))
    assert patterns(d) == ["gc-steady", "allocation-growth"] and d.primary_cause == "gc"
    light = [epoch(i, 0.1, pause=(0.0, 0.0, 0.003), collections=(0, 0, 1), rss=200 * MIB + 8 * MIB * i)
             for i in range(30)]
    d = analyze(write_run(tmp_path / "b", light))
    assert patterns(d) == ["allocation-growth"] and d.primary_cause == "allocation"


def test_too_short_a_run_tells_no_trend(tmp_path):
    d = analyze(from_walls(tmp_path / "run", [0.010, 0.020, 0.030]))
    # 3 epochs keep their warm-up in (none is left out, so none is called one)
    assert text.verdict(d).startswith("3 epochs: too few to tell") and not d.epoch_time.slowdown


def test_incomplete_run_says_so(tmp_path):
    run = from_walls(tmp_path / "run", [0.01] * 6, status="running")
    d = analyze(run)
    assert not d.complete and "incomplete" in text.verdict(d)


def test_numpy_stays_quiet_on_zero_and_tiny_runs(tmp_path):
    from profiler.analysis import compare, scaling, series, step_series
    from profiler.report import json_out, trace
    from profiler.rundir import read_run
    runs = [from_walls(tmp_path / "one", [0.0]), from_walls(tmp_path / "zeros", [0.0] * 10),
            write_run(tmp_path / "steps", [epoch(0, 0.0)], steps=[(0, 0.0, 0.0, 0.0, 0.0, 0.0)])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for run in runs:
            json_out.render(analyze(run))
            series(run)
            step_series(read_run(run))
            trace.write_run(run, tmp_path / "t.json")
        json_out.render(compare(runs[0], runs[1]))
        text.comparison(compare(runs[0], runs[1]))
        json_out.render(scaling({1: runs[0], 2: runs[1]}))


@pytest.mark.slow
@pytest.mark.parametrize("history", ["preallocated", "append"])
def test_the_axon_demo_runs_keep_their_diagnosis(tmp_path, history):
    # the demo's seed-1 runs, smaller: a preallocated history walked by a full collection every
    # epoch is gc (steady share); the append history has no GC or memory finding. Its 12 epochs
    # last ~60 ms, less than the machine's slow phases (seconds): one that begins inside the run
    # is a sustained slowdown of its epochs, found as compute-growth (1 CI-sized run in 30)
    out = tmp_path / history
    proc = subprocess.run([sys.executable, "-m", "profiler", "run", "mlp", "--epochs", "50000", "--halt-after", "12",
                           "--history", history, "--gc-collect", "epoch", "--out", str(out), "--quiet"],
                          timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    d = analyze(out)
    if history == "preallocated":
        assert d.primary_cause == "gc", text.verdict(d)
        assert d.findings[0].pattern == "gc-steady" and d.gc.share_total > 0.3
    else:
        assert d.primary_cause in ("none", "compute") and not [f for f in d.findings if f.cause != "compute"], \
            text.verdict(d)


def test_type_growth_per_epoch_divides_by_the_epochs_each_count_covers():
    from profiler.analysis.findings import objects

    def record(e, types=None, covered=None):
        heap = None
        if types is not None:
            heap = {"traced_bytes": 1, "peak_bytes": 1, "top_growth": [], "top_types": types, "snapshot": True,
                    "types_epochs": covered}
        return {"epoch": e, "gc": {"tracked": None}, "heap": heap}
    grown = [{"type": "list", "count": 50_000, "count_diff": 4000, "site": "x.py:1"}]
    one_window = [record(e) for e in range(11)] + [record(11, grown, 4)]          # auto: 4 epochs in one count
    assert objects(one_window, one_window).top_type_growth_per_epoch == 1000
    two_windows = one_window + [record(e) for e in range(12, 80)] + [record(80, grown, 4)]   # rests are not counted
    assert objects(two_windows, two_windows).top_type_growth_per_epoch == 1000


@pytest.mark.parametrize("batch_mib, prefetch, found", [(40, 2, False), (10, 2, True), (24, None, False), (None, None, True)])
def test_a_workers_own_batches_in_flight_are_not_copy_on_read(tmp_path, batch_mib, prefetch, found):
    # one worker grew 86 MiB in its pass, making 40 MiB batches (prefetch 2: up to 160 MiB of its own);
    # with 10 MiB batches (40 MiB in flight), or no batch recorded, the same growth is copy-on-read
    workers = {"count": 1, "uss_bytes": 120 * MIB, "pss_bytes": 130 * MIB, "uss_growth_bytes": 86 * MIB,
               "uss_growth_max_bytes": 86 * MIB, "new": 1, "carried_uss_bytes": 0}
    if batch_mib is not None:
        workers |= {"batch_bytes": batch_mib * MIB, "prefetch_factor": prefetch}
    records = [epoch(i, 0.01, rss=1000 * MIB, workers=workers) for i in range(10)]
    d = analyze(write_run(tmp_path / "run", records))
    assert patterns(d) == (["worker-copy-on-read"] if found else []), text.verdict(d)
    if found and batch_mib:
        assert text.evidence(d.findings[0]).startswith("1 worker held 120.0 MiB of private memory at the last "
                                                       "epoch's peak (USS; PSS 130.0 MiB) against the parent's")
        assert text.evidence(d.findings[0]).endswith("grew 86.0 MiB after it started, as it read, more than the "
                                                     "40.0 MiB its batches in flight can hold")


def test_epochs_that_swing_between_two_speeds_are_not_called_steady(tmp_path):
    # epochs of 18 or 150 ms (a collection every few epochs), more of the slow ones late: medians
    # 18 and 150 ms with no sustained trend, which the headline said was "holding steady"
    walls = np.array([150, 18, 18, 18, 150, 150, 150, 150, 150, 150, 150, 18, 150, 18, 150]) / 1000
    d = analyze(from_walls(tmp_path / "run", walls))
    assert d.epoch_time.swings and not d.epoch_time.steady and not d.epoch_time.slowdown
    assert text.verdict(d).startswith("Epoch time swings too much to tell a trend: median epoch time 18.00 ms early, "
                                      "150.00 ms late (late / early 8.33, but no sustained trend;")


def test_the_programs_own_calls_under_a_manual_policy_are_theirs_not_the_policys(tmp_path):
    import json
    records = [epoch(i, 0.050, pause=(0.0, 0.0, 0.040), collections=(0, 0, 37), forced=(0, 0, 36),
                     forced_pause=(0.0, 0.0, 0.039), forced_sites={"/home/u/train.py:88": (36, 0.039)}) for i in range(30)]
    run = write_run(tmp_path / "run", records)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "options": {"gc_policy": "manual:50"}}))
    remedy = text.remedy(analyze(run).findings[0])
    assert remedy.startswith("97.5% of this pause is the program's own gc.collect() calls (at /home/u/train.py:88)")
    assert "since --gc-policy manual:50 collects already" in remedy and "CPython collects on its own" not in remedy


def test_a_manual_gc_policys_own_collections_get_its_remedy(tmp_path):
    import json
    records = [epoch(i, 0.050, pause=(0.0, 0.0, 0.040), collections=(0, 0, 1)) for i in range(30)]
    run = write_run(tmp_path / "run", records)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "options": {"gc_policy": "manual:50"}}))
    f = analyze(run).findings[0]
    assert f.pattern == "gc-steady" and f.evidence.policy == "manual:50"
    assert text.remedy(f).startswith("These are --gc-policy manual:50's own collections (a full gc.collect() every 50 "
                                     "steps, automatic collection off): collect less often")
    assert "gc.set_threshold" not in text.remedy(f)   # automatic collection is off: thresholds do nothing


def _with_policy(run, policy):
    import json
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "options": {"gc_policy": policy}}))
    return run


def test_a_manual_policys_remedy_names_the_programs_own_calls_beside_it(tmp_path):
    # 12 full collections an epoch: the policy's 8 and the program's 4 (a third of the pause)
    records = [epoch(i, 0.050, pause=(0.0, 0.0, 0.036), collections=(0, 0, 12), forced=(0, 0, 4),
                     forced_pause=(0.0, 0.0, 0.012), forced_sites={"/home/u/train.py:16": (4, 0.012)}) for i in range(30)]
    f = analyze(_with_policy(write_run(tmp_path / "run", records), "manual:2")).findings[0]
    assert f.pattern == "gc-steady" and not findings.forced_leads(f.evidence)
    assert text.remedy(f).startswith("Most of these are --gc-policy manual:2's own collections")
    assert text.remedy(f).endswith("; the rest, 33.3% of the pause, is the program's own gc.collect() calls (at "
                                   "/home/u/train.py:16): remove them, since the policy collects already.")
    # its step spikes: automatic collection is off and the policy collects between steps, so they are the program's
    spikes = dataclasses.replace(f, pattern="gc-spikes", evidence=SimpleNamespace(
        forced=f.evidence.forced, policy="manual:2", spikes=SimpleNamespace(unit="step", generation=2,
                                                                            count_by_generation=[0, 0, 4])))
    assert text.remedy(spikes) == ("The spikes are the program's own gc.collect() calls (at /home/u/train.py:16), as "
                                   "the policy collects only between steps, with automatic collection off: call it less "
                                   "often (once an epoch, or every few hundred steps) or not at all, since --gc-policy "
                                   "manual:2 collects already.")


def test_the_programs_calls_under_gc_policy_off_are_the_only_collections(tmp_path):
    records = [epoch(i, 0.050, pause=(0.0, 0.0, 0.030), collections=(0, 0, 4), forced=(0, 0, 4),
                     forced_pause=(0.0, 0.0, 0.030), forced_sites={"/home/u/train.py:16": (4, 0.030)}) for i in range(30)]
    f = analyze(_with_policy(write_run(tmp_path / "run", records), "off")).findings[0]
    remedy = text.remedy(f)
    assert remedy == ("100.0% of this pause is the program's own gc.collect() calls (at /home/u/train.py:16), the only "
                      "collections with --gc-policy off: call it less often (once an epoch, or every few hundred "
                      "steps), or call gc.freeze() once set-up is done so each call walks only what training keeps.")


def test_no_fitted_trend_is_neither_steady_nor_a_confident_zero(tmp_path):
    """A trend line that starts at or below zero (a step up from ~0.1 ms to 10 ms) has no relative
    change: it read "+0% ± 0%" and a short run read steady in the JSON while its text said too few
    epochs to tell (a probe). Neither is steady, and the text says no trend was fitted."""
    d = analyze(from_walls(tmp_path / "step", [0.0001] * 15 + [0.01] * 15))
    assert not d.epoch_time.change.fitted and not d.epoch_time.steady and not d.epoch_time.slowdown
    words = text.verdict(d)
    assert "no trend could be fitted" in words and "± 0%" not in words, words
    assert "trend none fitted" in text.diagnosis(d)
    short = analyze(from_walls(tmp_path / "short", [0.01, 0.01, 0.01]))
    assert not short.epoch_time.change.fitted and not short.epoch_time.steady
    assert "trend too few epochs to tell" in text.diagnosis(short)
    flat = analyze(from_walls(tmp_path / "flat", [0.01] * 30))
    assert flat.epoch_time.change.fitted and flat.epoch_time.steady


def one_long_epoch(path, walls, gc2=None):
    """A run of one epoch whose steps take `walls` seconds, back to back, `gc2` of each in full collections."""
    starts = np.concatenate([[0.0], np.cumsum(walls)[:-1]])
    gc2 = np.zeros(len(walls)) if gc2 is None else gc2
    steps = [(0, s, w, 0.0, 0.0, g) for s, w, g in zip(starts, walls, gc2)]
    return write_run(path, [epoch(0, float(np.sum(walls)), steps=len(walls), pause=(0.0, 0.0, float(np.sum(gc2))),
                                  collections=(0, 0, int(np.count_nonzero(gc2))))], steps=steps)


def test_one_long_epoch_tells_its_slowdown_by_its_steps(tmp_path):
    # an LLM's one long epoch (or --epoch-fn train): 63x slower steps read "1 epoch: too few to tell ... Nothing
    # to fix" (a probe)
    rng = np.random.default_rng(0)
    n = 3000
    d = analyze(one_long_epoch(tmp_path / "slower", 0.001 * (1 + 2 * np.arange(n) / n) * rng.lognormal(0, 0.05, n)))
    t = d.epoch_time.step_trend
    assert t.steps == n and t.change.sustained and t.change.relative == pytest.approx(2.0, rel=0.15)
    assert patterns(d) == ["compute-growth"] and d.findings[0].evidence.unit == "step"
    assert "1 epoch: too few to fit an epoch-time trend, but the steps get slower: median step" in text.verdict(d)
    assert "Step time grows" in text.evidence(d.findings[0]) and "mark shorter epochs" in text.remedy(d.findings[0])
    # steps slower by their own GC pauses: GC's, not compute's, and the table says GC explains it
    pauses = 0.002 * np.arange(n) / n
    d = analyze(one_long_epoch(tmp_path / "gc", 0.001 + pauses, gc2=pauses))
    assert d.epoch_time.step_trend.gc_explained > 0.95 and "compute-growth" not in patterns(d)
    assert "explains 100% of the change" in text.diagnosis(d)
    # steps that grow from a few microseconds: the line fitted to them starts below zero
    grows = 1e-6 + 3e-5 * (np.arange(n) / n) ** 1.3
    d = analyze(one_long_epoch(tmp_path / "from-zero", grows))
    assert d.epoch_time.step_trend.change.relative > 10 and patterns(d) == ["compute-growth"]
    # flat noisy steps: no trend, no finding, and the verdict says so
    d = analyze(one_long_epoch(tmp_path / "flat", 0.001 * rng.lognormal(0, 0.2, n)))
    assert not d.epoch_time.step_trend.change.sustained and patterns(d) == []
    assert f"Its {n:,} steps show no sustained trend" in text.verdict(d)
    # its cost is the steps' time above the early mean step, never more than the run: steps that grow from
    # near zero made "331.1% of the run" when a fitted change scaled the early mean (a probe)
    ramp = 1e-5 + 0.003 * np.arange(400) / 400
    d = analyze(one_long_epoch(tmp_path / "ramp", ramp))
    early = ramp[:100].mean()
    assert d.findings[0].time_fraction == pytest.approx((ramp.sum() - 400 * early) / ramp.sum(), rel=0.01)
    # a few steps tell nothing: no step trend at all
    assert analyze(one_long_epoch(tmp_path / "few", np.full(50, 0.001))).epoch_time.step_trend is None



@pytest.mark.parametrize("seed", [8, 17, 18, 26, 27, 37, 77, 93, 101, 102])
def test_one_long_flat_noisy_epoch_gets_no_finding(tmp_path, seed):
    # lognormal step noise and 2% spikes: 37 of 300 such runs (these seeds among them) read a slowdown
    # before the step trend had to clear 15% with an interval that excludes no change; 2 of 300 since
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 5000))
    walls = 0.001 * rng.lognormal(0, 0.6, n)
    walls[rng.random(n) < 0.02] += 0.02
    d = analyze(one_long_epoch(tmp_path / "flat", walls))
    assert "compute-growth" not in patterns(d)


def _loading(tmp_path, name, share, workers=None, calls=32, new=None, spawned=None, batch=None):
    """Ten 100-ms epochs whose training thread waits `share` of each for `calls` DataLoader batches."""
    op = {"name": "DataLoader.__next__", "tags": {}, "calls": calls, "total_s": 0.1 * share, "timed": calls}
    sampled = {"count": workers, "uss_bytes": 0, "pss_bytes": 0, **({"new": new} if new is not None else {}),
               **({"spawned": spawned, "spawned_uss_bytes": 0} if spawned is not None else {}), **(batch or {})}
    records = [dict(epoch(i, 0.1, start_s=0.1 * i, steps=calls), ops={"DataLoader.__next__": op},
                    **({"workers": sampled} if workers is not None else {})) for i in range(10)]
    return analyze(write_run(tmp_path / name, records))


def test_steps_that_wait_for_their_dataloader_are_a_finding(tmp_path):
    d = _loading(tmp_path, "alone", 0.4, workers=0)
    assert patterns(d) == ["input-wait"] and d.primary_cause == "compute"
    f = d.findings[0]
    assert f.time_fraction == pytest.approx(0.4) and f.evidence.batches == 32 * (10 - d.epoch_time.warmup_epochs_skipped)
    assert text.evidence(f).startswith("The steps wait for the DataLoader's next batch 40.0% of the epochs' time")
    assert text.evidence(f).endswith("with no worker process: the training process loads every batch itself")
    assert text.remedy(f).startswith("Load batches in worker processes while the step trains")
    f = _loading(tmp_path, "workers", 0.4, workers=4, new=4).findings[0]
    assert text.evidence(f).endswith("with 4 worker processes loading them")
    assert text.remedy(f).startswith("The workers do not keep up: raise num_workers or prefetch_factor (and "
                                     "persistent_workers=True")
    f = _loading(tmp_path, "persistent", 0.4, workers=4, new=0).findings[0]   # carried over: persistent already
    assert "persistent_workers" not in text.remedy(f)
    # batches gathered in well under a millisecond: a worker would cost as much to hand one over (a probe's 2
    # workers took a TensorDataset's wait from 3.4 to 70 ms an epoch)
    f = _loading(tmp_path, "cheap", 0.3, workers=0, calls=320).findings[0]
    assert text.remedy(f).startswith("Each batch takes 93.8 µs to gather in the training process")
    assert patterns(_loading(tmp_path, "fed", 0.16, workers=4)) == []   # under a fifth: gathering small batches
    # workers started by the spawn method (macOS's and Windows' default) exec a program: they are no forked
    # children, and read "no worker process" with "Load batches in worker processes" (a probe's 2 spawned workers)
    loaded = {"batch_bytes": 1 << 20, "prefetch_factor": None}   # a DataLoader with workers weighed a batch
    f = _loading(tmp_path, "spawned", 0.4, workers=0, new=0, spawned=3, batch=loaded).findings[0]
    assert f.evidence.workers == 3 and f.evidence.spawned == 3
    assert text.evidence(f).endswith("with 3 child processes (3 of them spawned: DataLoader workers started by the "
                                     "spawn method, and multiprocessing's resource tracker beside them)"), text.evidence(f)
    assert text.remedy(f).startswith("The workers do not keep up: raise num_workers or prefetch_factor (and "
                                     "persistent_workers=True unless they are: a spawned worker imports torch anew as "
                                     "it starts)")
    # a spawned child with no DataLoader's workers (multiprocessing's resource tracker, num_workers=0): no worker
    f = _loading(tmp_path, "tracker", 0.4, workers=0, new=0, spawned=1).findings[0]
    assert f.evidence.workers == 0 and text.evidence(f).endswith("with no worker process: the training process loads "
                                                                 "every batch itself")
    f = _loading(tmp_path, "untold", 0.4).findings[0]   # no worker count recorded (integrations.torch.track)
    assert text.remedy(f).startswith("Without DataLoader workers, load batches in worker processes")


def test_a_last_epoch_cut_short_is_left_out_of_the_trend(tmp_path):
    # early stopping: epochs of 48 steps at ~26 ms, then a break after 6 steps of the last (3.8 ms): its
    # time read as "late 14.67 ms (late / early 0.55)", "swings too much to tell a trend" (a probe)
    walls = [0.0255 + 0.003 * ((i * 7) % 5) / 4 for i in range(11)] + [0.0038]
    d = analyze(write_run(tmp_path / "stopped", [epoch(i, w, steps=48 if i < 11 else 6) for i, w in enumerate(walls)]))
    assert d.epoch_time.cut_short == (11, 6, 48.0)
    assert d.epoch_time.steady and not d.epoch_time.swings and d.epoch_time.late_median_s > 0.025
    words = text.verdict(d)
    assert words.startswith("Epoch time holds steady") and ("Note: the last epoch (11) was cut short, 6 steps "
                                                            "against a median of 48 in the others") in words, words
    # at the threshold: 8 analysed epochs of which the last was cut short leave 7 to fit, too few (a review: the
    # headline said "no trend could be fitted", the table "none fitted")
    short = analyze(write_run(tmp_path / "short", [epoch(i, w, steps=48 if i < 8 else 6)
                                                   for i, w in enumerate(walls[:8] + [0.0038])]))
    assert short.epoch_time.cut_short is not None and text.verdict(short).startswith("7 epochs after the warm-up: too "
                                                                                     "few"), text.verdict(short)
    # a last epoch of most of the steps (a smaller last batch of samples is one step anyway) is a full epoch
    full = analyze(write_run(tmp_path / "full", [epoch(i, w, steps=48 if i < 11 else 40)
                                                 for i, w in enumerate(walls[:11] + [0.022])]))
    assert full.epoch_time.cut_short is None and "cut short" not in text.verdict(full)
    # the last of a second fit() of 2 steps an epoch after one of 8: whole epochs of a smaller size (a probe)
    second = analyze(write_run(tmp_path / "second", [epoch(i, 0.008 if i < 6 else 0.002, steps=8 if i < 6 else 2)
                                                     for i in range(9)]))
    assert second.epoch_time.cut_short is None and "cut short" not in text.verdict(second)
    # an epoch of no step between (an --epoch-fn call that ran none) is no epoch of a smaller size (a review)
    gap = analyze(write_run(tmp_path / "gap", [epoch(i, w, steps=48 if i < 11 else 0 if i == 11 else 6)
                                               for i, w in enumerate(walls[:11] + [0.001, 0.0038])]))
    assert gap.epoch_time.cut_short == (12, 6, 48.0), gap.epoch_time.cut_short


def test_epochs_of_other_steps_are_trended_among_those_of_one_size(tmp_path):
    # a fit() of 10 steps an epoch, then a fine-tuning fit() of 20 at the same speed a step: "Epochs get slower
    # ... +120%", compute-growth (a probe); scaled per step, a fixed cost an epoch (its validation) read as
    # "Epochs get faster" (a review): the trend is of the longest run of epochs of one size
    walls = [0.020 + 0.0004 * (i % 3) for i in range(8)] + [0.040 + 0.0008 * (i % 3) for i in range(8)]
    records = [epoch(i, w, steps=10 if i < 8 else 20) for i, w in enumerate(walls)]
    d = analyze(write_run(tmp_path / "two", records))
    assert d.epoch_time.same_steps == (20, 8, 10, 20) and not d.epoch_time.slowdown and not d.epoch_time.faster
    assert "compute-growth" not in patterns(d) and d.epoch_time.late_median_s == pytest.approx(0.0404, abs=5e-4)
    assert ("Note: the epochs hold 10 to 20 steps (fit calls of other batch sizes, data that grew), and an epoch of "
            "more steps is no slower one: the epoch-time trend is of the 8 epochs in a row of about 20 steps.") \
        in text.verdict(d), text.verdict(d)
    fixed = [epoch(i, 0.1 + 0.010 * (10 if i < 8 else 20), steps=10 if i < 8 else 20) for i in range(16)]
    assert analyze(write_run(tmp_path / "fixed", fixed)).epoch_time.steady
    # epochs that do get slower, among those of one size, still are
    slower = [epoch(i, w * (1 + 0.05 * i), steps=10 if i < 8 else 20) for i, w in enumerate(walls)]
    assert analyze(write_run(tmp_path / "slower", slower)).epoch_time.slowdown
    # and the ops that grow are told among the same epochs: an op whose time is its steps' is flat in them (it had
    # led compute-growth's list at +10 ms, fitted over both sizes)
    grows = [epoch(i, w * (1 + 0.05 * i), steps=10 if i < 8 else 20,
                   ops={("forward", ()): w / 2, ("lookup", ()): w * 0.05 * i}) for i, w in enumerate(walls)]
    d = analyze(write_run(tmp_path / "grows", grows))
    growth = next(f for f in d.findings if f.pattern == "compute-growth")
    assert [o.name for o in growth.evidence.ops] == ["lookup"]
    forward = next(o for o in d.ops if o.name == "forward")
    assert abs(forward.growth_s) < 0.001 and forward.early_s == pytest.approx(0.020, abs=5e-4)
    # steps a few percent apart (a last batch of other size, a sampler's rounding) are one size
    same = [epoch(i, w, steps=100 + i % 3) for i, w in enumerate(walls[:8])]
    assert analyze(write_run(tmp_path / "same", same)).epoch_time.same_steps is None
