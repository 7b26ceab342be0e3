"""read_run on damaged run directories: a torn last line is tolerated and reported; every other
damage is one RunDirError naming the file and the line."""

import json

import numpy as np
import pytest

from profiler.analysis import analyze
from profiler.rundir import RunDirError, read_run
from profiler.rundir.format import LEGACY_STEP_DTYPE, STEP_RECORD

from .fixtures import epoch, from_walls, write_run
from .rank_runs import synthetic_job


def lines(run):
    return (run / "epochs.jsonl").read_bytes().splitlines()


def rewrite(run, new_lines):
    (run / "epochs.jsonl").write_bytes(b"\n".join(new_lines) + b"\n")


def record(**changes):
    r = epoch(1, 0.01)
    r.update(changes)
    return json.dumps(r).encode()


BIG = 10 ** 400   # digits JSON holds, and no float does


@pytest.mark.parametrize("middle,words", [
    (b'{"epoch": 1, "wall_s": \xff\xfe}', ["line 2", "not UTF-8"]),
    (b"not json", ["line 2 is not valid JSON (Expecting value: column 1)"]),   # one line number: the file's
    (b"[1, 2]", ["line 2", "not a JSON object"]),
    (json.dumps({"epoch": 1, "wall_s": 0.01, "rss_bytes": 1}).encode(), ["line 2", "no 'gc' object"]),
    (json.dumps({"epoch": 1, "gc": {}}).encode(), ["line 2", "has no 'wall_s', 'rss_bytes'"]),
    (record(wall_s="0.01"), ["line 2", "wall_s '0.01'"]),
    (record(wall_s=float("nan")), ["line 2", "wall_s nan"]),
    (record(epoch="a"), ["line 2", "epoch 'a'"]),
    (record(epoch=0.5), ["line 2", "epoch 0.5"]),
    (record(epoch=None), ["line 2", "epoch None"]),
    (record(epoch=0), ["line 2", "epoch 0 after epoch 0", "strictly increase"]),
    (record(epoch=5), ["line 3", "epoch 2 after epoch 5"]),
    (record(ops={"conv": {"calls": "many", "total_s": 1.0}}), ["line 2", "ops['conv']"]),
    (record(ops={"f": {"name": "f", "tags": {"k": [1]}, "calls": 1, "total_s": 0.001}}), ["line 2", "ops['f'] tags"]),
    (record(ops={"f": {"name": "f", "tags": {"k": float("nan")}, "calls": 1, "total_s": 0.001}}),
     ["line 2", "ops['f'] tags", "finite numbers"]),
    (record(ops={"f": {"name": "f", "tags": {}, "calls": 1, "total_s": 0.001, "timed": "x"}}),
     ["line 2", "ops['f'] timed 'x'"]),
    (record(start_s=-1.0), ["line 2", "start_s -1.0"]),
    (record(heap={"traced_bytes": 1, "top_types": [{"count": 1, "count_diff": 1}]}), ["line 2", "heap.top_types"]),
    (record(heap={"traced_bytes": 1, "frames": 0}), ["line 2", "heap.frames 0", "positive count of frames"]),
    (record(heap={"traced_bytes": 1, "frames": 2.5}), ["line 2", "heap.frames 2.5"]),
    (record(wall_s=1e308), ["line 2", "wall_s 1e+308, not a number of seconds between 0 and 1e+07"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], pause_s=[1e300, 0, 0])), ["line 2", "gc.pause_s [1e+300, 0, 0]"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], pause_s=[0.03, 0.02, 0])), ["line 2", "GC pauses of 0.05 s in an epoch of 0.01 s"]),
    (record(rss_bytes=2 ** 63 - 1), ["line 2", "rss_bytes 9223372036854775807, not a number of bytes"]),
    (record(ops={"f": {"calls": 1, "total_s": 1e300}}), ["line 2", "ops['f']"]),
    (record(wall_s=BIG), ["line 2 has wall_s 100000000000... (401 digits), not a number of seconds"]),
    (record(rss_bytes=BIG), ["line 2 has rss_bytes 100000000000... (401 digits), not a number of bytes"]),
    (record(steps=BIG), ["line 2 has steps 100000000000... (401 digits), not a non-negative number"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], collections=[0, 0, BIG])), ["line 2 has gc.collections [0, 0, 1000"]),
    (record(ops={"f": {"calls": BIG, "total_s": 0.001}}), ["line 2 has ops['f']"]),
    (record(epoch=2 ** 63), ["line 2 has epoch 9223372036854775808, not a non-negative integer below 2**63"]),
    (b'{"epoch": 1, "wall_s": ' + b"1" * 5000 + b"}", ["line 2 is not valid JSON (an integer of more than 4,300 digits)"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], forced=[0, 0, -1], forced_pause_s=[0, 0, 0])),
     ["line 2 has gc.forced [0, 0, -1], not three counts (non-negative integers)"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], forced=[0, 0, 0], forced_pause_s=[0, 0, "x"])), ["line 2 has gc.forced_pause_s"]),
    (record(gc=dict(epoch(1, 0.01, collections=(0, 0, 1))["gc"], forced=[0, 0, 2], forced_pause_s=[0, 0, 0])),
     ["line 2 has gc.forced [0, 0, 2] above gc.collections [0, 0, 1]"]),
    (record(gc=dict(epoch(1, 0.01, forced=(0, 0, 0), forced_pause=(0, 0, 0))["gc"], forced_sites=[{"site": 3}])),
     ["line 2 has gc.forced_sites that is not a list of objects with a site, collections and pause_s"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], forced=[0, 0, 0])), ["line 2 has gc.forced, gc.forced_pause_s or "
                                                               "gc.forced_sites without the others"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], forced=None, forced_pause_s=None)),
     ["line 2 has gc.forced None, not three counts (non-negative integers)"]),
    (record(gc=dict(epoch(1, 0.01, collections=(0, 0, 3), forced=(0, 0, 1), forced_pause=(0, 0, 0))["gc"],
                    forced_sites=[{"site": "a.py:1", "collections": 2, "pause_s": 0.0}])),
     ["line 2 has gc.forced_sites counting more collections than gc.forced"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], missed="yes")), ["line 2 has gc.missed 'yes', not three counts"]),
    (record(gc=dict(epoch(1, 0.01)["gc"], missed=[0.5, 0, 0])), ["line 2 has gc.missed [0.5, 0, 0], not three counts"]),
    (record(gc=dict(epoch(1, 0.01, collections=(0, 0, 3))["gc"], forced=[0, 0, 2.5], forced_pause_s=[0, 0, 0])),
     ["line 2 has gc.forced [0, 0, 2.5], not three counts"]),
    (record(gc=dict(epoch(1, 0.01, collections=(0, 0, 1), pause=(0, 0, 0.002))["gc"], forced=[0, 0, 0],
                    forced_pause_s=[0, 0, 0.001])),
     ["line 2 has gc.forced_pause_s [0, 0, 0.001], a pause where gc.forced [0, 0, 0] has no collection"]),
    (record(gc=dict(epoch(1, 0.01, collections=(0, 0, 1), forced=(0, 0, 1), forced_pause=(0, 0, 0))["gc"],
                    forced_sites=[{"site": "", "collections": 1, "pause_s": 0.0}])),
     ["line 2 has gc.forced_sites that is not a list of objects with a site"]),
    (record(gc_before={"collections": [0, 0, 1]}), ["line 2 has gc_before {'collections': [0, 0, 1]}, not an object "
                                                    "with collections (three counts) and pause_s"]),
    (record(gc_before={"collections": [0, 0, 1.5], "pause_s": [0, 0, 0.1]}), ["line 2 has gc_before"]),
    (record(gc_before={"collections": [0, 0, 1], "pause_s": [0, 0, 0.1], "forced": [0, 0, 2], "forced_pause_s": [0, 0, 0]}),
     ["line 2 has gc_before.forced [0, 0, 2] above gc_before.collections [0, 0, 1]"]),
    (record(gc_before={"collections": [0, 0, 1], "pause_s": [0, 0, 0.1], "forced": [0, 0, 1],
                       "forced_pause_s": [0, 0, 0.1], "forced_sites": [{"site": "a.py:1", "collections": 2, "pause_s": 0.1}]}),
     ["line 2 has gc_before.forced_sites counting more collections than gc_before.forced"]),
], ids=["non-utf8", "not-json", "not-object", "no-gc", "no-wall-rss", "wall-string", "wall-nan", "epoch-string", "epoch-float",
        "epoch-null", "epoch-repeated", "epoch-decreasing", "op-calls", "op-tag-list", "op-tag-nan", "op-timed",
        "start-negative",
        "top-type-unnamed", "heap-frames-0", "heap-frames-float", "wall-huge", "pause-huge", "pause-over-wall", "rss-huge", "op-huge",
        "wall-400-digits", "rss-400-digits", "steps-400-digits", "collections-400-digits", "calls-400-digits",
        "epoch-2**63", "int-5000-digits", "forced-negative", "forced-pause-string", "forced-over-collections",
        "forced-sites-unnamed", "forced-alone", "forced-null", "forced-sites-over",
        "missed-string", "missed-fraction", "forced-fraction", "forced-pause-without-collection", "forced-site-empty",
        "before-no-pause", "before-fraction", "before-forced-over", "before-sites-over"])
