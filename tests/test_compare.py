"""compare() and scaling() on synthetic runs: the what-if arithmetic, ops one run lacks, op
identity kept structured, labels, and the max_epochs verdicts."""

import json
from html import escape as html_escape

import numpy as np

import pytest

from profiler.analysis import compare, scaling
from profiler.analysis.load import one_size
from profiler.errors import UsageError
from profiler.report import json_out, text

from .fixtures import MIB, epoch, from_walls, write_run

NCHW, NHWC = (("layout", "NCHW"),), (("layout", "NHWC"),)


def run_with_ops(path, ops, wall, meta=None, epochs=8):
    return write_run(path, [epoch(i, wall, ops=ops) for i in range(epochs)], meta=meta)


def test_what_if_arithmetic_and_labels(tmp_path):
    a = run_with_ops(tmp_path / "a", {("conv2d_forward", NCHW): 0.004, ("bias_backward", NCHW): 0.006}, 0.012,
                     meta={"layout": "NCHW"})
    b = run_with_ops(tmp_path / "b", {("conv2d_forward", NHWC): 0.004, ("bias_backward", NHWC): 0.002}, 0.008,
                     meta={"layout": "NHWC"})
    c = compare(a, b)
    assert c.a.label == "NCHW" and c.b.label == "NHWC" and c.ratio == pytest.approx(1.5)
    assert c.a.tags == {"layout": "NCHW"} and c.b.tags == {"layout": "NHWC"}
    top = c.rows[0]
    assert top.op == "bias_backward" and top.tags == {} and top.ratio == pytest.approx(3.0)
    assert top.a_if_b_speed_s == pytest.approx(0.012 - 0.006 + 0.002)
    words = text.comparison_verdict(c)
    assert "If bias_backward in NCHW ran at its NHWC speed" in words and "(-33.3%)" in words


def test_runs_of_different_scenarios_get_no_what_if_and_a_caution(tmp_path):
    ops = {("dense_backward", NHWC): 0.004, ("relu", NHWC): 0.001}
    a = run_with_ops(tmp_path / "a", ops, 0.012, meta={"scenario": "mnist-cnn", "label": "cnn"})
    b = run_with_ops(tmp_path / "b", {("dense_backward", NHWC): 0.001, ("relu", NHWC): 0.001}, 0.006,
                     meta={"scenario": "mlp", "label": "mlp"})
    c = compare(a, b)
    assert (c.a.scenario, c.b.scenario) == ("mnist-cnn", "mlp")
    words = text.comparison_verdict(c)
    assert "If " not in words and "No op that both runs time" not in words
    assert "Caution: cnn ran mnist-cnn and mlp mlp: different scenarios" in words
    # two scripts, as an A/B of one's versions (train_old.py against train_new.py), keep their what-ifs
    same = compare(run_with_ops(tmp_path / "c", ops, 0.012, meta={"script": "train_old.py"}),
                   run_with_ops(tmp_path / "d", {("dense_backward", NHWC): 0.001}, 0.009, meta={"script": "./new.py"}))
    assert "Caution" not in text.comparison_verdict(same) and "If dense_backward" in text.comparison_verdict(same)


def test_an_incomplete_run_and_a_run_against_itself_are_said_to_be(tmp_path):
    a = write_run(tmp_path / "a", [epoch(i, 0.01) for i in range(8)], status="running")
    b = write_run(tmp_path / "b", [epoch(i, 0.01) for i in range(8)])
    c = compare(a, b)
    assert c.a.problems and not c.b.problems
    assert json.loads(json_out.render(c))["a"]["problems"] == c.a.problems
    words = text.comparison_verdict(c)
    assert f"Note: {c.a.label} is incomplete (the run never finished" in words and "same run directory" not in words
    same = compare(b, b)
    assert "Note: A and B are the same run directory." in text.comparison_verdict(same) and not same.what_ifs


def test_a_difference_outside_the_timed_ops_is_said_to_be(tmp_path):
    ops = {("x", ()): 0.002, ("y", ()): 0.001}
    a = run_with_ops(tmp_path / "a", ops, 0.0035, meta={"label": "A"})
    b = run_with_ops(tmp_path / "b", ops, 0.007, meta={"label": "B"})
    c = compare(a, b)
    assert c.a.untimed_s == pytest.approx(0.0005) and c.b.untimed_s == pytest.approx(0.004)
    words = text.comparison_verdict(c)
    assert "3.50 ms of the 3.50 ms difference is outside the timed ops (4.00 ms per epoch in B against 0.50 ms)" in words
    # every op slower in A, yet B slower: no "run-wide" caution about A, whose ops are not where B loses
    slow_ops = run_with_ops(tmp_path / "c", {("x", ()): 0.0026, ("y", ()): 0.0013}, 0.0045, meta={"label": "A"})
    c = compare(slow_ops, b)
    assert c.slower_everywhere == "a" and "run-wide" not in text.comparison_verdict(c)
    # A's ops are slower, so B's untimed time (4.00 - 0.60 ms) exceeds the whole difference (2.50 ms): said
    # so, not "3.40 ms of the 2.50 ms difference" (a probe)
    assert ("More than the whole 2.50 ms difference (3.40 ms) is outside the timed ops (4.00 ms per epoch in B "
            "against 0.60 ms)") in text.comparison_verdict(c), text.comparison_verdict(c)


def test_op_in_one_run_only_gets_no_what_if(tmp_path):
    a = run_with_ops(tmp_path / "a", {("conv", ()): 0.004, ("pad", ()): 0.003}, 0.010)
    b = run_with_ops(tmp_path / "b", {("conv", ()): 0.004}, 0.007)
    c = compare(a, b)
    pad = next(r for r in c.rows if r.op == "pad")
    assert pad.only_in == "a" and pad.b_s is None and pad.ratio is None and pad.a_if_b_speed_s is None
    assert c.rows[-1] is pad
    out = json.loads(json_out.render(c))     # strict: no Infinity, no NaN
    assert out["rows"][-1]["only_in"] == "a" and out["rows"][-1]["a_if_b_speed_s"] is None
    assert "-99" not in text.comparison(c) and "Only a runs pad (no what-if" in text.comparison_verdict(c)
    # 150 ops of its own: the first 8 named, the rest counted (500 made the verdict 8,000 characters)
    many = run_with_ops(tmp_path / "many", {("conv", ()): 0.004, **{(f"op{i:03d}", ()): 1e-6 for i in range(150)}},
                        0.010)
    words = text.comparison_verdict(compare(many, b))
    assert "and 142 more (no what-if" in words and len(words) < 1500, len(words)
    # an op label of 2,000 characters: cut in the table, whose lines stay readable
    long = run_with_ops(tmp_path / "long", {("conv", ()): 0.004, ("x" * 2000, ()): 0.003}, 0.010)
    table = text.comparison(compare(long, b)).splitlines()
    assert max(len(line) for line in table if not line.startswith(" ") and "x" * 77 in line) < 200
    assert any(line.startswith("x" * 77 + "...") for line in table)


