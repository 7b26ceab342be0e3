"""The diagnosis on loops it has never seen, the layout comparison's arithmetic, scaling, and the
run-directory reader's answers to damaged input."""

import gc
import json
import random
import time

import numpy as np
import pytest

from profiler import Session
from profiler.analysis import analyze, compare, scaling, series
from profiler.rundir import RunDirError, read_run


def profile(path, epochs, body, **session_options):
    with Session(path, **session_options) as session:
        for epoch in range(epochs):
            with session.epoch(epoch):
                body(session, epoch)
    return path


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_loop_whose_gc_work_grows_is_gc(tmp_path):
    kept = []

    def body(session, epoch):
        busy(0.002)
        kept.append([[i] for i in range(15000)])   # tracked objects that live on
        gc.collect()
    gc.freeze()
    try:
        d = analyze(profile(tmp_path / "run", 40, body))
    finally:
        gc.unfreeze()
    assert d.primary_cause == "gc", d.verdict
    assert d.epoch_time["slowdown"] and d.epoch_time["ratio"] > 2
    assert d.gc["explained_fraction"] > 0.7 and d.gc["share_late"] > d.gc["share_early"]
    assert d.gc["generation"] == 2
    assert "Garbage collection explains" in d.verdict and "%" in d.verdict
    assert "They accumulate: RSS grows" in d.verdict      # both: the GC cost and the objects piling up


def test_loop_that_leaks_arrays_is_allocation_with_the_line(tmp_path):
    kept = []

    def body(session, epoch):
        busy(0.001)
        kept.append(np.ones(1_000_000, np.float32))   # 4 MB kept per epoch
    d = analyze(profile(tmp_path / "run", 30, body, tracemalloc=True))
    assert d.primary_cause == "allocation", d.verdict
    a = d.allocation
    assert a["traced_growth_bytes_per_epoch"] == pytest.approx(4e6, rel=0.1)
    assert a["malloc_growth_bytes_per_epoch"] == pytest.approx(4e6, rel=0.2)
    top = a["top_sites"][0]
    assert top["site"].endswith(f"test_analysis.py:{body.__code__.co_firstlineno + 2}") and top["kind"] == "numpy"
    assert "test_analysis.py" in d.verdict


def test_merely_noisy_loop_is_none(tmp_path):
    rng = random.Random(0)

    def body(session, epoch):
        with session.op("work"):
            busy(0.003 * rng.uniform(0.7, 1.3) + (0.02 if epoch % 9 == 4 else 0.0))
    d = analyze(profile(tmp_path / "run", 60, body))
    assert d.primary_cause == "none", d.verdict
    assert not d.epoch_time["slowdown"] and "do not get slower" in d.verdict


def test_loop_whose_op_grows_is_compute_naming_the_op(tmp_path):
    def body(session, epoch):
        with session.op("data", layout="NHWC"):
            busy(0.002)
        with session.op("matmul", layout="NCHW"):
            busy(0.001 + 0.0004 * epoch)
    d = analyze(profile(tmp_path / "run", 30, body))
    assert d.primary_cause == "compute", d.verdict
    assert d.ops[0]["op"] == "matmul[NCHW]" and "matmul in NCHW" in d.verdict


def test_report_json_has_the_contract_fields(tmp_path):
    d = analyze(profile(tmp_path / "run", 6, lambda s, e: busy(0.001)))
    out = json.loads(json.dumps(d.to_dict()))
    assert out["epochs"] == 6 and out["status"] == "completed"
    assert set(out["epoch_time"]) >= {"early_median_s", "late_median_s", "ratio"}
    assert out["primary_cause"] in ("none", "gc", "allocation", "compute")
    assert set(out["gc"]) >= {"share_early", "share_late", "explained_fraction"}
    assert set(out["allocation"]) >= {"rss_growth_bytes_per_epoch", "traced_growth_bytes_per_epoch", "top_sites"}
    assert out["allocation"]["traced_growth_bytes_per_epoch"] is None and isinstance(out["verdict"], str)


def test_compare_what_if_arithmetic(tmp_path):
    def loop(slow_bias):
        def body(session, epoch):
            with session.op("conv2d_forward", layout="L"):
                busy(0.004)
            with session.op("broadcast_add_backward", layout="L"):
                busy(0.006 if slow_bias else 0.002)
        return body
    a = profile(tmp_path / "a", 8, loop(True), meta={"layout": "NCHW"})
    b = profile(tmp_path / "b", 8, loop(False), meta={"layout": "NHWC"})
    c = compare(a, b)
    assert c.a["label"] == "NCHW" and c.b["label"] == "NHWC" and c.ratio > 1.2
    top = c.rows[0]
    assert top["op"] == "broadcast_add_backward" and top["ratio"] == pytest.approx(3.0, rel=0.25)
    assert top["a_if_b_speed_s"] == pytest.approx(c.a["epoch_s"] - top["a_s"] + top["b_s"])
    assert "If broadcast_add_backward in NCHW ran at its NHWC speed" in c.verdict