def test_damaged_middle_line_is_one_clear_error(tmp_path, middle, words):
    run = from_walls(tmp_path / "run", [0.01, 0.01, 0.01])
    first, _, last = lines(run)
    rewrite(run, [first, middle, last])
    with pytest.raises(RunDirError) as info:
        read_run(run)
    message = str(info.value)
    assert "epochs.jsonl" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("workers", [
    {"count": 2}, {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "uss_growth_bytes": "x"},
    {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "new": 3}, {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "new": 0.5},
    {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "gc_copied_max_bytes": "70 MiB"},
    {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "spawned": None},
    {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "full_collections": 1.5},
    {"count": 2.5, "uss_bytes": 1, "pss_bytes": 1},
    {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "batch_bytes": "big"},
    {"count": 2, "uss_bytes": 1, "pss_bytes": 1, "prefetch_factor": "x"}, 4, list(range(1000)),
], ids=["count-only", "growth", "new", "new-fraction", "copied", "spawned", "collections", "count-fraction", "batch",
        "prefetch", "a-count", "long"])
def test_a_workers_field_not_the_profilers_is_left_out_with_a_caution(tmp_path, workers):
    # a program's own add_epoch_field("workers", ...) made the whole run unreadable, or (batch_bytes, prefetch_factor
    # of another type) raised inside the analysis (a probe, a review): its other fields are the run's, so only that
    # field goes, and the reader says so once
    run = from_walls(tmp_path / "run", [0.01, 0.01, 0.01])
    first, middle, last = lines(run)
    odd = lambda line: json.dumps({**json.loads(line), "workers": workers}).encode()  # noqa: E731
    rewrite(run, [first, odd(middle), odd(last)])
    read = read_run(run)
    assert [("workers" in r) for r in read.epochs] == [False] * 3 and read.problems == []
    assert [c for c in read.cautions if "workers" in c] == [
        "the workers field of epochs.jsonl line 2 (and 1 more) is not the profiler's record of worker processes (a "
        "field the program added under that name?), so it is left out"]
    analyze(run)   # nothing of it reaches the findings