def test_the_table_fits_its_longest_op_name(tmp_path):
    """An op label past the first column's 34 characters widens the column for every row, so the
    numbers of each run stay in one column (a long name had pushed its row's numbers right)."""
    long = ("softmax_cross_entropy_backward_with_label_smoothing", (("layout", "NHWC"),))
    ops = {long: 0.004, ("conv", ()): 0.002}
    only_a = {**ops, ("pad", ()): 0.001}
    c = compare(run_with_ops(tmp_path / "a", only_a, 0.010), run_with_ops(tmp_path / "b", ops, 0.009))
    table = text.comparison(c).split("\n\n", 1)[1].splitlines()
    name = "softmax_cross_entropy_backward_with_label_smoothing (layout=NHWC)"
    assert any(line.startswith(name + " ") for line in table)
    # each run's column ends at the same place on every row: the header's run labels, then the numbers
    a_end = table[0].index(c.a.label) + len(c.a.label)
    for line in table[1:]:
        assert line[a_end - 1] != " " and line[a_end] == " ", line


def test_op_identity_stays_structured(tmp_path):
    ops = {("conv[fast]", ()): 0.001, ("conv", (("layout", "fast"),)): 0.002}
    a = run_with_ops(tmp_path / "a", ops, 0.004)
    b = run_with_ops(tmp_path / "b", ops, 0.004)
    rows = {(r.op, tuple(r.tags.items())): r for r in compare(a, b).rows}
    assert set(rows) == {("conv[fast]", ()), ("conv", (("layout", "fast"),))}
    assert rows[("conv", (("layout", "fast"),))].a_s == pytest.approx(0.002)


def test_a_what_if_that_saves_nothing_visible_is_not_said(tmp_path):
    # conv 0.1% faster in B: "113.37 ms instead of 113.37 ms (-0.0%)" said nothing
    a = run_with_ops(tmp_path / "a", {("conv", ()): 0.050, ("pool", ()): 0.010}, 0.11337)
    b = run_with_ops(tmp_path / "b", {("conv", ()): 0.04995, ("pool", ()): 0.010}, 0.11332)
    assert "If conv" not in text.comparison_verdict(compare(a, b))


def test_tag_values_keep_their_types(tmp_path):
    # session.op("forward", layer=1) records the int 1; analysis and JSON give it back as 1, not "1",
    # and ops whose values differ in type still sort into one table
    ops = {("forward", (("layer", 1),)): 0.002, ("forward", (("layer", "x"),)): 0.001, ("step", (("fused", True),)): 0.001}
    a = run_with_ops(tmp_path / "a", ops, 0.005)
    b = run_with_ops(tmp_path / "b", ops, 0.005)
    c = compare(a, b)
    assert {(r.op, tuple(r.tags.items())) for r in c.rows} == {("forward", (("layer", 1),)), ("forward", (("layer", "x"),)),
                                                                ("step", (("fused", True),))}
    assert {"layer": 1} in [r["tags"] for r in json.loads(json_out.render(c))["rows"]]
    from profiler.analysis.ops import OpId
    assert sorted([OpId("f", (("n", 10),)), OpId("f", (("n", "x"),)), OpId("f", (("n", 2),))]) == [
        OpId("f", (("n", 2),)), OpId("f", (("n", 10),)), OpId("f", (("n", "x"),))]   # numbers by value, then text


def test_old_keys_without_identity_are_parsed(tmp_path):
    def old(path, layout, seconds):
        records = [epoch(i, 0.01) for i in range(6)]
        for r in records:
            r["ops"] = {f"conv2d_forward[{layout}]": {"calls": 3, "total_s": seconds}}
        return write_run(path, records)
    c = compare(old(tmp_path / "a", "NCHW", 0.004), old(tmp_path / "b", "NHWC", 0.002))
    assert [(r.op, r.tags, r.ratio) for r in c.rows] == [("conv2d_forward", {}, pytest.approx(2.0))]


def test_same_labels_are_told_apart(tmp_path):
    a = run_with_ops(tmp_path / "x" / "run", {("f", ()): 0.001}, 0.002)
    b = run_with_ops(tmp_path / "y" / "run", {("f", ()): 0.001}, 0.002)
    c = compare(a, b)
    assert c.a.label == "A (run)" and c.b.label == "B (run)"
    # runs of one script or scenario with other settings show the settings that tell them apart (a probe: "A
    # (train.py (gc default))" and "B (train.py (gc default))" for runs with and without --leak)
    script = {"script": "train.py", "label": "train.py (gc default)"}
    leak = compare(run_with_ops(tmp_path / "l1", {("f", ()): 0.001}, 0.002, meta={**script, "args": ["--epochs", "20"]}),
                   run_with_ops(tmp_path / "l2", {("f", ()): 0.001}, 0.002,
                                meta={**script, "args": ["--epochs", "20", "--leak"]}))
    assert (leak.a.label, leak.b.label) == ("train.py (gc default) [--epochs 20]",
                                            "train.py (gc default) [--epochs 20 --leak]")
    scenario = {"scenario": "mlp", "label": "mlp NHWC"}
    history = compare(run_with_ops(tmp_path / "h1", {("f", ()): 0.001}, 0.002, meta={**scenario, "history": "append"}),
                      run_with_ops(tmp_path / "h2", {("f", ()): 0.001}, 0.002,
                                   meta={**scenario, "history": "preallocated"}))
    assert (history.a.label, history.b.label) == ("mlp NHWC [history=append]", "mlp NHWC [history=preallocated]")


def scaled(path, wall, pause, meta=None):
    return write_run(path, [epoch(i, wall, pause=(0.0, 0.0, pause), collections=(0, 0, 1)) for i in range(6)],
                     meta=meta)


def test_scaling_verdicts(tmp_path):
    flat = scaling({100: scaled(tmp_path / "a", 0.010, 0.001), 1000: scaled(tmp_path / "b", 0.010, 0.001)})
    assert not flat.depends and "does not depend" in text.scaling_verdict(flat)
    grows = scaling({100: scaled(tmp_path / "c", 0.010, 0.001), 10**5: scaled(tmp_path / "d", 0.030, 0.021)})
    assert grows.depends and grows.ratio == pytest.approx(3.0) and grows.gc_explained == pytest.approx(1.0)
    assert "depends on max_epochs" in text.scaling_verdict(grows)
    other = scaling({100: scaled(tmp_path / "e", 0.010, 0.001), 10**4: scaled(tmp_path / "f", 0.030, 0.001)})
    assert not other.depends and "explain only 0%" in text.scaling_verdict(other)
    assert json.loads(json_out.render(grows))["verdict"] == text.scaling_verdict(grows)