def test_scaling_says_whether_epoch_time_depends_on_max_epochs(tmp_path):
    def run(name, cost, kept=0):
        def body(session, epoch):
            busy(cost)
            gc.collect()
        gc.freeze()
        history = [[i] for i in range(kept)]   # tracked objects sized by "max_epochs", made after the freeze
        try:
            return profile(tmp_path / name, 6, body)
        finally:
            gc.unfreeze()
            del history
    flat = scaling({100: run("a", 0.002), 1000: run("b", 0.002)})
    assert not flat.depends and "does not depend" in flat.verdict
    grows = scaling({100: run("c", 0.002), 300_000: run("d", 0.002, kept=300_000)})
    assert grows.depends and grows.ratio > 2 and grows.gc_explained > 0.8, grows.verdict
    assert "depends on max_epochs" in grows.verdict
    unexplained = scaling({100: run("e", 0.002), 10000: run("f", 0.006)})   # slower, but not through GC
    assert not unexplained.depends and "explain only" in unexplained.verdict


def test_series_downsamples_long_runs_without_truncating(tmp_path):
    d = profile(tmp_path / "run", 50, lambda s, e: None)
    s = series(d, max_points=10)
    assert s["downsampled"] and len(s["epoch"]) == 10 and s["epochs"] == 50
    assert s["epoch"][-1] == pytest.approx(47, abs=0.01)   # the last bin's mean epoch: the tail is kept


# -- run directories -------------------------------------------------------------------------

def finished_run(tmp_path, epochs=3):
    return profile(tmp_path / "run", epochs, lambda s, e: None)


def _first_line(run):
    return (run / "epochs.jsonl").read_text().splitlines()[0]


@pytest.mark.parametrize("damage,words", [
    (lambda d: (d / "meta.json").unlink(), ["not a run directory", "no meta.json"]),
    (lambda d: (d / "meta.json").write_text("{oops"), ["meta.json", "not valid JSON"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({"format": 99, "status": "completed"})),
     ["format 99", "format 1"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({"status": "completed"})), ["no 'format'"]),
    (lambda d: (d / "epochs.jsonl").write_text(_first_line(d) + '\nnot json\n' + _first_line(d) + '\n'),
     ["line 2", "not valid JSON"]),
    (lambda d: (d / "epochs.jsonl").write_text(_first_line(d) + '\n[1, 2]\n'),
     ["line 2", "not an epoch record"]),
], ids=["no-meta", "bad-meta", "future-format", "no-format", "bad-line", "not-a-record"])
def test_damaged_run_directories_get_one_clear_error(tmp_path, damage, words):
    run = finished_run(tmp_path)
    damage(run)
    with pytest.raises(RunDirError) as info:
        read_run(run)
    for word in words:
        assert word in str(info.value)


def test_not_a_directory_and_missing(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="not a directory"):
        read_run(tmp_path / "file")
    with pytest.raises(RunDirError, match="does not exist"):
        read_run(tmp_path / "nope")


def test_truncated_last_line_is_tolerated_and_reported(tmp_path):
    run = finished_run(tmp_path, epochs=4)
    with open(run / "epochs.jsonl", "a") as f:
        f.write('{"epoch": 4, "wall_s": 0.0')
    r = read_run(run)
    assert len(r.epochs) == 4 and not r.complete and "truncated" in r.problems[0]
    d = analyze(run)
    assert d.epochs == 4 and not d.complete and "incomplete" in d.verdict


def test_empty_run_cannot_be_analyzed(tmp_path):
    with Session(tmp_path / "run"):
        pass
    with pytest.raises(RunDirError, match="no finished epochs"):
        analyze(tmp_path / "run")


def test_writing_into_an_existing_run_is_refused(tmp_path):
    finished_run(tmp_path)
    with pytest.raises(OSError, match="already holds a run"):
        with Session(tmp_path / "run"):
            pass


def test_scaling_is_labelled_from_the_runs_meta(tmp_path):
    runs = {n: profile(tmp_path / str(n), 5, lambda s, e: None,
                       meta={"scenario": "mlp", "history": "preallocated", "gc_collect": "epoch"}) for n in (10, 100)}
    assert scaling(runs).label == "scenario=mlp history=preallocated gc_collect=epoch"