@pytest.mark.parametrize("damage,words", [
    (lambda d: (d / "meta.json").unlink(), ["not a run directory", "no meta.json"]),
    (lambda d: (d / "meta.json").write_text("{oops"), ["meta.json", "not valid JSON"]),
    # the decoder's message ends with where it stopped reading, not mid-sentence ("character at)")
    (lambda d: (d / "meta.json").write_text('{"bad\n'),
     ["meta.json is not valid JSON (Invalid control character at: column 6)"]),
    (lambda d: (d / "meta.json").write_text('{\n  "format": 1,\n  "x": tru\n}'),
     ["meta.json is not valid JSON (Expecting value: line 3 column 8)"]),
    (lambda d: (d / "meta.json").write_bytes(b'{"format": 1, "x": "\xff"}'), ["meta.json", "not valid JSON"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({"format": 99, "status": "completed"})), ["format 99"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({"status": "completed"})), ["no 'format'"]),
    (lambda d: (d / "meta.json").write_text("[1, 2, 3]"), ["meta.json is not a JSON object"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({"format": True, "status": "completed"})), ["format True"]),
    (lambda d: (d / "meta.json").write_text(json.dumps({"format": 1.0, "status": "completed"})), ["format 1.0"]),
], ids=["no-meta", "bad-meta", "meta-control-character", "meta-line-3", "meta-not-utf8", "future-format", "no-format", "meta-list", "format-true",
        "format-float"])
def test_damaged_meta_is_one_clear_error(tmp_path, damage, words):
    run = from_walls(tmp_path / "run", [0.01] * 3)
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
    run = from_walls(tmp_path / "run", [0.01] * 4)
    with open(run / "epochs.jsonl", "a") as f:
        f.write('{"epoch": 4, "wall_s": 0.0')
    r = read_run(run)
    assert len(r.epochs) == 4 and not r.complete and "truncated" in r.problems[0]
    assert analyze(run).epochs == 4