def test_scaling_is_labelled_from_the_runs_meta(tmp_path):
    meta = {"scenario": "mlp", "history": "preallocated", "gc_collect": "epoch"}
    s = scaling({n: scaled(tmp_path / str(n), 0.01, 0.001, meta) for n in (10, 100)})
    assert s.label == "scenario=mlp history=preallocated gc_collect=epoch"


@pytest.mark.parametrize("runs", [{}, {100: "x"}], ids=["none", "one"])
def test_scaling_needs_two_runs(runs):
    with pytest.raises(UsageError, match="at least two"):
        scaling(runs)


def test_meta_meta_that_is_not_an_object_labels_by_directory(tmp_path):
    a = run_with_ops(tmp_path / "first", {("f", ()): 0.001}, 0.002)
    b = run_with_ops(tmp_path / "second", {("f", ()): 0.001}, 0.002)
    meta = json.loads((a / "meta.json").read_text())
    meta["meta"] = "not an object"
    (a / "meta.json").write_text(json.dumps(meta))
    c = compare(a, b)
    assert (c.a.label, c.b.label) == ("first", "second")


def test_runs_without_ops_say_none_were_recorded(tmp_path):
    a = write_run(tmp_path / "a", [epoch(i, 0.02) for i in range(8)])
    b = write_run(tmp_path / "b", [epoch(i, 0.01) for i in range(8)])
    words = text.comparison_verdict(compare(a, b))
    assert "Neither run recorded op timers" in words and "No op that both runs time" not in words
    assert "warm-up" not in words


def test_a_run_whose_only_epoch_is_its_warm_up_says_so(tmp_path):
    a = write_run(tmp_path / "a", [epoch(0, 0.36)])
    b = write_run(tmp_path / "b", [epoch(i, 0.01) for i in range(8)])
    c = compare(a, b)
    assert c.a.epochs == 1 and c.a.warmup_included and not c.b.warmup_included and c.ratio == pytest.approx(36)
    words = text.comparison_verdict(c)
    assert "Note: a has only one epoch to compare (its warm-up): too few to leave the warm-up out" in words
    assert "so the epoch time includes it; compare runs of 4 or more epochs" in words
    # 6 epochs, the first 3 set-up without steps: 3 to compare (it said "has 3 epochs", a probe)
    stepped = write_run(tmp_path / "stepped", [epoch(i, 0.01, steps=int(i >= 3)) for i in range(6)])
    assert "Note: stepped has 3 epochs to compare: too few" in text.comparison_verdict(compare(stepped, b))



def _gc_run(path, pause, policy):
    records = [epoch(i, 0.020 + pause, pause=(0.0, 0.0, pause), collections=(5, 1, 1)) for i in range(8)]
    path = write_run(path, records, meta={"label": f"gc {policy}"})
    meta = json.loads((path / "meta.json").read_text())
    meta["options"] = {"gc_policy": policy}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def test_gc_per_epoch_and_the_policy_are_compared(tmp_path):
    c = compare(_gc_run(tmp_path / "a", 0.070, "default"), _gc_run(tmp_path / "b", 0.005, "freeze"))
    assert c.a.gc.pause_s == pytest.approx(0.070) and c.b.gc.pause_s == pytest.approx(0.005)
    assert c.a.gc.epoch_s == pytest.approx(0.090) and c.b.gc.epoch_s == pytest.approx(0.025)
    assert c.a.gc.share_total == pytest.approx(0.070 / 0.090) and c.a.gc.full_collections == 1.0
    assert (c.a.gc.policy, c.b.gc.policy) == ("default", "freeze")
    verdict = text.comparison_verdict(c)
    assert "the collector accounts for 100.0% of the difference" in verdict, verdict
    table = text.comparison(c).splitlines()
    assert any(line.startswith("mean GC per epoch (ms)") and "70.00" in line and "5.00" in line for line in table)
    assert any(line.startswith("--gc-policy") and "default" in line and "freeze" in line for line in table)


def test_the_programs_own_gc_collect_calls_are_compared(tmp_path):
    # A calls gc.collect() every step (36 an epoch), B does not; a run recorded before they were told apart shows "-"
    def run(name, forced):
        return write_run(tmp_path / name, [epoch(i, 0.060, pause=(0.0, 0.0, 0.040), collections=(5, 0, 36), **forced)
                                           for i in range(8)], meta={"label": name})
    c = compare(run("asked", {"forced": (0, 0, 36), "forced_pause": (0.0, 0.0, 0.039)}),
                run("automatic", {"forced": (0, 0, 0), "forced_pause": (0.0, 0.0, 0.0)}))
    assert (c.a.gc.forced.collections_per_epoch, c.b.gc.forced.collections_per_epoch) == ([0, 0, 36], [0, 0, 0])
    row = next(line for line in text.comparison(c).splitlines() if line.startswith("mean gc.collect() calls per epoch"))
    assert row.split()[-2:] == ["36.0", "0.0"]
    # the verdict says whose collections make the difference: asked's own calls, not automatic's
    verdict = text.comparison_verdict(c)
    assert "97.5% of the GC in asked is the program's own gc.collect() calls (36 calls per epoch" in verdict, verdict
    assert "of the GC in automatic" not in verdict, verdict
    c = compare(run("asked2", {"forced": (0, 0, 36), "forced_pause": (0.0, 0.0, 0.039)}), run("older", {}))
    assert c.b.gc.forced is None
    row = next(line for line in text.comparison(c).splitlines() if line.startswith("mean gc.collect() calls per epoch"))
    assert row.split()[-2:] == ["36.0", "-"]
    # no calls on either side: no row
    c = compare(run("none1", {"forced": (0, 0, 0), "forced_pause": (0.0, 0.0, 0.0)}), run("none2", {}))
    assert not any(line.startswith("mean gc.collect()") for line in text.comparison(c).splitlines())


def test_runs_where_gc_costs_nothing_say_nothing_of_it(tmp_path):
    c = compare(write_run(tmp_path / "a", [epoch(i, 0.02) for i in range(8)]),
                write_run(tmp_path / "b", [epoch(i, 0.01) for i in range(8)]))
    assert c.a.gc.pause_s == 0.0 and "GC takes" not in text.comparison_verdict(c)
    table = text.comparison(c).splitlines()
    assert not any(line.startswith(("--gc-policy", "mean GC per epoch")) for line in table)