def test_empty_run_cannot_be_analyzed(tmp_path):
    run = write_run(tmp_path / "run", [])
    with pytest.raises(RunDirError, match="no finished epochs to analyze"):
        analyze(run)


def test_meta_meta_that_is_not_an_object_is_ignored(tmp_path):
    run = from_walls(tmp_path / "run", [0.01] * 3)
    meta = json.loads((run / "meta.json").read_text())
    meta["meta"] = "a string"
    (run / "meta.json").write_text(json.dumps(meta))
    assert read_run(run).user_meta == {} and analyze(run).meta == {}


def test_steps_and_gc_events_are_memory_mapped_and_torn_records_dropped_and_reported(tmp_path):
    steps = [(0, 0.1 * i, 0.1, 0.0, 0.0, 0.01) for i in range(5)]
    run = write_run(tmp_path / "run", [epoch(0, 0.5)], steps=steps, gc_events=[(0.05, 0.01, 2, 7)])
    with open(run / "steps.bin", "ab") as f:
        f.write(bytes(STEP_RECORD.itemsize)[:10])          # a crash mid-record
    with open(run / "gc_events.bin", "ab") as f:
        f.write(bytes(3))
    r = read_run(run)
    assert r.problems == ["steps.bin ends with 10 bytes of a record cut short (a crash mid-write); they were skipped",
                          "gc_events.bin ends with 3 bytes of a record cut short (a crash mid-write); they were skipped"]
    assert not r.complete
    assert len(r.steps()) == 5 and r.steps()["gc2_s"][4] == pytest.approx(0.01)
    assert r.steps()[1:3]["start_s"] == pytest.approx([0.1, 0.2]) and r.steps()["wall_s"] == pytest.approx([0.1] * 5)
    events = r.gc_events()
    assert len(events) == 1 and events["generation"][0] == 2 and events["collected"][0] == 7


def test_steps_of_a_run_written_in_seconds_are_read_as_they_were(tmp_path):
    """A run from before clock_origin_ns kept each step in seconds (28-byte records): still read."""
    run = write_run(tmp_path / "run", [epoch(0, 0.5)])
    meta = json.loads((run / "meta.json").read_text())
    del meta["clock_origin_ns"]
    (run / "meta.json").write_text(json.dumps(meta))
    legacy = np.zeros(4, LEGACY_STEP_DTYPE)
    legacy["start_s"], legacy["wall_s"], legacy["gc2_s"] = np.arange(4) * 0.1, 0.1, np.arange(4) * 0.01
    legacy.tofile(run / "steps.bin")
    assert LEGACY_STEP_DTYPE.itemsize == 28
    steps = read_run(run).steps()
    assert len(steps) == 4 and steps["start_s"][3] == pytest.approx(0.3)
    assert steps[2:]["gc2_s"] == pytest.approx([0.02, 0.03]) and steps[1]["wall_s"] == pytest.approx(0.1)


def test_steps_lost_from_steps_bin_are_a_problem_of_the_run(tmp_path):
    """steps.bin deleted (or cut) while the run went on: the epochs count more steps than it holds."""
    steps = [(0, 0.1 * i, 0.1, 0.0, 0.0, 0.0) for i in range(3)]
    whole = write_run(tmp_path / "whole", [epoch(0, 0.3, steps=3)], steps=steps)
    assert read_run(whole).complete
    cut = write_run(tmp_path / "cut", [epoch(0, 0.3, steps=3), epoch(1, 0.3, steps=2)], steps=steps)
    assert read_run(cut).problems == ["steps.bin holds 3 steps but epochs.jsonl counts 5: steps were lost (was "
                                      "steps.bin deleted or cut during the run?)"]


@pytest.mark.parametrize("origin", ["0", True, -5, 1 << 63, None, 1.5])
def test_a_clock_origin_that_is_not_a_clock_reading_is_one_clear_error(tmp_path, origin):
    run = write_run(tmp_path / "run", [epoch(0, 0.5)])
    meta = json.loads((run / "meta.json").read_text())
    meta["clock_origin_ns"] = origin
    (run / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match=f"clock_origin_ns {origin!r}, not a perf_counter_ns\\(\\) reading"):
        read_run(run)


def test_steps_are_read_in_seconds_since_the_clock_origin_by_field_slice_or_index(tmp_path):
    run = write_run(tmp_path / "run", [epoch(0, 0.5, steps=4)])
    meta = json.loads((run / "meta.json").read_text())
    meta["clock_origin_ns"] = origin = 7_000_000_000
    (run / "meta.json").write_text(json.dumps(meta))
    records = np.zeros(4, STEP_RECORD)
    records["start_ns"] = origin + np.arange(4) * 100_000_000
    records["end_ns"] = records["start_ns"] + [10_000_000, 20_000_000, 30_000_000, 40_000_000]
    records["gc1_ns"][2] = 5_000_000
    records.tofile(run / "steps.bin")
    steps = read_run(run).steps()
    assert len(steps) == 4 and steps["start_s"] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert steps[1:3]["wall_s"] == pytest.approx([0.02, 0.03]) and steps[::2]["gc1_s"] == pytest.approx([0.0, 0.005])
    one = steps[-2]
    assert one.shape == () and one["gc1_s"] == pytest.approx(0.005) and one["start_s"] == pytest.approx(0.2)
    assert np.asarray(steps).shape == (4,) and list(np.asarray(steps)["epoch"]) == [0] * 4


def test_step_that_ends_before_it_starts_is_one_clear_error(tmp_path):
    steps = [(0, 0.0, 0.1, 0.0, 0.0, 0.0), (0, 0.1, -0.05, 0.0, 0.0, 0.0)]
    run = write_run(tmp_path / "run", [epoch(0, 0.2)], steps=steps)
    with pytest.raises(RunDirError, match=r"steps.bin record 1 has wall_s -0.05, not a time"):
        analyze(run)


def test_gc_pause_within_clock_slack_of_the_wall_time_is_accepted(tmp_path):
    """An epoch that is nearly all GC pause reads its clocks twice: 1% + 1 ms over its wall time is fine."""
    run = write_run(tmp_path / "run", [epoch(0, 0.1, pause=(0.0, 0.0, 0.1005)), epoch(1, 0.0, pause=(0.0009, 0, 0))])
    assert [sum(r["gc"]["pause_s"]) for r in read_run(run).epochs] == [0.1005, 0.0009]


def test_step_with_a_finite_but_impossible_time_is_one_clear_error(tmp_path):
    steps = [(0, 0.0, 0.1, 0.0, 0.0, 0.0), (0, 0.1, 0.1, 0.0, 0.0, 4e9)]
    run = write_run(tmp_path / "run", [epoch(0, 0.2)], steps=steps)
    with pytest.raises(RunDirError, match=r"steps.bin record 1 has gc2_s 4e\+09, not a time between 0 and 1e\+07 s"):
        analyze(run)


def test_gc_events_that_could_not_be_written_are_a_caution_not_a_problem_of_the_run(tmp_path):
    run = write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(4)])
    meta = json.loads((run / "meta.json").read_text())
    meta["gc_events_dropped"] = 7
    (run / "meta.json").write_text(json.dumps(meta))
    r = read_run(run)
    assert r.complete and r.problems == [] and any("7 GC events could not be written" in p for p in r.cautions)


@pytest.mark.parametrize("event,words", [
    ((0.05, float("nan"), 2, 7), "gc_events.bin record 1 has duration_s nan, not a time"),
    ((1e300, 0.01, 2, 7), "gc_events.bin record 1 has start_s 1e+300, not a time"),
    ((0.05, float("inf"), 2, 7), "gc_events.bin record 1 has duration_s inf"),
    ((0.05, -0.01, 2, 7), "gc_events.bin record 1 has duration_s -0.01"),
    ((0.05, 0.01, 255, 7), "gc_events.bin record 1 has generation 255, not 0, 1 or 2"),
], ids=["nan", "huge-start", "inf", "negative", "generation"])
def test_a_gc_event_this_profiler_cannot_have_written_is_one_clear_error(tmp_path, event, words):
    run = write_run(tmp_path / "run", [epoch(0, 0.5)], gc_events=[(0.01, 0.01, 2, 3), event])
    with pytest.raises(RunDirError, match=words.replace("+", r"\+")):
        read_run(run)   # every reader (report, compare, timeline) meets the same error