def test_gc_between_the_epochs_is_compared_though_no_epoch_holds_it(tmp_path):
    # a script's gc.collect() after each epoch, then the same script with gc.freeze() after set-up:
    # the epochs are alike, and the comparison said nothing of the 30 ms a gap it saved
    def run(path, pause):
        before = {"pause_s": [0.0, 0.0, pause], "collections": [0, 0, 1], "forced": [0, 0, 1], "forced_pause_s": [0.0, 0.0, pause]}
        return write_run(path, [dict(epoch(i, 0.010, start_s=0.1 * i), gap_s=0.09, gc_before=before) for i in range(8)])
    c = compare(run(tmp_path / "a", 0.030), run(tmp_path / "b", 0.001))
    assert c.a.gc.between_s == pytest.approx(0.030) and c.b.gc.between_s == pytest.approx(0.001)
    assert ("Between two epochs, outside their time, GC paused 30.00 ms in a and 1.00 ms in b."
            in text.comparison_verdict(c))
    assert ("mean GC between two epochs (ms)", "30.00", "1.00", "") in text.run_rows(c)
    # runs written before it was recorded: neither a sentence nor a row
    old = compare(write_run(tmp_path / "c", [epoch(i, 0.01, start_s=0.1 * i) for i in range(8)]), tmp_path / "a")
    assert old.a.gc.between_s is None and "Between two epochs" not in text.comparison_verdict(old)
    assert ("mean GC between two epochs (ms)", "-", "30.00", "") in text.run_rows(old)


def test_gc_spikes_that_medians_hide_are_compared_by_their_means(tmp_path):
    """One epoch in four holds a 200 ms full collection: the median epoch is the same in both runs,
    the mean is not, and the collector accounts for all of the difference."""
    spiky = [epoch(i, 0.220 if i % 4 == 3 else 0.020, pause=(0.0, 0.0, 0.200 if i % 4 == 3 else 0.0))
             for i in range(12)]
    c = compare(write_run(tmp_path / "a", spiky), write_run(tmp_path / "b", [epoch(i, 0.020) for i in range(12)]))
    assert c.a.epoch_s == c.b.epoch_s == pytest.approx(0.020)
    assert c.a.gc.epoch_s > 2 * c.b.gc.epoch_s
    assert "the collector accounts for 100.0% of the difference" in text.comparison_verdict(c)


def test_runs_whose_epochs_are_time_windows_are_said_to_be(tmp_path):
    for name in ("a", "b"):
        write_run(tmp_path / name, [epoch(i, 1.0) for i in range(10)], meta={"label": name, "epochs_from": "windows"})
    write_run(tmp_path / "c", [epoch(i, 1.2) for i in range(10)], meta={"label": "c"})
    c = compare(tmp_path / "a", tmp_path / "b")
    assert c.a.windows and c.b.windows
    assert "Note: the epochs of a and b are fixed time windows, so epoch time cannot differ" in text.comparison_verdict(c)
    assert "fixed time windows" not in text.comparison_verdict(compare(tmp_path / "c", tmp_path / "c"))


LAYOUT_OPS = {"conv2d_forward": 0.004, "dense_forward": 0.002, "relu_forward": 0.001}


def _layout_runs(tmp_path, slow_a, slow_b, tiny=None):
    """An NCHW run A and an NHWC run B of the same ops, each op's time in A times slow_a[op]."""
    def side(name, tags, slow):
        ops = {(op, tags): s * slow.get(op, 1.0) for op, s in {**LAYOUT_OPS, **(tiny or {})}.items()}
        return run_with_ops(tmp_path / name, ops, sum(ops.values()) + 0.001, meta={"layout": tags[0][1]})
    return compare(side("a", NCHW, slow_a), side("b", NHWC, slow_b))


def test_every_op_slower_in_one_run_is_called_run_wide(tmp_path):
    """The demo's compare once said 1.35x with dense and relu (no layout in them) as slow as conv:
    a slow phase of the VM during one run. Every sizeable op 1.2x or more slower in one run is
    said to be run-wide, in either direction."""
    c = _layout_runs(tmp_path, {"conv2d_forward": 1.6, "dense_forward": 1.25, "relu_forward": 1.2}, {})
    assert c.slower_everywhere == "a" and c.least_ratio == pytest.approx(1.2)
    words = text.comparison_verdict(c)
    assert "Caution: every op both runs time is at least 1.20x slower in NCHW" in words and "run-wide" in words
    assert json.loads(json_out.render(c))["slower_everywhere"] == "a"
    c = _layout_runs(tmp_path / "2", {}, {"conv2d_forward": 1.3, "dense_forward": 1.3, "relu_forward": 1.3})
    assert c.slower_everywhere == "b" and c.least_ratio == pytest.approx(1.3)


def test_a_layout_difference_with_unchanged_ops_is_not_run_wide(tmp_path):
    """conv 1.6x slower in NCHW, dense 1.1x (under RUN_WIDE) and relu as fast: one op's difference,
    no caution; nor when only one sizeable op is shared."""
    c = _layout_runs(tmp_path, {"conv2d_forward": 1.6, "dense_forward": 1.1, "relu_forward": 1.2}, {})
    assert c.slower_everywhere is None and c.least_ratio is None
    assert "Caution" not in text.comparison_verdict(c)
    a = run_with_ops(tmp_path / "a1", {("conv", ()): 0.008}, 0.010)
    b = run_with_ops(tmp_path / "b1", {("conv", ()): 0.004}, 0.005)
    assert compare(a, b).slower_everywhere is None


def test_ops_too_small_to_measure_do_not_decide_run_wide(tmp_path):
    """An op under 2% of its epoch (a 5-us op's noise) neither makes nor breaks the test: here one
    as fast in both runs leaves the caution in place."""
    c = _layout_runs(tmp_path, {"conv2d_forward": 1.5, "dense_forward": 1.4, "relu_forward": 1.3}, {},
                     tiny={"flatten_forward": 0.00005})
    assert c.slower_everywhere == "a" and c.least_ratio == pytest.approx(1.3)


def test_a_run_wide_difference_with_more_gc_names_the_pauses(tmp_path):
    """A default-policy run against a frozen one: pauses inside every op slow them all alike, so
    the caution names the GC pauses before the machine."""
    ops = {("conv", ()): 0.004, ("dense", ()): 0.002}
    slow = {k: 1.3 * v for k, v in ops.items()}
    a = write_run(tmp_path / "a", [epoch(i, 0.010, ops=slow, pause=(0.0, 0.0, 0.002)) for i in range(8)])
    b = write_run(tmp_path / "b", [epoch(i, 0.007, ops=ops) for i in range(8)])
    words = text.comparison_verdict(compare(a, b))
    assert "run-wide (its GC pauses, which land inside the ops, or the thread count" in words, words
    c = _layout_runs(tmp_path / "nogc", {"conv2d_forward": 1.3, "dense_forward": 1.3, "relu_forward": 1.3}, {})
    assert "run-wide (the thread count, the machine or its load" in text.comparison_verdict(c)