def test_steps_bin_of_garbage_or_written_twice_is_one_clear_error(tmp_path):
    steps = [(e, 0.1 * i, 0.1, 0.0, 0.0, 0.0) for i, e in enumerate([0, 0, 1, 1])]
    run = write_run(tmp_path / "run", [epoch(0, 0.2, steps=2), epoch(1, 0.2, steps=2)], steps=steps)
    whole = (run / "steps.bin").read_bytes()
    (run / "steps.bin").write_bytes(whole + whole)   # appended to itself: epoch 0 after epoch 1
    with pytest.raises(RunDirError, match="steps.bin record 4 has epoch 0, after epoch 1: not written"):
        read_run(run)
    (run / "steps.bin").write_bytes(b"\xff" * len(whole))
    with pytest.raises(RunDirError, match="steps.bin record 0 has "):
        read_run(run)
    records = np.frombuffer(whole, STEP_RECORD).copy()
    records["epoch"][0] = -3
    (run / "steps.bin").write_bytes(records.tobytes())
    with pytest.raises(RunDirError, match="steps.bin record 0 has epoch -3, not a non-negative integer"):
        read_run(run)


@pytest.mark.parametrize("call", [lambda: analyze(None), lambda: read_run(123), lambda: analyze(["run"]),
                                  lambda: __import__("profiler").compare("run", None)],
                         ids=["analyze-None", "read_run-int", "analyze-list", "compare-None"])
def test_a_run_directory_that_is_not_a_path_is_a_usage_error(call):
    from profiler.errors import UsageError
    with pytest.raises(UsageError, match=r"run directory .*: expected a path \(str or os.PathLike\), got "):
        call()


def test_compare_takes_runs_read_already_and_a_wrong_one_is_named_in_one_short_line(tmp_path):
    """analyze() takes a Run read already, and so does compare(); anything else that is no path is
    named cut short (a probe passed a Run's epochs: a 36 KB message)."""
    from profiler.analysis import compare
    from profiler.errors import UsageError
    for name, wall in (("a", 0.02), ("b", 0.01)):
        write_run(tmp_path / name, [epoch(i, wall) for i in range(6)], meta={"label": name})
    c = compare(read_run(tmp_path / "a"), tmp_path / "b")
    assert (c.a.label, c.b.label) == ("a", "b") and c.ratio == pytest.approx(2.0)
    synthetic_job(tmp_path / "job", 2, 10)
    with pytest.raises(RunDirError) as info:   # a Run is named by its path, not its records
        compare(read_run(tmp_path / "a"), tmp_path / "job")
    assert str(info.value) == (f"{tmp_path / 'job'} is a multi-rank run and {tmp_path / 'a'} a single run: compare two "
                               f"of a kind (or one rank's directory, rank-<RANK>/, with the single run)")
    with pytest.raises(UsageError) as info:
        compare(read_run(tmp_path / "a").epochs, tmp_path / "b")
    message = str(info.value)
    assert message.startswith("run directory [{'epoch': 0, ") and "..." in message and len(message) < 200, message


@pytest.mark.parametrize("runs", [["a", "b"], {"a": "x", "b": "y"}, {1: "x", -2: "y"}, {True: "x", 2: "y"}])
def test_scaling_takes_positive_max_epochs_as_keys(runs):
    from profiler.analysis import scaling
    from profiler.errors import UsageError
    with pytest.raises(UsageError, match=r"scaling\(\) takes \{max_epochs: run_dir\} with positive int keys"):
        scaling(runs)


@pytest.mark.parametrize("name", ["meta.json", "epochs.jsonl", "steps.bin", "gc_events.bin"])
def test_a_directory_where_a_file_belongs_is_one_clear_error(tmp_path, name):
    run = write_run(tmp_path / "run", [epoch(0, 0.5)])
    path = run / name
    if path.exists():
        path.unlink()
    path.mkdir()
    with pytest.raises(RunDirError, match=f"cannot read {path}: it is a directory, where the profiler writes a file"):
        read_run(run)


def test_a_line_nested_too_deeply_is_not_valid_json(tmp_path):
    run = from_walls(tmp_path / "run", [0.01, 0.01, 0.01])
    first, _, last = lines(run)
    rewrite(run, [first, b"[" * 100_000, last])
    with pytest.raises(RunDirError, match="line 2 is not valid JSON \\(nested too deeply\\)"):
        read_run(run)


def test_records_are_checked_across_chunk_boundaries(tmp_path, monkeypatch):
    from profiler.rundir import reader
    monkeypatch.setattr(reader, "CHUNK", 2)
    steps = [(e, 0.1 * i, 0.1, 0.0, 0.0, 0.0) for i, e in enumerate([0, 0, 1, 1, 1, 2])]
    run = write_run(tmp_path / "run", [epoch(e, 0.3, steps=n) for e, n in ((0, 2), (1, 3), (2, 1))], steps=steps,
                    gc_events=[(0.05, 0.01, 2, 3)] * 4 + [(0.05, float("nan"), 2, 3)])
    with pytest.raises(RunDirError, match="gc_events.bin record 4 has duration_s nan"):
        read_run(run)
    (run / "gc_events.bin").unlink()
    assert len(read_run(run).steps()) == 6   # the epoch carried from one chunk to the next is no step back
    records = np.fromfile(run / "steps.bin", STEP_RECORD)
    records["epoch"][4] = 0   # the first record of the third chunk goes back
    records.tofile(run / "steps.bin")
    with pytest.raises(RunDirError, match="steps.bin record 4 has epoch 0, after epoch 1"):
        read_run(run)
    records["epoch"][4], records["epoch"][5] = 2, -2 ** 63 + 1   # 2 - that overflows int64: compared, not subtracted
    records.tofile(run / "steps.bin")
    with pytest.raises(RunDirError, match="steps.bin record 5 has epoch -9223372036854775807, after epoch 2"):
        read_run(run)


@pytest.mark.parametrize("name", ["steps.bin", "epochs.jsonl", "meta.json"])
def test_a_pipe_where_a_file_belongs_is_one_clear_error_not_a_hang(tmp_path, name):
    # epochs.jsonl or meta.json as a pipe hung `report` (a probe; /dev/zero linked there ate all memory)
    import os
    run = write_run(tmp_path / "run", [epoch(0, 0.5)])
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)
    with pytest.raises(RunDirError, match=f"{name}: it is a special file, where the profiler writes a file"):
        read_run(run)


def test_a_directory_of_runs_names_them(tmp_path):
    for name in ("b", "a"):
        from_walls(tmp_path / "runs" / name, [0.01, 0.01])
    with pytest.raises(RunDirError, match=r"runs is not a run directory but holds 2 \(a, b\): give one of them"):
        read_run(tmp_path / "runs")


def test_steps_of_epochs_without_a_line_are_left_out_or_named(tmp_path):
    from profiler import Session
    with Session(tmp_path / "run") as session:
        for _ in range(3):
            with session.epoch():
                for _ in range(2):
                    with session.step():
                        pass
    run = tmp_path / "run"
    steps = run / "steps.bin"
    whole = np.fromfile(steps, STEP_RECORD)
    extra = np.repeat(whole[-1:], 5)
    extra["epoch"] = 3
    with open(steps, "ab") as f:   # 5 steps of an epoch 3 that has no line (cut short by a crash)
        f.write(extra.tobytes())
    r = read_run(run)
    assert len(r.steps()) == 6 and r.steps()["epoch"].max() == 2
    assert "steps.bin ends with 5 steps of epoch 3, which epochs.jsonl has no line for (cut short or abandoned): " \
           "they are left out" in r.problems
    assert analyze(run).steps.count == 6
    original = lines(run)
    rewrite(run, [original[0], original[2]])   # epoch 1's line removed
    r = read_run(run)
    assert any("steps of epoch 1, which epochs.jsonl has no line for" in p for p in r.problems)
    assert "meta.json counts 3 epochs but epochs.jsonl holds 2: lines were lost or removed after the run" in r.problems
    rewrite(run, [original[0], b"", original[2]])
    assert "epochs.jsonl line 2 is blank (not written by this profiler); it was skipped" in read_run(run).problems