def test_scaling_into_a_directory_that_holds_its_runs_already_stops_before_any_run(tmp_path, capsys, monkeypatch):
    # the first child to find its run directory taken failed, nested in a WorkloadError (exit 1)
    from profiler import cli
    from profiler.workloads import processes
    monkeypatch.setattr(processes, "run_many", lambda *a: pytest.fail("a run started"))
    run_with_ops(tmp_path / "out" / "max-8", {("f", ()): 0.001}, 0.002)
    assert cli.main(["scaling", "mlp", "--max-epochs", "4,8", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"profiler: error: --out {tmp_path / 'out'}: {tmp_path / 'out' / 'max-8'} already holds a run (epochs.jsonl "
        f"exists); choose a new directory"]
    html = tmp_path / "new" / "max-8" / "meta.json"   # the page would replace a run scaling reads at its end
    assert cli.main(["scaling", "mlp", "--max-epochs", "4,8", "--out", str(tmp_path / "new"), "--html", str(html)]) == 2
    assert "is a record of the run" in capsys.readouterr().err


def test_collections_a_run_did_not_time_are_noted_without_calling_it_incomplete(tmp_path):
    ops = {("conv2d_forward", NHWC): 0.004}
    records = [epoch(i, 0.010, ops=ops, collections=(3, 0, 1)) for i in range(8)]
    records[5]["gc"]["missed"] = [0, 0, 2]   # the program took the callback out for a while
    a = write_run(tmp_path / "a", records, meta={"label": "hidden"})
    b = run_with_ops(tmp_path / "b", ops, 0.010, meta={"label": "plain"})
    c = compare(a, b)
    assert c.a.problems == [] and c.a.cautions and c.b.cautions == []
    words = text.comparison_verdict(c)
    assert "incomplete" not in words and "Note: in hidden, 2 collections in epoch 5 were not timed" in words
    assert json_out.to_plain(c)["a"]["cautions"] == c.a.cautions


def test_only_the_ops_with_the_most_time_are_followed(tmp_path):
    # a tag with a value per call (seqlen=...) makes an op per value: analysis follows the costliest 200
    from profiler.analysis import analyze
    from profiler.analysis.ops import MAX_OPS
    ops = {("attn", (("seqlen", n),)): 1e-6 * (n + 1) for n in range(MAX_OPS + 50)}
    a = run_with_ops(tmp_path / "a", ops, 0.5)
    c = compare(a, a)
    kept = {r.tags["seqlen"] for r in c.rows}
    assert kept == set(range(50, MAX_OPS + 50))
    assert {o.tags["seqlen"] for o in analyze(a).ops} == kept


def test_ops_that_both_runs_ran_are_matched_before_the_most_costly_are_chosen(tmp_path):
    # 300 ops in both runs, ranked in opposite orders: each run's own top 200 made 100 "only in a", 100 "only in b"
    from profiler.analysis.ops import MAX_OPS
    n = MAX_OPS + 100
    a = run_with_ops(tmp_path / "a", {("attn", (("seqlen", k),)): 1e-6 * (k + 1) for k in range(n)}, 0.5)
    b = run_with_ops(tmp_path / "b", {("attn", (("seqlen", k),)): 1e-6 * (n - k) for k in range(n)}, 0.5)
    c = compare(a, b)
    assert len(c.rows) == MAX_OPS and all(r.only_in is None for r in c.rows)
    assert "Only" not in text.comparison_verdict(c)


# -- noise, different work, memory: what makes a difference in epoch time no op's ---------------

def _jittered(path, median, spread, n=20, seed=0, ops=None, meta=None, **kwargs):
    """A run of n epochs whose times scatter uniformly over median -+ spread/2 (op x at a third)."""
    walls = median + spread * (np.random.default_rng(seed).random(n) - 0.5)
    return write_run(path, [epoch(i, float(w), ops={("x", ()): float(w) / 3, **(ops or {})}, **kwargs)
                            for i, w in enumerate(walls)], meta=meta)


def test_a_difference_within_the_runs_spread_is_called_noise(tmp_path):
    # two runs of one workload, epochs scattered over 8-12 ms: medians apart by chance, not by code
    a = _jittered(tmp_path / "a", 0.010, 0.004, seed=1, meta={"label": "A"})
    b = _jittered(tmp_path / "b", 0.0104, 0.004, seed=2, meta={"label": "B"})
    c = compare(a, b)
    assert c.noise == "overlap" and c.a.epoch_interval_s[0] < c.a.epoch_s < c.a.epoch_interval_s[1]
    words = text.comparison_verdict(c)
    assert "within the runs' own spread: the median epoch's 95% interval is" in words and "If " not in words, words
    assert json.loads(json_out.render(c))["noise"] == "overlap"
    # the same scatter around medians 1.5x apart is a difference, with its what-if
    far = compare(a, _jittered(tmp_path / "c", 0.015, 0.004, seed=2, meta={"label": "C"}))
    assert far.noise is None and "If x in C ran at its A speed" in text.comparison_verdict(far)


def test_a_run_whose_fastest_epochs_match_the_other_is_slowed_by_its_slow_epochs(tmp_path):
    # B ran 3 of its epochs at A's 5 ms, a loaded machine slowing the others to 9 ms
    a = from_walls(tmp_path / "a", [0.005 + 1e-5 * (i % 3) for i in range(20)], meta={"label": "A"})
    b = from_walls(tmp_path / "b", [0.005 if i in (6, 11, 15) else 0.009 + 1e-5 * (i % 3) for i in range(20)],
                   meta={"label": "B"})
    c = compare(a, b)
    assert c.noise == "slow epochs" and c.b.fastest_s == pytest.approx(0.005)
    assert ("But the fastest tenth of B's epochs take up to 5.00 ms, as A's typical epochs do (up to 5.02 ms for three "
            "in four)") in text.comparison_verdict(c), text.comparison_verdict(c)
    # slowed in every epoch: a difference of the code's (or of the whole run's machine), no noise
    steady = compare(a, from_walls(tmp_path / "c", [0.009] * 20, meta={"label": "C"}))
    assert steady.noise is None
    # 3% slower in every epoch, each run's epochs within 1.5%: a small difference, measured, not "a loaded
    # machine's slower epochs" (a probe: the old 5% tolerance called it so in 3 of 3 repeats)
    jitter = lambda seed: 0.006 * (np.random.default_rng(seed).random(20) - 0.5)  # noqa: E731
    base = from_walls(tmp_path / "base", 0.02667 * (1 + jitter(1)), meta={"label": "base"})
    small = from_walls(tmp_path / "small", 0.02753 * (1 + jitter(2)), meta={"label": "small"})
    assert compare(base, small).noise is None


def test_gc_that_slows_some_epochs_is_no_noise(tmp_path):
    # a full collection of 40 ms in every third epoch: the others run at A's speed, the collector is the difference
    a = write_run(tmp_path / "a", [epoch(i, 0.010) for i in range(21)], meta={"label": "A"})
    b = write_run(tmp_path / "b", [epoch(i, 0.050 if i % 3 == 0 else 0.010, pause=(0, 0, 0.040 if i % 3 == 0 else 0),
                                         collections=(0, 0, int(i % 3 == 0))) for i in range(21)], meta={"label": "B"})
    c = compare(a, b)
    assert c.noise is None and "the collector accounts for 100.0% of the difference" in text.comparison_verdict(c)


def test_epochs_of_different_steps_hold_different_work(tmp_path):
    ops = {("dense", NHWC): 0.004, ("relu", NHWC): 0.002}
    a = write_run(tmp_path / "a", [epoch(i, 0.008, ops=ops, steps=16) for i in range(8)],
                  meta={"script": "train.py", "label": "small"})
    b = write_run(tmp_path / "b", [epoch(i, 0.032, ops={k: 4 * v for k, v in ops.items()}, steps=64) for i in range(8)],
                  meta={"script": "train.py", "label": "large"})
    c = compare(a, b)
    assert c.different_work == "steps" and c.slower_everywhere is None and (c.a.steps_per_epoch, c.b.steps_per_epoch) == (16, 64)
    words = text.comparison_verdict(c)
    assert ("Caution: the epochs hold different work (small 16 and large 64 steps an epoch), so no op's what-if is "
            "given; a step takes 0.50 ms in small and 0.50 ms in large (1.00x).") in words
    assert "run-wide" not in words and "If " not in words
    # a scenario's samples an epoch tell its work: 4,000 against 16,000 is other work; the same samples in
    # batches of another size (steps 64 against 32) is the same work (a review)
    scenario = lambda path, samples, steps, wall, dense=0.004: write_run(  # noqa: E731
        tmp_path / path, [epoch(i, wall, ops={**ops, ("dense", NHWC): dense}, steps=steps) for i in range(8)],
        meta={"scenario": "mlp", "samples": samples, "batch_size": samples // steps, "label": path})
    c = compare(scenario("s4k", 4000, 16, 0.008), scenario("s16k", 16000, 64, 0.032))
    assert c.different_work == "samples" and ("Caution: the epochs hold different work (s4k 4,000 and s16k 16,000 "
                                              "samples an epoch)") in text.comparison_verdict(c)
    same = compare(scenario("b64", 4096, 64, 0.010), scenario("b128", 4096, 32, 0.008, dense=0.002))
    assert same.different_work is None and "If " in text.comparison_verdict(same)


def test_compare_and_the_trend_draw_one_line_between_one_work_and_another(tmp_path):
    # 1,052 steps against 1,000 are two sizes for a run's trend (load.one_size), and so other work for compare
    run = lambda path, steps: write_run(tmp_path / path, [epoch(i, 0.010, steps=steps) for i in range(8)],  # noqa: E731
                                        meta={"script": "train.py", "label": path})
    assert compare(run("a", 1000), run("b", 1050)).different_work is None
    assert compare(run("c", 1000), run("d", 1052)).different_work == "steps"
    records = [{"epoch": i, "steps": 1000 if i < 4 else 1052} for i in range(8)]
    assert one_size(records)[1] == (1052, 4, 1000, 1052)
    assert one_size([dict(r, steps=min(r["steps"], 1050)) for r in records])[1] is None


def test_a_scenario_and_a_program_of_its_own_hold_different_work(tmp_path):
    ops = {("dense", NHWC): 0.004}
    a = run_with_ops(tmp_path / "a", ops, 0.010, meta={"scenario": "mlp", "label": "mlp"})
    b = run_with_ops(tmp_path / "b", ops, 0.020, meta={"script": "train.py", "label": "train.py"})
    c = compare(a, b)
    assert c.different_work == "kinds"
    assert ("Caution: mlp ran the built-in scenario mlp and train.py a program of its own: different work, so no op's "
            "what-if is given.") in text.comparison_verdict(c)


def test_the_collectors_pauses_are_not_called_code_outside_the_ops(tmp_path):
    # B's epoch is 20 ms longer for one gc.collect() outside its ops: the collector's, not unknown code's
    ops = {("x", ()): 0.004, ("y", ()): 0.003}
    a = write_run(tmp_path / "a", [epoch(i, 0.008, ops=ops) for i in range(8)], meta={"label": "A"})
    b = write_run(tmp_path / "b", [epoch(i, 0.028, ops=ops, pause=(0, 0, 0.020), collections=(0, 0, 1))
                                   for i in range(8)], meta={"label": "B"})
    words = text.comparison_verdict(compare(a, b))
    assert "the collector accounts for 100.0% of the difference" in words and "outside the timed ops" not in words
    # 20 ms more of code no op covers, beside the collector's 20: said, with the collector's part
    c = write_run(tmp_path / "c", [epoch(i, 0.048, ops=ops, pause=(0, 0, 0.020), collections=(0, 0, 1))
                                   for i in range(8)], meta={"label": "C"})
    assert ("40.00 ms of the 40.00 ms difference is outside the timed ops (41.00 ms per epoch in C against 1.00 ms), "
            "20.00 ms of it the collector's added pauses; the rest is code no session.op() covers") in \
        text.comparison_verdict(compare(a, c))


def test_two_runs_of_one_command_are_said_to_be(tmp_path):
    meta = {"script": "train.py", "args": ["--epochs", "8"], "label": "train.py"}
    a = run_with_ops(tmp_path / "a", {("x", ()): 0.004}, 0.010, meta=meta)
    b = run_with_ops(tmp_path / "b", {("x", ()): 0.006}, 0.012, meta=meta)
    c = compare(a, b)
    assert c.same_command and "Both runs ran the same command, options included" in text.comparison_verdict(c)
    other = run_with_ops(tmp_path / "c", {("x", ()): 0.006}, 0.012, meta={**meta, "args": ["--epochs", "9"]})
    assert not compare(a, other).same_command
    # where its epochs came from is what a run found, not what ran: a run killed before its end (meta.json as
    # written at the start) had read "[epochs_from=None]" against "[epochs_from=epoch-fn]" (a probe)
    killed = run_with_ops(tmp_path / "k", {("x", ()): 0.006}, 0.012, meta={**meta, "epochs_from": None})
    c = compare(run_with_ops(tmp_path / "e", {("x", ()): 0.004}, 0.010, meta={**meta, "epochs_from": "epoch-fn"}), killed)
    assert c.same_command and "epochs_from" not in c.a.label + c.b.label, (c.a.label, c.b.label)
    # one scenario, one command: the same code, so the difference is the machine's, with no what-if (a probe: "the
    # difference is the machine's. If dense_forward in B ran at its A speed ...")
    scenario = {"scenario": "mlp", "samples": 9000, "label": "mlp"}
    c = compare(run_with_ops(tmp_path / "s1", {("x", ()): 0.004}, 0.010, meta=scenario),
                run_with_ops(tmp_path / "s2", {("x", ()): 0.006}, 0.012, meta=scenario))
    assert c.same_command and not c.what_ifs
    assert "Both runs ran the same scenario with the same settings and options, the same code" in text.comparison_verdict(c)
    assert "If " not in text.comparison_verdict(c)


def test_two_runs_of_one_command_are_told_by_their_source(tmp_path):
    meta = {"script": "train.py", "args": [], "label": "train.py"}

    def run(name, source, x_s):
        return run_with_ops(tmp_path / name, {("x", ()): x_s}, x_s + 0.006, meta={**meta, "source_sha256": source})
    # the same source: the difference is the machine's, so no what-if (it had read "If x in B ran at its A speed")
    same = compare(run("a", "1" * 64, 0.004), run("b", "1" * 64, 0.006))
    words = text.comparison_verdict(same)
    assert same.same_command and same.same_code and not same.what_ifs
    assert "and the same source: unless the data it reads or the code it imports changed" in words and "If " not in words
    assert (same.a.label, same.b.label) == ("A (train.py)", "B (train.py)")
    # the source changed: told apart in the labels, the change named, the what-ifs given
    edited = compare(run("c", "1" * 64, 0.004), run("d", "2" * 64, 0.006))
    words = text.comparison_verdict(edited)
    assert edited.same_command and edited.same_code is False and edited.what_ifs
    assert (edited.a.label, edited.b.label) == ("train.py [source 11111111]", "train.py [source 22222222]")
    assert "but its source changed between them" in words and "If x in train.py [source 22222222]" in words
    # a hash as sha256sum writes it in either case is one; anything else (a hand-edited meta.json) is none
    upper = compare(run("u1", "ab" * 32, 0.004), run("u2", "AB" * 32, 0.006))
    assert upper.same_code and not upper.what_ifs
    for bad in ("", "1" * 63, 12345, None, ["a"], "x\n" * 40):
        odd = compare(run(f"odd{len(str(bad))}", bad, 0.004), run(f"ok{len(str(bad))}", "1" * 64, 0.006))
        assert odd.same_code is None and odd.what_ifs, bad
        assert (odd.a.label, odd.b.label) == ("train.py [source unrecorded]", "train.py [source 11111111]"), bad
    # ./train.py is train.py
    dotted = compare(run("w1", "1" * 64, 0.004),
                     run_with_ops(tmp_path / "w2", {("x", ()): 0.006}, 0.012,
                                  meta={**meta, "script": "./train.py", "source_sha256": "1" * 64}))
    assert dotted.same_command and dotted.same_code
    # other arguments and another source: both in the label, apart
    both = compare(run("v1", "1" * 64, 0.004),
                   run_with_ops(tmp_path / "v2", {("x", ()): 0.006}, 0.012,
                                meta={**meta, "args": ["--fast"], "source_sha256": "2" * 64}))
    assert (both.a.label, both.b.label) == ("train.py [(no arguments); source 11111111]",
                                            "train.py [--fast; source 22222222]")
    # runs that recorded no source (before it was recorded): as before
    old = compare(run_with_ops(tmp_path / "e", {("x", ()): 0.004}, 0.010, meta=meta), run("f", "1" * 64, 0.006))
    assert old.same_command and old.same_code is None and old.what_ifs
    assert (old.a.label, old.b.label) == ("train.py [source unrecorded]", "train.py [source 11111111]")
    assert "unless its code or data changed between them" in text.comparison_verdict(old)


def test_memory_that_grows_in_one_run_is_compared(tmp_path):
    # B keeps 32 MiB an epoch (a loss kept with its graph), A holds its level
    ops = {("x", ()): 0.004}
    a = write_run(tmp_path / "a", [epoch(i, 0.010, ops=ops, rss=200 * MIB) for i in range(12)], meta={"label": "A"})
    b = write_run(tmp_path / "b", [epoch(i, 0.010, ops=ops, rss=(200 + 32 * i) * MIB) for i in range(12)],
                  meta={"label": "B"})
    c = compare(a, b)
    assert c.a.memory_growth is None and c.b.memory_growth.pattern == "allocation-growth"
    assert c.b.memory_growth.evidence.growth_bytes_per_epoch == pytest.approx(32 * MIB)
    words = text.comparison_verdict(c)
    assert "Memory: in A, memory is flat (RSS +0 B per epoch); in B, RSS memory grows 32.0 MiB per epoch" in words, words
    row = next(r for r in text.run_rows(c) if r[0] == "RSS, first -> last epoch (MiB)")
    assert row[1:] == ("200 -> 200", f"{200 + 32} -> {200 + 32 * 11}", "memory grows in B")
    plain = json.loads(json_out.render(c))
    assert plain["b"]["memory_growth"]["evidence"]["measure"] == "rss" and plain["a"]["memory_growth"] is None
    # neither grows: no memory sentence
    assert "Memory:" not in text.comparison_verdict(compare(a, a))


def test_the_tables_give_no_what_if_where_the_verdict_gives_none(tmp_path):
    # the verdict said "no op's what-if is given" above a table that gave one (a probe)
    from profiler.report import html
    ops = {("dense", NHWC): 0.004}
    a = run_with_ops(tmp_path / "a", ops, 0.010, meta={"scenario": "mlp", "label": "mlp"})
    b = run_with_ops(tmp_path / "b", {("dense", NHWC): 0.002}, 0.020, meta={"script": "train.py", "label": "mine"})
    c = compare(a, b)
    assert c.different_work == "kinds" and not c.what_ifs
    row = next(line for line in text.comparison(c).splitlines() if line.startswith("dense"))
    assert row.rstrip().endswith("-") and " ms (" not in row, row
    assert "<td>-</td></tr>" in html.comparison_section(c) and "(+" not in html.comparison_section(c)
    same = compare(a, run_with_ops(tmp_path / "c", {("dense", NHWC): 0.002}, 0.008,
                                   meta={"scenario": "mlp", "history": "preallocated"}))
    assert same.what_ifs and " ms (" in text.comparison(same)
    # the page gives the what-if as the text does, to 0.01 ms (to 0.1 ms, 0.45 read "0.5 (+5.9%)": a probe)
    r = same.rows[0]
    told = f"{r.a_if_b_speed_s * 1e3:.2f} ({text.relative(r.a_if_b_speed_s, same.a.epoch_s)})"
    assert f"<td>{html_escape(told)}</td></tr>" in html.comparison_section(same) and f"{told[:-1]}" in \
        text.comparison(same).replace(" ms (", " (")


def test_noise_is_judged_on_the_epochs_the_report_weighs(tmp_path):
    # a steady 1.3x regression (a review): a last epoch cut short, deep capture's traced epoch, or one odd epoch
    # among 7 made the intervals (then the whole range) overlap, and the difference read as noise
    a = write_run(tmp_path / "a", [epoch(i, 1.0, steps=100) for i in range(10)], meta={"label": "A"})
    cut = write_run(tmp_path / "cut", [epoch(i, 1.3, steps=100) for i in range(9)] + [epoch(9, 0.3, steps=20)],
                    meta={"label": "cut"})
    assert compare(a, cut).noise is None
    heap = {"traced_bytes": 1, "peak_bytes": 1, "top_growth": []}
    traced = write_run(tmp_path / "traced", [epoch(i, 3.0 if i == 5 else 1.0, heap=heap if i == 5 else None)
                                             for i in range(10)], meta={"label": "traced"})
    assert compare(traced, write_run(tmp_path / "b", [epoch(i, 1.3) for i in range(10)], meta={"label": "B"})).noise \
        is None
    odd = write_run(tmp_path / "odd", [epoch(i, 1.5 if i == 4 else 1.0) for i in range(8)], meta={"label": "odd"})
    assert compare(odd, write_run(tmp_path / "c", [epoch(i, 1.3) for i in range(8)], meta={"label": "C"})).noise is None
    # epochs of another size first (a short fit() before the main one): the report trends the 12 of one size, which
    # hold steady; over all 16, the step up read as B slowing as it went on, and its short epochs as its fast ones
    jitter = [0.0004 * (i % 3) for i in range(16)]
    b = write_run(tmp_path / "sizes", [epoch(i, (0.020 if i < 4 else 0.040) + jitter[i], steps=10 if i < 4 else 20)
                                       for i in range(16)], meta={"label": "B"})
    a = write_run(tmp_path / "one", [epoch(i, 0.038 + jitter[i], steps=20) for i in range(16)], meta={"label": "A"})
    c = compare(a, b)
    assert not c.b.slows and c.noise is None and c.what_ifs and c.b.fastest_s > 0.039
    # and its epoch time and steps are of those epochs too: it had read "different work (15 and 20 steps an epoch)"
    # and 1.27x from the median over both sizes (a probe)
    assert c.b.same_steps == (20, 12, 10, 20) and c.a.same_steps is None and not c.different_work
    assert c.b.epoch_s == pytest.approx(0.0404, abs=5e-4) and c.b.steps_per_epoch == 20 and c.b.epochs == 12
    assert ("Note: B's epochs hold 10 to 20 steps (fit calls of other batch sizes, data that grew): it is compared on "
            "the 12 epochs in a row of about 20 steps, as its report's trend is.") in text.comparison_verdict(c)


def test_a_run_that_slowed_as_it_went_on_is_told_from_a_loaded_machines_odd_epochs(tmp_path):
    # B's epochs grow from A's 1.0 s to 1.5 s through its run: the difference came as it went on, which its
    # report's trend tells; a run of one step up and then flat had read "slowed" or not by one noisy epoch, and
    # steady growth as a plain 1.29x (the probes)
    a = from_walls(tmp_path / "a", [1.0 + 0.001 * (i % 3) for i in range(25)], meta={"label": "A"})
    b = from_walls(tmp_path / "b", [1.0 + 0.5 * i / 24 + 0.001 * (i % 3) for i in range(25)], meta={"label": "B"})
    c = compare(a, b)
    assert c.noise == "slowed" and c.b.slows and not c.a.slows
    assert ("But B's epochs get slower through its run, and A's do not: the difference came as B went on"
            in text.comparison_verdict(c))
    # both slowing alike: no such reason, the difference is the code's
    assert compare(b, from_walls(tmp_path / "c", [1.5 + 0.75 * i / 24 for i in range(25)], meta={"label": "C"})).noise \
        is None


def test_a_few_ms_more_gc_does_not_turn_noise_into_a_difference(tmp_path):
    # two runs of 1 s epochs within each other's spread, B with 3 ms more GC an epoch: "the collector accounts for
    # 73.7% of the difference" of a 0.5% gap (a review); 30 ms more (3% of an epoch) is a difference
    walls = lambda seed: 1.0 + 0.04 * (np.random.default_rng(seed).random(20) - 0.5)  # noqa: E731
    a = write_run(tmp_path / "a", [epoch(i, float(w)) for i, w in enumerate(walls(1))], meta={"label": "A"})
    b = write_run(tmp_path / "b", [epoch(i, float(w) + 0.004, pause=(0, 0, 0.003), collections=(0, 0, 1))
                                   for i, w in enumerate(walls(2))], meta={"label": "B"})
    assert compare(a, b).noise == "overlap"
    gc = write_run(tmp_path / "gc", [epoch(i, float(w) + 0.03, pause=(0, 0, 0.03), collections=(0, 0, 1))
                                     for i, w in enumerate(walls(2))], meta={"label": "GC"})
    assert compare(a, gc).noise is None


def test_gc_inside_the_ops_leaves_the_code_outside_them_said(tmp_path):
    # B: its op 0.2 s longer for GC inside it, and 0.3 s more of code no op covers; "300.00 ms of the 500.00 ms
    # difference is outside the timed ops" went unsaid once every added pause was set against it (a review)
    a = write_run(tmp_path / "a", [epoch(i, 1.0, ops={("x", ()): 0.8}) for i in range(8)], meta={"label": "A"})
    b = write_run(tmp_path / "b", [epoch(i, 1.5, ops={("x", ()): 1.0}, pause=(0, 0, 0.2), collections=(0, 0, 1))
                                   for i in range(8)], meta={"label": "B"})
    words = text.comparison_verdict(compare(a, b))
    assert ("300.00 ms of the 500.00 ms difference is outside the timed ops (500.00 ms per epoch in B against "
            "200.00 ms): code no session.op() covers") in words, words


def test_two_steady_runs_a_few_percent_apart_are_a_measured_difference(tmp_path):
    # every epoch of the slower within 5% of the faster's median: "False is not in list" (a review)
    a = from_walls(tmp_path / "a", [1.000 + 0.0001 * (i % 3) for i in range(10)], meta={"label": "A"})
    b = from_walls(tmp_path / "b", [1.030 + 0.0001 * (i % 3) for i in range(10)], meta={"label": "B"})
    c = compare(a, b)
    assert c.noise is None and text.comparison_verdict(c).startswith("B takes 1.03 s per epoch, A 1.00 s (1.03x).")