def damage_meta(run, **fields):
    meta = json.loads((run / "meta.json").read_text())
    meta.update(fields)
    (run / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("fields,shown", [
    ({"status": 5}, "status 5, not a string"),
    ({"status": None}, "status None, not a string"),
    ({"options": "zz"}, "options 'zz', not an object"),
    ({"options": {"gc_policy": ["off"]}}, "options.gc_policy ['off'], not a string or null"),
    ({"error": {"type": "x"}}, "error {'type': 'x'}, not a string or null"),
    ({"epochs": "3"}, "epochs '3', not a count of epochs"),
    ({"epochs": True}, "epochs True, not a count of epochs"),
    ({"gc_events_dropped": -1}, "gc_events_dropped -1, not a count of GC events"),
    ({"finished_unix": "today"}, "finished_unix 'today', not a Unix time or null"),
], ids=["status-int", "status-null", "options-string", "gc-policy-list", "error-object", "epochs-string",
        "epochs-bool", "dropped-negative", "finished-string"])
def test_a_meta_field_of_the_wrong_json_type_is_one_clear_error(tmp_path, fields, shown):
    run = from_walls(tmp_path / "run", [0.01] * 3)
    damage_meta(run, **fields)
    with pytest.raises(RunDirError) as info:
        read_run(run)
    assert str(info.value) == f"{run / 'meta.json'} has {shown}: not written by this profiler"


def test_a_meta_json_with_an_integer_too_long_to_read_is_one_clear_error(tmp_path):
    run = from_walls(tmp_path / "run", [0.01] * 3)
    (run / "meta.json").write_text('{"format": 1, "status": "completed", "pid": ' + "9" * 5000 + "}")
    with pytest.raises(RunDirError, match=r"meta.json is not valid JSON \(an integer of more than 4,300 digits\)$"):
        read_run(run)


@pytest.mark.parametrize("damage,line", [
    (lambda run: damage_meta(run, options="zz"), "{run}/meta.json has options 'zz', not an object: not written by "
                                                 "this profiler"),
    (lambda run: damage_meta(run, status=5), "{run}/meta.json has status 5, not a string: not written by this profiler"),
    (lambda run: rewrite(run, lines(run)[:-1] + [record(epoch=BIG)]),
     "{run}/epochs.jsonl line 3 has epoch 100000000000... (401 digits), not a non-negative integer below 2**63: not "
     "an epoch record written by this profiler"),
], ids=["options-string", "status-int", "last-epoch-400-digits"])
@pytest.mark.parametrize("command", [["report", "{run}"], ["report", "{run}", "--json"],
                                     ["report", "{run}", "--html", "{tmp}/r.html"], ["compare", "{good}", "{run}"]],
                         ids=["report", "json", "html", "compare"])
def test_the_cli_reads_a_damaged_meta_or_epoch_as_one_line_and_exit_2(tmp_path, capsys, damage, line, command):
    from profiler.cli import main
    good = from_walls(tmp_path / "good", [0.01] * 3)
    run = from_walls(tmp_path / "run", [0.01] * 3)
    damage(run)
    assert main([a.format(run=run, good=good, tmp=tmp_path) for a in command]) == 2
    assert capsys.readouterr().err.splitlines() == ["profiler: error: " + line.format(run=run)]
    assert not (tmp_path / "r.html").exists()


def test_a_failed_runs_error_of_many_lines_is_one_line_among_its_problems(tmp_path):
    run = from_walls(tmp_path / "run", [0.01] * 3)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(status="failed", error="RuntimeError: Caught ValueError in DataLoader worker process 0.\n"
                                       "Original Traceback (most recent call last):\n  File ...\nValueError: bad\n")
    (run / "meta.json").write_text(json.dumps(meta))
    assert read_run(run).problems == ["the run failed: RuntimeError: Caught ValueError in DataLoader worker "
                                      "process 0. (...)"]


def test_a_huge_error_written_before_errors_were_capped_is_read_cut(tmp_path):
    # a 50-MB error made `report` run for minutes (a probe): what reads it gets at most 10,000 characters
    run = write_run(tmp_path / "run", [epoch(0, 0.5)], status="failed")
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(dict(meta, error="ValueError: " + "x" * 1_000_000)))
    r = read_run(run)
    assert r.meta["error"] == "ValueError: " + "x" * 9_988 + "... (1,000,012 characters)"
    assert r.problems[0].endswith("... (1,000,012 characters)")


def test_a_link_to_nothing_is_said_to_be_one(tmp_path):
    # a symlink loop was "does not exist" (a probe)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(RunDirError, match=r"a is a symbolic link to nothing that exists \(a loop, or a target gone\)"):
        read_run(tmp_path / "a")
    with pytest.raises(RunDirError, match="none does not exist"):
        read_run(tmp_path / "none")


def test_a_run_directory_may_be_replaced_only_when_it_holds_nothing_but_a_runs_files(tmp_path):
    from profiler.rundir.format import replaceable
    run = from_walls(tmp_path / "run", [0.01, 0.01])
    assert replaceable(run) and replaceable(tmp_path / "absent")
    (tmp_path / "job" / "rank-0").mkdir(parents=True)
    assert replaceable(tmp_path / "job")
    (tmp_path / "odd" / "meta.json").mkdir(parents=True)   # a directory of that name is no record (a review)
    (tmp_path / "odd" / "meta.json" / "mine.txt").write_text("mine")
    (tmp_path / "link").symlink_to(run)   # nor is a link, whose target is elsewhere
    (tmp_path / "afile").write_text("")
    assert not any(replaceable(tmp_path / name) for name in ("odd", "link", "afile"))
